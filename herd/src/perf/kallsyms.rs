//! Kernel symbols from `/proc/kallsyms`: lock addresses to names
//! (`tasklist_lock`) and call-chain addresses to functions.
//!
//! Addresses read as zero unless the reader may see them
//! (`kernel.kptr_restrict`, root); [`Symbols::hidden`] says so, and the
//! contention table then shows raw addresses and a note.

use std::collections::HashMap;

/// A sorted kernel symbol table.
#[derive(Debug, Default, Clone)]
pub struct Symbols {
    /// (address, type letter, name), sorted by address.
    syms: Vec<(u64, u8, String)>,
    /// True when kallsyms exists but every address reads 0.
    pub hidden: bool,
    /// Named section bounds used to skip lock/scheduler frames.
    bounds: HashMap<&'static str, u64>,
    /// True when static data symbols are listed (CONFIG_KALLSYMS_ALL):
    /// without them, naming a lock after the nearest symbol would be wrong.
    pub data_symbols: bool,
    /// The kernel image: `_text` up to the last built-in symbol.
    image: Option<(u64, u64)>,
}

/// Where a lock lives, when it has no symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// Static: in the kernel image or a module (kallsyms lists no data symbols).
    KernelImage,
    /// Anywhere else: inside a heap object (an mm, a task, a hash bucket).
    Dynamic,
}

const BOUNDS: [&str; 4] = [
    "__lock_text_start",
    "__lock_text_end",
    "__sched_text_start",
    "__sched_text_end",
];

impl Symbols {
    /// Reads `/proc/kallsyms`; an empty table when it is unreadable.
    pub fn load() -> Symbols {
        std::fs::read_to_string("/proc/kallsyms")
            .map(|t| Symbols::parse(&t))
            .unwrap_or_default()
    }

