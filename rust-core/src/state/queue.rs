//! A FIFO of heap nodes, the building block of a context's request and
//! notification queues.
//!
//! Nodes are allocated by whoever queues (fallibly, before anything is
//! committed), so pushing never fails; a node popped from one queue may be
//! pushed on another without allocating again.

use crate::edge::errno::KResult;
use crate::edge::kalloc::KBox;
use core::ptr::null_mut;

/// One element and its link.
pub struct Node<T> {
    /// The element.
    pub val: T,
    next: Option<KBox<Node<T>>>,
}

impl<T> Node<T> {
    /// A node holding `val`, or ENOMEM.
    pub fn try_new(val: T) -> KResult<KBox<Node<T>>> {
        KBox::try_new(Node { val, next: None })
    }
}

/// A first-in first-out list.
///
/// # Invariants
/// `tail` points to the last node of the chain owned by `head`, or is null
/// when `head` is None; `len` counts the nodes.
pub struct Fifo<T> {
    head: Option<KBox<Node<T>>>,
    tail: *mut Node<T>,
    len: usize,
}

// SAFETY: the FIFO owns its nodes (tail only aliases one of them).
unsafe impl<T: Send> Send for Fifo<T> {}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Fifo<T> {
    /// An empty FIFO.
    pub const fn new() -> Self {
        Fifo {
            head: None,
            tail: null_mut(),
            len: 0,
        }
    }

    /// How many nodes are queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a node.
    pub fn push(&mut self, mut node: KBox<Node<T>>) {
        node.next = None;
        let p: *mut Node<T> = &mut *node;
        // SAFETY: by the invariant, a non-null tail is the last node of the
        // chain we own, and nothing else borrows it.
        match unsafe { self.tail.as_mut() } {
            None => self.head = Some(node),
            Some(last) => last.next = Some(node),
        }
        // INVARIANT: the box's heap address does not change when it moves.
        self.tail = p;
        self.len += 1;
    }

    /// Takes the oldest node.
    pub fn pop(&mut self) -> Option<KBox<Node<T>>> {
        let mut node = self.head.take()?;
        self.head = node.next.take();
        if self.head.is_none() {
            self.tail = null_mut();
        }
        self.len -= 1;
        Some(node)
    }
}

impl<T> Drop for Fifo<T> {
    /// Frees the nodes one by one (a recursive drop of the chain could run
    /// out of kernel stack).
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn push_pop_in_order() {
        let mut f = Fifo::new();
        assert!(f.pop().is_none());
        for i in 0..3 {
            f.push(Node::try_new(i).unwrap());
        }
        assert_eq!(f.pop().unwrap().val, 0);
        f.push(Node::try_new(3).unwrap());
        let got: std::vec::Vec<_> = core::iter::from_fn(|| f.pop().map(|n| n.val)).collect();
        assert_eq!(got, [1, 2, 3]);
        assert!(f.is_empty());
        f.push(Node::try_new(9).unwrap());
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn long_chain_drops_iteratively() {
        let mut f = Fifo::new();
        for i in 0..200_000u32 {
            f.push(Node::try_new(i).unwrap());
        }
        drop(f);
    }

    proptest! {
        /// Against VecDeque: pushes and pops interleaved.
        #[test]
        fn matches_a_deque(ops in proptest::collection::vec(any::<Option<u16>>(), 0..200)) {
            let (mut f, mut m) = (Fifo::new(), VecDeque::new());
            for op in ops {
                match op {
                    Some(v) => { f.push(Node::try_new(v).unwrap()); m.push_back(v); }
                    None => prop_assert_eq!(f.pop().map(|n| n.val), m.pop_front()),
                }
                prop_assert_eq!(f.len(), m.len());
            }
        }
    }
}
