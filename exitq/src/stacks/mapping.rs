//! Mapping and unmapping one stack.
//!
//! # Layout of one stack mapping
//!
//! ```text
//!  low addresses                                               high addresses
//!  +-----------+------------+-------------------------------+--------------+
//!  | guard     | canary     |  stack given to pthread        | Header       |
//!  | PROT_NONE | 4 words    |  (grows down from the right;   | (pool's own, |
//!  | (1 page+) | (far end)  |  glibc puts struct pthread +   | 128 bytes)   |
//!  |           |            |  static TLS at its top)        |              |
//!  +-----------+------------+-------------------------------+--------------+
//!  base        stackaddr                          stackaddr+size       end
//! ```
//!
//! * One `mmap(PROT_NONE)` reserves the whole mapping without committing
//!   memory, one `mprotect` opens everything above the guard (the same two
//!   calls glibc makes for a fresh stack): two VMAs per stack, counted
//!   against `vm.max_map_count`.
//! * The `Header` lives *above* the region handed to pthread, so neither
//!   the thread nor glibc ever writes it; it carries the intrusive list link
//!   used by the exit path, so returning a stack allocates nothing.
//! * The canary words sit at the far end of the stack (its lowest addresses,
//!   the last bytes a thread would ever reach), see `canary.rs`.

use std::cell::UnsafeCell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use super::error::SpawnError;
use super::shared::{Header, Shared, HEADER_RESERVE};
use super::sys::errno;
use crate::limits::{Diagnosis, MapStep};

impl Shared {
    /// Lowest address of the stack handed to pthread (the canary lives here).
    pub(super) fn stack_low(&self, hdr: NonNull<Header>) -> *mut u8 {
        // SAFETY: `base` was set when the stack was mapped and never changes.
        let base = unsafe { hdr.as_ref().base };
        base.wrapping_add(self.guard)
    }

    pub(super) fn map_stack(&self) -> Result<NonNull<Header>, SpawnError> {
        // SAFETY: anonymous private mapping of a checked size; PROT_NONE
        // reserves address space without committing memory.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                self.mapping,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = errno();
            return Err(SpawnError::Map(self.map_diagnosis(
                e,
                MapStep::Reserve,
                self.mapping,
            )));
        }
        let base = base.cast::<u8>();
        // SAFETY: the range [base+guard, base+mapping) lies in the mapping
        // just created.
        let rc = unsafe {
            libc::mprotect(
                base.add(self.guard).cast(),
                self.stack_size,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            let e = errno();
            // SAFETY: our own mapping, unused.
            unsafe { libc::munmap(base.cast(), self.mapping) };
            return Err(SpawnError::Protect(self.map_diagnosis(
                e,
                MapStep::Commit,
                self.stack_size,
            )));
        }
        let hdr = base
            .wrapping_add(self.mapping - HEADER_RESERVE)
            .cast::<Header>();
        // SAFETY: `hdr` is 64-byte aligned (mapping is page aligned,
        // HEADER_RESERVE a multiple of 64), inside the read-write part, and
        // HEADER_RESERVE >= size_of::<Header>() (asserted in shared.rs).
        unsafe {
            hdr.write(Header {
                next: AtomicPtr::new(ptr::null_mut()),
                refs: AtomicU32::new(0),
                flags: AtomicU32::new(0),
                thread: AtomicU64::new(0),
                gen: AtomicU64::new(0),
                shared: self as *const Shared,
                base,
                start: UnsafeCell::new(None),
                arg: UnsafeCell::new(ptr::null_mut()),
            })
        };
        // SAFETY: non-null (inside a successful mapping).
        let hdr = unsafe { NonNull::new_unchecked(hdr) };
        if self.canary {
            self.canary_init(hdr);
        }
        self.c.maps.fetch_add(1, Ordering::Relaxed);
        let now = self.c.mapped.fetch_add(1, Ordering::Relaxed) + 1;
        self.c.peak_mapped.fetch_max(now, Ordering::Relaxed);
        Ok(hdr)
    }

    /// The limit that stopped the `step` of mapping a stack (`bytes`
    /// long), read now, or the last one while no stack was mapped since.
    fn map_diagnosis(&self, errno: i32, step: MapStep, bytes: usize) -> Diagnosis {
        let mapped = self.c.maps.load(Ordering::Relaxed);
        self.map_diagnosis
            .diagnose_mapping(errno, step, mapped, bytes as u64)
    }

    pub(super) fn unmap(&self, hdr: NonNull<Header>) {
        // SAFETY: the caller owns the stack and no thread uses it (joined,
        // or never started); the header is not touched after this.
        let base = unsafe { hdr.as_ref().base };
        // SAFETY: `base`/`mapping` describe exactly the mapping we created.
        unsafe { libc::munmap(base.cast(), self.mapping) };
        self.c.unmaps.fetch_add(1, Ordering::Relaxed);
        self.c.mapped.fetch_sub(1, Ordering::Relaxed);
    }

    pub(super) fn unmap_idle(&self) {
        if let Some(q) = self.free.as_ref() {
            while let Some(h) = q.pop() {
                self.unmap(h);
            }
        }
    }
}
