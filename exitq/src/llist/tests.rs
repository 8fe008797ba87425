//! The lock-free list under threads; small enough for miri
//! (scripts/test.d/30-miri.sh runs these, `--lib llist::tests`, under
//! miri, which checks for data races, use-after-free and leaks on the
//! raw-pointer code).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use super::{Chain, List, Node};

const PER_THREAD: usize = if cfg!(miri) { 50 } else { 100_000 };
const THREADS: usize = if cfg!(miri) { 3 } else { 4 };

#[test]
fn pushes_and_takes_lose_and_duplicate_nothing() {
    let list = Arc::new(List::new());
    let done = Arc::new(AtomicBool::new(false));
    let taker = {
        let (list, done) = (list.clone(), done.clone());
        thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                got.extend(list.take_all());
                if finished {
                    break;
                }
                thread::yield_now();
            }
            got
        })
    };
    let pushers: Vec<_> = (0..THREADS)
        .map(|t| {
            let list = list.clone();
            thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let v = t * PER_THREAD + i;
                    if i % 3 == 0 {
                        let mut chain = Chain::new();
                        chain.push_back(Node::new(v));
                        list.push_chain(chain);
                    } else {
                        list.push(Node::new(v));
                    }
                }
            })
        })
        .collect();
    for p in pushers {
        p.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let mut got = taker.join().unwrap();
    got.extend(list.take_all());
    got.sort_unstable();
    let want: Vec<usize> = (0..THREADS * PER_THREAD).collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "lost or duplicated values");
}

#[test]
fn a_chain_stays_contiguous_and_in_order_in_a_stack() {
    let list = List::new();
    list.push(Node::new(1));
    let mut chain = Chain::new();
    chain.push_back(Node::new(2));
    chain.push_back(Node::new(3));
    list.push_chain(chain); // one CAS for both nodes
    let all: Vec<i32> = list.take_all().collect();
    assert_eq!(all, [2, 3, 1]);
    assert!(list.is_empty());
}

#[test]
fn per_producer_order_is_lifo_in_each_take() {
    let list = List::new();
    for i in 0..10 {
        list.push(Node::new(i));
    }
    let got: Vec<i32> = list.take_all().collect();
    assert_eq!(got, (0..10).rev().collect::<Vec<_>>());
    assert!(list.is_empty());
}

#[test]
fn chains_stay_contiguous_under_contention() {
    let list = Arc::new(List::new());
    let pushers: Vec<_> = (0..THREADS)
        .map(|t| {
            let list = list.clone();
            thread::spawn(move || {
                for i in 0..PER_THREAD / 10 {
                    let mut chain = Chain::new();
                    for k in 0..3 {
                        chain.push_back(Node::new((t, i, k)));
                    }
                    assert_eq!(chain.len(), 3);
                    list.push_chain(chain);
                }
            })
        })
        .collect();
    for p in pushers {
        p.join().unwrap();
    }
    let got: Vec<_> = list.take_all().collect();
    assert_eq!(got.len(), THREADS * (PER_THREAD / 10) * 3);
    for w in got.chunks(3) {
        assert_eq!((w[0].0, w[0].1), (w[2].0, w[2].1), "chain split: {w:?}");
        assert_eq!([w[0].2, w[1].2, w[2].2], [0, 1, 2]);
    }
}

#[test]
fn dropping_a_list_or_chain_drops_the_values() {
    let marker = Arc::new(());
    {
        let list = List::new();
        for _ in 0..5 {
            list.push(Node::new(marker.clone()));
        }
        let mut chain = Chain::new();
        chain.push_front(Node::new(marker.clone()));
        chain.push_back(Node::new(marker.clone()));
        let first = chain.pop_front().unwrap();
        drop(first);
        list.push_chain(chain);
        let _partial = list.take_all().take(2).count();
        list.push(Node::new(marker.clone()));
    }
    assert_eq!(Arc::strong_count(&marker), 1, "a node leaked its value");
}