    /// Parses kallsyms text: `ffffffff81000000 T _stext [module]`.
    pub fn parse(text: &str) -> Symbols {
        let mut syms = Vec::new();
        let mut bounds = HashMap::new();
        let mut any = false;
        let (mut text_start, mut last_builtin) = (None, 0u64);
        let mut small_data = 0usize;
        let mut tasklist = false;
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            any = true;
            if addr == 0 {
                continue;
            }
            if let Some(b) = BOUNDS.iter().find(|b| **b == name) {
                bounds.insert(*b, addr);
            }
            if name == "_text" || (name == "_stext" && text_start.is_none()) {
                text_start = Some(addr);
            }
            if it.next().is_none() {
                last_builtin = last_builtin.max(addr);
            }
            small_data += matches!(ty.as_bytes()[0], b'd' | b'b') as usize;
            tasklist |= name == "tasklist_lock";
            syms.push((addr, ty.as_bytes()[0], name.to_string()));
        }
        syms.sort_by_key(|s| s.0);
        Symbols {
            hidden: any && syms.is_empty(),
            syms,
            bounds,
            data_symbols: tasklist || small_data >= 100,
            image: text_start.map(|t| (t, last_builtin)),
        }
    }

    /// True when no symbol is known.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    fn containing(&self, addr: u64) -> Option<(usize, u64)> {
        let i = self.syms.partition_point(|s| s.0 <= addr).checked_sub(1)?;
        Some((i, addr - self.syms[i].0))
    }

    /// The data symbol a lock address belongs to (`tasklist_lock`,
    /// `some_table+0x40`). Only static data (types d, b, r) qualify: a
    /// lock inside a heap object (an mm's mmap_lock) has no symbol, and
    /// naming the nearest one would be a lie.
    pub fn lock_name(&self, addr: u64) -> Option<String> {
        if !self.data_symbols {
            return None;
        }
        let (i, off) = self.containing(addr)?;
        let (_, ty, name) = &self.syms[i];
        if !matches!(ty.to_ascii_lowercase(), b'd' | b'b' | b'r') {
            return None;
        }
        // The next symbol bounds this one, and nothing is credibly a lock
        // more than 1 MiB into a symbol.
        let end = self.syms.get(i + 1).map_or(u64::MAX, |n| n.0);
        if addr >= end || off >= 1 << 20 {
            return None;
        }
        Some(if off == 0 {
            name.clone()
        } else {
            format!("{name}+{off:#x}")
        })
    }

    /// Where an unnamed lock lives: static (at or above `_text`: the
    /// kernel image, its .bss, or a module) or dynamic memory (the direct
    /// map, vmalloc, vmemmap, all below the image on x86-64). A heuristic
    /// for display only; the address is always shown.
    pub fn region(&self, addr: u64) -> Region {
        match self.image {
            Some((start, _)) if start <= addr => Region::KernelImage,
            _ => Region::Dynamic,
        }
    }

    /// The text symbol of a code address, as `name+0xoff`.
    pub fn function(&self, addr: u64) -> Option<(&str, u64)> {
        let (i, off) = self.containing(addr)?;
        let (_, ty, name) = &self.syms[i];
        matches!(ty.to_ascii_lowercase(), b't' | b'w').then_some((name.as_str(), off))
    }

    fn in_section(&self, addr: u64, start: &str, end: &str) -> bool {
        match (self.bounds.get(start), self.bounds.get(end)) {
            (Some(&s), Some(&e)) => s <= addr && addr < e,
            _ => false,
        }
    }

    /// True for frames that are part of taking a lock or sleeping, which
    /// `perf lock contention` skips to find the caller: the lock and sched
    /// text sections, the tracing glue, and the lock slow paths by name.
    pub fn is_lock_frame(&self, addr: u64) -> bool {
        if self.in_section(addr, "__lock_text_start", "__lock_text_end")
            || self.in_section(addr, "__sched_text_start", "__sched_text_end")
        {
            return true;
        }
        let Some((name, _)) = self.function(addr) else {
            return false;
        };
        const PREFIXES: [&str; 14] = [
            "perf_",
            "__perf_",
            "trace_",
            "__trace",
            "__bpf_trace",
            "queued_",
            "native_queued_",
            "__pv_queued_",
            "_raw_",
            "do_raw_",
            "rwsem_",
            "__mutex_lock",
            "mutex_lock",
            "__rt_mutex",
        ];
        const PARTS: [&str; 6] = [
            "_slowpath",
            "down_read",
            "down_write",
            "percpu_down",
            "rwbase_",
            "__down_common",
        ];
        PREFIXES.iter().any(|p| name.starts_with(p)) || PARTS.iter().any(|p| name.contains(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81100000 T queued_spin_lock_slowpath
ffffffff81100400 T do_exit
ffffffff81200000 T __lock_text_start
ffffffff81200100 T _raw_spin_lock
ffffffff81200800 T __lock_text_end
ffffffff82000000 D tasklist_lock
ffffffff82000040 D next_thing
ffffffff82100000 b some_bss [mod]
";

    /// `TEXT` plus enough small data symbols to look like CONFIG_KALLSYMS_ALL.
    fn all() -> Symbols {
        let mut t = TEXT.to_string();
        for i in 0..100u64 {
            t.push_str(&format!(
                "{:x} d filler{i}\n",
                0xffffffff83000000u64 + i * 64
            ));
        }
        Symbols::parse(&t)
    }

    #[test]
    fn static_locks_resolve_and_heap_addresses_do_not() {
        let s = all();
        assert!(!s.hidden && s.data_symbols);
        assert_eq!(
            s.lock_name(0xffffffff82000000).as_deref(),
            Some("tasklist_lock")
        );
        assert_eq!(
            s.lock_name(0xffffffff82000008).as_deref(),
            Some("tasklist_lock+0x8")
        );
        assert_eq!(s.lock_name(0xffffffff81100410), None, "text is not a lock");
        assert_eq!(s.lock_name(0xffff888012345678), None, "below every symbol");
        assert_eq!(
            s.lock_name(0xffffffff82100000 + (2 << 20)),
            None,
            "far past the last"
        );
    }

    #[test]
    fn lock_frames_are_skipped_to_find_the_caller() {
        let s = Symbols::parse(TEXT);
        assert!(s.is_lock_frame(0xffffffff81100010)); // queued_spin_lock_slowpath
        assert!(s.is_lock_frame(0xffffffff81200110)); // inside lock text
        assert!(!s.is_lock_frame(0xffffffff81100410)); // do_exit
        assert_eq!(s.function(0xffffffff81100410), Some(("do_exit", 0x10)));
    }

    #[test]
    fn zeroed_addresses_mean_hidden() {
        let s = Symbols::parse("0000000000000000 T _stext\n0000000000000000 D tasklist_lock\n");
        assert!(s.hidden && s.is_empty());
    }
}
