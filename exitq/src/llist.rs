//! An intrusive lock-free list: push is one compare-and-swap, `take_all` is
//! one swap.
//!
//! This is the structure on the thread-exit path, so its push never
//! allocates: the caller hands in a [`Node`] (or a [`Chain`] of nodes) it
//! allocated earlier. Consumers take the whole list at once; there is no
//! single-node pop, so there is no ABA problem (a node is never re-pushed
//! while another thread could still be reading the head it came from:
//! `take_all` moves every node out with one swap, and only the taker reads
//! their `next` fields afterwards).
//!
//! Order: the list is a stack. [`List::take_all`] returns the most recently
//! pushed node first; a chain pushed with [`List::push_chain`] stays
//! contiguous and in its own order (unit tests: `llist/tests.rs`, also
//! run under miri; loom models in `tests/loom.rs`).
use std::fmt;
use std::ptr;

use crate::sync::{AtomicPtr, Ordering};

/// A list node: a value and the link to the next node.
///
/// Allocate it (with [`Node::new`]) before it is needed on a path that must
/// not allocate; pushing it moves the box into the list without allocating.
pub struct Node<T> {
    next: *mut Node<T>,
    /// The payload.
    pub value: T,
}

impl<T> Node<T> {
    /// A boxed, unlinked node holding `value`.
    pub fn new(value: T) -> Box<Node<T>> {
        Box::new(Node {
            next: ptr::null_mut(),
            value,
        })
    }
}

impl<T: fmt::Debug> fmt::Debug for Node<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node").field("value", &self.value).finish()
    }
}

// SAFETY: a `Node` owns its value; the raw `next` link is only followed by
// whoever owns the node (a `Chain` or the list's taker), so sending a node
// is sending its value.
unsafe impl<T: Send> Send for Node<T> {}

/// A multi-producer, multi-consumer lock-free stack of boxed [`Node`]s.
pub struct List<T> {
    head: AtomicPtr<Node<T>>,
}

// SAFETY: pushes hand over ownership of `T` values and `take_all` hands them
// out again, possibly on another thread: that needs `T: Send`, and nothing
// else is shared.
unsafe impl<T: Send> Send for List<T> {}
// SAFETY: as above; all shared access goes through the atomic head.
unsafe impl<T: Send> Sync for List<T> {}

impl<T> Default for List<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for List<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("List")
            .field("empty", &self.is_empty())
            .finish()
    }
}

