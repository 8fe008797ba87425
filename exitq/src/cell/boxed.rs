//! A cell's value on the heap, at an address of its own.
//!
//! The cells keep each value in a box and publish its address; a cache
//! tells values apart by address (`keep.rs`: a cache misses when the
//! cell's pointer differs from the one it keeps, and a writer frees a
//! retired value only if no cache slot holds its address). A `Box` of a
//! zero-sized type allocates nothing and every one has the same dangling
//! address, so all the values of such a cell would look alike: a cache
//! would never miss and its slot would keep every value retired since
//! (parked until the last cache of the cell went away; `replace` waiting
//! for a cache that never moves on). So a zero-sized value gets a one-byte
//! allocation of its alignment, and with it an address no other live
//! value of the cell has; other values are plain boxes.
use std::alloc::{self, Layout};
use std::mem;

/// The allocation of a zero-sized `T`: one byte at its alignment.
fn unit_layout<T>() -> Layout {
    debug_assert_eq!(mem::size_of::<T>(), 0);
    // An alignment is a power of two that fits an `isize`, so one byte at
    // it is a valid layout.
    Layout::from_size_align(1, mem::align_of::<T>()).expect("an alignment is a valid layout")
}

/// Moves `value` to the heap, at an address no other live value has.
pub(crate) fn into_raw<T>(value: T) -> *mut T {
    if mem::size_of::<T>() != 0 {
        return Box::into_raw(Box::new(value));
    }
    let layout = unit_layout::<T>();
    // SAFETY: the layout's size is not zero.
    let p = unsafe { alloc::alloc(layout) }.cast::<T>();
    if p.is_null() {
        alloc::handle_alloc_error(layout);
    }
    // SAFETY: `p` is non-null and aligned for `T` (a zero-sized write).
    unsafe { p.write(value) };
    p
}

/// Moves the value at `p` back out of the heap.
///
/// # Safety
///
/// `p` came from [`into_raw`], nothing else owns it, and no reference to
/// the value is left.
pub(crate) unsafe fn take<T>(p: *mut T) -> T {
    if mem::size_of::<T>() != 0 {
        // SAFETY: the caller's contract (`into_raw` made a `Box`).
        return *unsafe { Box::from_raw(p) };
    }
    // SAFETY: the caller's contract: the value is ours, read once.
    let value = unsafe { p.read() };
    // SAFETY: allocated by `into_raw` with this layout, freed once.
    unsafe { alloc::dealloc(p.cast(), unit_layout::<T>()) };
    value
}

/// Drops the value at `p` in place and frees its memory (also when its
/// `Drop` panics).
///
/// # Safety
///
/// As [`take`].
pub(crate) unsafe fn drop_raw<T>(p: *mut T) {
    if mem::size_of::<T>() != 0 {
        // SAFETY: the caller's contract (`into_raw` made a `Box`).
        drop(unsafe { Box::from_raw(p) });
        return;
    }
    /// Frees the byte when dropped, after the value's drop or during the
    /// unwinding from it.
    struct Free<T>(*mut T);
    impl<T> Drop for Free<T> {
        fn drop(&mut self) {
            // SAFETY: allocated by `into_raw` with this layout, freed once
            // (`drop_raw`'s contract).
            unsafe { alloc::dealloc(self.0.cast(), unit_layout::<T>()) };
        }
    }
    let _free = Free(p);
    // SAFETY: the caller's contract: the value is ours, dropped once.
    unsafe { p.drop_in_place() };
}
