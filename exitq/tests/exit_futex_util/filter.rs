//! The ftrace filter that separates foreign futex calls from the C
//! runtime's own: the runtime libraries' data, malloc arenas, the thread's
//! own `struct pthread`, and Rust std's exit-time lock (found by symbol).

/// The C runtime libraries whose own locks an exiting thread may contend
/// on: glibc (`free_list_lock`, the stack cache, `main_arena`), the
/// dynamic loader (the unwinder's `dl_iterate_phdr` lock) and libgcc's
/// unwinder.
pub const RUNTIME_LIBS: [&str; 3] = ["/libc.so.6", "/ld-linux-x86-64.so.2", "/libgcc_s.so.1"];

/// glibc's `HEAP_MAX_SIZE` on 64-bit: a thread arena's heap starts at a
/// multiple of it, with the arena's `malloc_state` (and its mutex) first.
pub const ARENA_HEAP_ALIGN: u64 = 64 << 20;

/// The mangled-name tail of Rust std's `stack_overflow::thread_info::LOCK`:
/// a global `Mutex<()>` every `std::thread` takes on exit (dropping its
/// signal-stack handler), so threads exiting together contend on it.
pub const STD_THREAD_INFO_LOCK: &str = "14stack_overflow11thread_info4LOCK";

/// The run-time address of the symbol of this executable whose name
/// contains `needle`, from its ELF symbol table (`None` if stripped).
pub fn own_symbol(needle: &str) -> Option<u64> {
    let exe = std::fs::read("/proc/self/exe").ok()?;
    let u16_at = |o: usize| Some(u16::from_le_bytes(exe.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(exe.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(exe.get(o..o + 8)?.try_into().ok()?));
    // ELF64 little-endian only (x86_64).
    if exe.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (shoff, shentsize, shnum) = (u64_at(0x28)? as usize, u16_at(0x3a)?, u16_at(0x3c)?);
    let section = |i: usize| shoff + i * shentsize as usize;
    // SHT_SYMTAB = 2.
    let symtab = (0..shnum as usize).find(|&i| u32_at(section(i) + 4) == Some(2))?;
    let (sym_off, sym_size) = (
        u64_at(section(symtab) + 0x18)? as usize,
        u64_at(section(symtab) + 0x20)? as usize,
    );
    let strtab = section(u32_at(section(symtab) + 0x28)? as usize);
    let str_off = u64_at(strtab + 0x18)? as usize;
    let value = (0..sym_size / 24).find_map(|k| {
        let sym = sym_off + k * 24;
        let name = str_off + u32_at(sym)? as usize;
        let end = name + exe.get(name..)?.iter().position(|&b| b == 0)?;
        let matches = std::str::from_utf8(&exe[name..end]).ok()?.contains(needle);
        if matches {
            u64_at(sym + 8)
        } else {
            None
        }
    })?;
    // A position-independent executable is mapped at the start of its
    // first mapping (file offset 0, first segment at address 0).
    let exe_path = std::fs::read_link("/proc/self/exe").ok()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let base = maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let lo = f.next()?.split_once('-')?.0;
        let offset = f.nth(1)?;
        let path = f.nth(2)?;
        if path == exe_path.to_str()? && u64::from_str_radix(offset, 16).ok()? == 0 {
            u64::from_str_radix(lo, 16).ok()
        } else {
            None
        }
    })?;
    Some(base + value)
}

/// An ftrace filter for `sys_enter_futex` that keeps only the futex calls
/// on words that are *not* the runtime's own: not in the data (or bss)
/// of [`RUNTIME_LIBS`], not in a glibc thread arena's header, not in the
/// exiting thread's own `struct pthread` at `pd` (its `exit_lock`, which
/// `pthread_cancel` holds while it signals the thread), and not Rust std's
/// exit-time lock at `std_lock` ([`STD_THREAD_INFO_LOCK`]).
///
/// Whatever exitq (or the test) might wait on or wake lives elsewhere
/// (heap, other statics of the binary, stacks), so on an exit path these
/// calls are the ones exitq could be responsible for.
pub fn foreign_futex_filter(pd: u64, std_lock: Option<u64>) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let mut skip: Vec<(u64, u64)> = vec![(pd, pd + 0x1000)];
    if let Some(lock) = std_lock {
        skip.push((lock, lock + 4));
    }
    let mut runtime_end = None;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let Some((lo, hi)) = fields.next().and_then(|r| r.split_once('-')) else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        let path = fields.nth(4);
        if path.is_some_and(|p| RUNTIME_LIBS.iter().any(|l| p.ends_with(l))) {
            skip.push((lo, hi));
            runtime_end = Some(hi);
            continue;
        }
        if path.is_none() {
            if runtime_end == Some(lo) {
                // The library's bss, right after its file mappings.
                skip.push((lo, hi));
            } else if lo % ARENA_HEAP_ALIGN == 0 {
                skip.push((lo, lo + 0x1000));
            }
        }
        runtime_end = None;
    }
    skip.iter()
        .map(|(lo, hi)| format!("(uaddr < {lo:#x} || uaddr >= {hi:#x})"))
        .collect::<Vec<_>>()
        .join(" && ")
}