impl<T> List<T> {
    /// An empty list.
    pub fn new() -> Self {
        List {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Pushes one node: a single successful compare-and-swap (retried only
    /// if another push or take raced with it); no allocation, no lock.
    #[inline]
    pub fn push(&self, node: Box<Node<T>>) {
        let node = Box::into_raw(node);
        // SAFETY: `node` came from `Box::into_raw` just above; it is a
        // chain of one node that we own.
        unsafe { self.push_raw(node, node) }
    }

    /// Pushes a whole chain with a single successful compare-and-swap; the
    /// chain stays contiguous and in order.
    #[inline]
    pub fn push_chain(&self, chain: Chain<T>) {
        if chain.head.is_null() {
            return;
        }
        let (first, last) = (chain.head, chain.tail);
        std::mem::forget(chain);
        // SAFETY: the chain owned the nodes `first..=last`, linked through
        // `next` and ending at `last`; forgetting it moves ownership to us.
        unsafe { self.push_raw(first, last) }
    }

    /// # Safety
    /// `first..=last` is a chain of nodes obtained from `Box::into_raw`,
    /// owned by the caller and reachable from `first` through `next`.
    #[inline]
    unsafe fn push_raw(&self, first: *mut Node<T>, last: *mut Node<T>) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: we own `last` until the CAS below publishes it.
            unsafe { (*last).next = head };
            // SeqCst on success: it is a Release that pairs with the
            // Acquire of `take_all`'s swap (the taker sees the nodes' links
            // and values), and it takes part in the reclaimer's
            // sleep/wake protocol (domain `sleeping` flag, a store-buffering
            // pattern that needs a single total order).
            match self
                .head
                .compare_exchange_weak(head, first, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Takes every node with one swap, most recently pushed first.
    #[inline]
    pub fn take_all(&self) -> Chain<T> {
        // SeqCst: Acquire pairs with the pushes' Release (we read the nodes
        // they wrote); total order for the reclaimer's sleep/wake protocol.
        let head = self.head.swap(ptr::null_mut(), Ordering::SeqCst);
        if head.is_null() {
            return Chain::new();
        }
        let mut tail = head;
        let mut len = 1;
        // SAFETY: the swap made us the only owner of every node reachable
        // from `head`; their links were published by the pushes' Release.
        unsafe {
            while !(*tail).next.is_null() {
                tail = (*tail).next;
                len += 1;
            }
        }
        Chain { head, tail, len }
    }

    /// Whether the list looked empty (a racy snapshot).
    #[inline]
    pub fn is_empty(&self) -> bool {
        // SeqCst: the reclaimer's "set sleeping, then re-check the list"
        // must be ordered against pushers' "push, then check sleeping".
        self.head.load(Ordering::SeqCst).is_null()
    }
}

impl<T> Drop for List<T> {
    fn drop(&mut self) {
        drop(self.take_all());
    }
}

/// An owned, singly linked run of nodes, not shared with any thread.
///
/// Build one ahead of time and publish it with [`List::push_chain`] (one
/// CAS), or consume what [`List::take_all`] returned.
pub struct Chain<T> {
    head: *mut Node<T>,
    tail: *mut Node<T>,
    len: usize,
}

// SAFETY: a chain exclusively owns its nodes and their values.
unsafe impl<T: Send> Send for Chain<T> {}

impl<T> Default for Chain<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Chain<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chain").field("len", &self.len).finish()
    }
}

impl<T> Chain<T> {
    /// An empty chain.
    pub const fn new() -> Self {
        Chain {
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            len: 0,
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the chain has no node.
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// Adds a node at the front.
    pub fn push_front(&mut self, node: Box<Node<T>>) {
        let node = Box::into_raw(node);
        // SAFETY: `node` is a fresh, exclusively owned allocation.
        unsafe { (*node).next = self.head };
        if self.tail.is_null() {
            self.tail = node;
        }
        self.head = node;
        self.len += 1;
    }

    /// Adds a node at the back.
    pub fn push_back(&mut self, node: Box<Node<T>>) {
        let node = Box::into_raw(node);
        // SAFETY: `node` is a fresh, exclusively owned allocation; `tail`,
        // when not null, is a node this chain owns.
        unsafe {
            (*node).next = ptr::null_mut();
            if self.tail.is_null() {
                self.head = node;
            } else {
                (*self.tail).next = node;
            }
        }
        self.tail = node;
        self.len += 1;
    }

    /// The first node's value, if any.
    pub fn front(&self) -> Option<&T> {
        // SAFETY: `head`, when not null, is a node this chain owns.
        (!self.head.is_null()).then(|| unsafe { &(*self.head).value })
    }

    /// The first node's value, mutably, if any.
    pub fn front_mut(&mut self) -> Option<&mut T> {
        // SAFETY: `head`, when not null, is a node this chain owns; the
        // borrow of `self` keeps it exclusive.
        (!self.head.is_null()).then(|| unsafe { &mut (*self.head).value })
    }

    /// Moves every node of `other` to the back of this chain (no
    /// allocation, constant time).
    pub fn append(&mut self, mut other: Chain<T>) {
        if other.head.is_null() {
            return;
        }
        if self.tail.is_null() {
            std::mem::swap(self, &mut other);
            return;
        }
        // SAFETY: `self.tail` is a node this chain owns; `other`'s nodes
        // move to us (it is emptied below without dropping them).
        unsafe { (*self.tail).next = other.head };
        self.tail = other.tail;
        self.len += other.len;
        other.head = ptr::null_mut();
        other.tail = ptr::null_mut();
        other.len = 0;
    }

    /// Removes and returns the first node.
    pub fn pop_front(&mut self) -> Option<Box<Node<T>>> {
        if self.head.is_null() {
            return None;
        }
        // SAFETY: `head` is a node this chain owns, allocated by `Box`.
        let mut node = unsafe { Box::from_raw(self.head) };
        self.head = node.next;
        if self.head.is_null() {
            self.tail = ptr::null_mut();
        }
        node.next = ptr::null_mut();
        self.len -= 1;
        Some(node)
    }
}

impl<T> Drop for Chain<T> {
    fn drop(&mut self) {
        while self.pop_front().is_some() {}
    }
}

impl<T> Iterator for Chain<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.pop_front().map(|node| node.value)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len, Some(self.len))
    }
}

impl<T> ExactSizeIterator for Chain<T> {}

#[cfg(test)]
mod tests;
