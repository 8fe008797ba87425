//! Prefetching what a queued callback will touch, a tick before it runs.
//!
//! The usual callback frees what its thread allocated before deferring it.
//! Where a grace period waits long (producers outnumber their CPUs and one
//! is preempted inside its read section), tens of thousands of callbacks
//! become ready at once, and the objects they free have left the cache:
//! `free`'s first read of the chunk header was 37% of the time of
//! `defer_free` at 4 threads on 2 CPUs (docs/results-exitq.md, "What was tried").
//! sdd and crossbeam-epoch pay the same miss, walking their lists.
//!
//! exitq knows what runs next: the closures queued after the ones a drain
//! tick takes. Their words are mostly pointers (a `Box`, an `Arc`), so
//! [`targets`] reads each word and asks the CPU to fetch the line of the
//! word before the one it points to (glibc's chunk header, which `free`
//! reads first; the object's own first line three times in four, 16-byte
//! chunks in 64-byte lines), while the thread goes on with the `defer`s
//! before the next tick. One hint per word: a second one for the object's
//! line measured no better at 4 threads and cost 1 thread more. A word that is
//! not a pointer (an integer, padding) costs a hint that is dropped: a
//! prefetch never faults.
//!
//! The words are read in inline assembly, not in Rust: a closure's words
//! may hold padding, which Rust code must not read as an integer, while
//! the instruction reads bytes. Under miri, which runs no assembly, and on
//! targets without an implementation here, [`targets`] does nothing.

/// Hints the line before each of the `words` words at `item` points to
/// (the word before the pointee).
///
/// # Safety
///
/// `item` must be valid for reads of `words` words, and no other thread
/// may write them meanwhile.
#[inline(always)]
pub(crate) unsafe fn targets(item: *const usize, words: usize) {
    for w in 0..words {
        // SAFETY: the caller's contract (`w < words`).
        unsafe { target(item.add(w)) };
    }
}

/// Hints the line of the word before the one `word` points to.
///
/// # Safety
///
/// As [`targets`], for one word.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
unsafe fn target(word: *const usize) {
    // SAFETY: the load reads 8 bytes at `word`, valid for reads and not
    // written meanwhile (the caller's contract); `prefetcht0` is a hint
    // that never faults, whatever the address (`{t} - 8` may wrap). Nothing is written, the
    // stack and flags are untouched.
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [{p}]",
            "prefetcht0 byte ptr [{t} - 8]",
            p = in(reg) word,
            t = out(reg) _,
            options(nostack, readonly, preserves_flags),
        );
    }
}

/// As the x86-64 [`target`]: `prfum` is the unscaled, signed-offset
/// prefetch, and never faults.
#[cfg(all(target_arch = "aarch64", not(miri)))]
#[inline(always)]
unsafe fn target(word: *const usize) {
    // SAFETY: as the x86-64 version: one 8-byte read at `word` (the
    // caller's contract), then a hint that never faults.
    unsafe {
        core::arch::asm!(
            "ldr {t}, [{p}]",
            "prfum pldl1keep, [{t}, #-8]",
            p = in(reg) word,
            t = out(reg) _,
            options(nostack, readonly, preserves_flags),
        );
    }
}

/// No hint: miri, or a target without an implementation above.
#[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
#[inline(always)]
unsafe fn target(_word: *const usize) {}

#[cfg(test)]
mod tests {
    use super::targets;

    /// A word that is not a pointer costs a dropped hint, never a fault:
    /// null, small integers (the word before wraps around), non-canonical
    /// and kernel addresses, an unmapped page, and a real pointer.
    #[test]
    fn any_word_is_a_harmless_hint() {
        let real = Box::new(7u64);
        let words: [usize; 8] = [
            0,
            1,
            7,
            usize::MAX,
            1 << 63,
            0x0000_8000_0000_0000, // the first non-canonical address
            0x1000,                // an unmapped page, in every process here
            &*real as *const u64 as usize,
        ];
        for w in 0..=words.len() {
            // SAFETY: `w` words of the array are valid for reads, and
            // nothing writes them.
            unsafe { targets(words.as_ptr(), w) };
        }
        for w in &words {
            // SAFETY: as above, one word at a time.
            unsafe { targets(w, 1) };
        }
        assert_eq!(*real, 7, "a hint changes nothing");
    }
}
