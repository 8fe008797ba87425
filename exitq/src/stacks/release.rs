//! Releasing the pages of recycled stacks, in batches.
//!
//! One `process_madvise(2)` call for up to `IOV_MAX` (1024) stacks, one
//! `madvise(2)` per stack where the kernel refuses; what each policy does
//! and costs is on [`Release`](crate::stacks::Release).

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::shared::{Header, Shared};
use super::sys::page_size;

/// Most `iovec`s one `process_madvise(2)` call accepts (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

impl Shared {
    pub(super) fn pidfd(&self) -> Option<libc::c_int> {
        *self.pidfd.get_or_init(|| {
            // SAFETY: pidfd_open(getpid(), 0) has no memory arguments.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
            (fd >= 0).then_some(fd as libc::c_int)
        })
    }

    /// The pages of a stack that may be released: all but its first page
    /// (canary) and last page (header).
    fn releasable(&self, hdr: NonNull<Header>) -> Option<libc::iovec> {
        let page = page_size();
        let low = self.stack_low(hdr).wrapping_add(page);
        let len = self.stack_size.checked_sub(2 * page)?;
        (len > 0).then_some(libc::iovec {
            iov_base: low.cast(),
            iov_len: len,
        })
    }

    /// Releases the pages of `stacks` (owned by the caller, unused):
    /// `process_madvise` with up to IOV_MAX ranges per call, or one
    /// `madvise` per stack if the kernel refuses.
    pub(super) fn release_pages(&self, stacks: &[NonNull<Header>], advice: libc::c_int) {
        let iovs: Vec<libc::iovec> = stacks.iter().filter_map(|&h| self.releasable(h)).collect();
        for chunk in iovs.chunks(IOV_MAX) {
            let mut done = 0;
            if let Some(fd) = self.pidfd() {
                // SAFETY: `chunk` is a valid iovec array of `len` entries,
                // each naming pages of a stack we own and nobody uses.
                let n = unsafe {
                    libc::syscall(
                        libc::SYS_process_madvise,
                        fd,
                        chunk.as_ptr(),
                        chunk.len(),
                        advice,
                        0u32,
                    )
                };
                if n >= 0 {
                    self.c.process_madvise_calls.fetch_add(1, Ordering::Relaxed);
                    // Ranges fully advised before a possible partial stop.
                    let mut left = n as usize;
                    for v in chunk {
                        if left < v.iov_len {
                            break;
                        }
                        left -= v.iov_len;
                        done += 1;
                    }
                }
            }
            for v in &chunk[done..] {
                // SAFETY: as above, one range of an owned, unused stack.
                unsafe { libc::madvise(v.iov_base, v.iov_len, advice) };
                self.c.madvise_calls.fetch_add(1, Ordering::Relaxed);
            }
            self.c
                .released_ranges
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
    }
}
