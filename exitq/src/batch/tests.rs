//! The batch encoding on its own (no threads, so miri runs it too:
//! `scripts/test.d/30-miri.sh`).
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn open(batch_size: usize) -> OpenBatch {
    let mut open = OpenBatch::new();
    open.open(
        Node::new(Work::Batch(Batch::new(batch_size))),
        batch_size,
        false,
    );
    open
}

/// Appends `f` as `defer` does: the fast path, else a new run. A
/// closure the batch refuses is handed back intact: it runs here.
fn push<F: FnOnce() + Send + 'static>(open: &mut OpenBatch, f: F) -> bool {
    let refused = match open.try_push(Deferred::new(f), words_of::<F>()) {
        Ok(()) => return true,
        Err(d) => match open.push_new_run(d) {
            Ok(()) => return true,
            Err(d) => d,
        },
    };
    let mut data = refused.data;
    // SAFETY: `refused` holds an unconsumed closure for `call`.
    unsafe { (refused.call)(data.as_mut_ptr().cast::<usize>()) };
    false
}

fn run(open: &mut OpenBatch) -> (usize, u64, u64) {
    let mut node = open.take().expect("a batch is open");
    let Work::Batch(b) = &mut node.value else {
        unreachable!()
    };
    let len = b.len;
    let (ran, panicked) = b.run(|| false);
    assert_eq!((b.len, b.used), (0, 0), "a run batch is empty");
    (len, ran, panicked)
}

#[test]
fn closure_sizes_and_types_mixed_each_run_once_in_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut b = open(64);
    let mut expected = Vec::new();
    for i in 0..40usize {
        let log = log.clone();
        let ok = match i % 6 {
            // Two words: an Arc and an index.
            0 | 1 => push(&mut b, move || log.lock().unwrap().push(i)),
            // Three words, one of them a heap string (drop checked by miri).
            2 => {
                let s = format!("{i}");
                push(&mut b, move || {
                    log.lock().unwrap().push(s.parse::<usize>().unwrap())
                })
            }
            // Larger than three words: boxed.
            3 => {
                let big = [i; 8];
                push(&mut b, move || log.lock().unwrap().push(big[7]))
            }
            // 12 bytes: two words, the second one half padding.
            4 => {
                let (a, c) = (i as u32, i as u64);
                let log2 = log.clone();
                drop(log);
                push(&mut b, move || {
                    assert_eq!(u64::from(a), c);
                    log2.lock().unwrap().push(a as usize)
                })
            }
            _ => push(&mut b, move || log.lock().unwrap().push(i)),
        };
        assert!(ok, "item {i} fits (64 callbacks, 194 words)");
        expected.push(i);
    }
    let (len, ran, panicked) = run(&mut b);
    assert_eq!((len, ran, panicked), (40, 40, 0));
    assert_eq!(*log.lock().unwrap(), expected);
    assert_eq!(Arc::strong_count(&log), 1, "every closure was consumed");
}

#[test]
fn zero_sized_closures_take_no_batch_memory() {
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let mut b = open(300);
    let start = b.cur;
    for _ in 0..300 {
        assert!(push(&mut b, || {
            RAN.fetch_add(1, Ordering::Relaxed);
        }));
    }
    // Miri gives each use of a function pointer its own address (they
    // are not guaranteed unique), so every closure opens a run there.
    if !cfg!(miri) {
        assert_eq!(b.cur, start.wrapping_add(2), "one run header, no items");
    }
    assert_eq!(b.left, 0, "full at batch_size");
    assert!(
        !push(&mut b, || {
            RAN.fetch_add(1000, Ordering::Relaxed);
        }),
        "a full batch takes nothing more"
    );
    assert_eq!(RAN.load(Ordering::Relaxed), 1000);
    assert_eq!(run(&mut b), (300, 300, 0));
    assert_eq!(RAN.load(Ordering::Relaxed), 1300);
}

#[test]
fn one_word_closures_of_one_type_take_one_word_each() {
    let n = Arc::new(AtomicUsize::new(0));
    let mut b = open(256);
    let start = b.cur;
    for _ in 0..256 {
        let n = n.clone();
        assert!(push(&mut b, move || {
            n.fetch_add(1, Ordering::Relaxed);
        }));
    }
    if !cfg!(miri) {
        // (Under miri each closure opens a run: see above.)
        assert_eq!(b.cur, start.wrapping_add(2 + 256), "an Arc is one word");
    }
    assert_eq!(run(&mut b), (256, 256, 0));
    assert_eq!(n.load(Ordering::Relaxed), 256);
    assert_eq!(Arc::strong_count(&n), 1);
}

#[test]
fn alternating_large_types_fill_the_memory_before_the_count() {
    // 4 callbacks: 14 words. Runs of one 3-word closure take 5 words,
    // so a third alternating run does not fit.
    let ran = Arc::new(AtomicUsize::new(0));
    let mut b = open(4);
    let r1 = ran.clone();
    let x = [1usize, 2];
    assert!(push(&mut b, move || {
        r1.fetch_add(x[0], Ordering::Relaxed);
    }));
    let r2 = ran.clone();
    // Different code (not merged with the first closure's by LLVM's
    // function merging, which would let them share a run).
    let y = [20u64, 10];
    assert!(push(&mut b, move || {
        r2.fetch_add(y[1] as usize, Ordering::Relaxed);
    }));
    let r3 = ran.clone();
    let z = [100u32, 0, 0, 0];
    assert!(!push(&mut b, move || {
        r3.fetch_add(z[0] as usize, Ordering::Relaxed);
    }));
    assert_eq!(
        ran.load(Ordering::Relaxed),
        100,
        "the refused one came back"
    );
    assert_eq!(run(&mut b), (2, 2, 0));
    assert_eq!(ran.load(Ordering::Relaxed), 111);
    assert_eq!(Arc::strong_count(&ran), 1);
}

#[test]
fn a_panic_skips_only_the_closure_that_panicked() {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut b = open(32);
    for i in 0..20usize {
        let ran = ran.clone();
        assert!(push(&mut b, move || {
            ran.fetch_add(1, Ordering::Relaxed);
            if i % 7 == 3 {
                panic!("callback {i} panics (expected by the test)");
            }
        }));
    }
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = run(&mut b);
    std::panic::set_hook(hook);
    assert_eq!(result, (20, 20, 3), "items 3, 10, 17 panic");
    assert_eq!(ran.load(Ordering::Relaxed), 20, "each ran exactly once");
    assert_eq!(Arc::strong_count(&ran), 1);
}

#[test]
fn batch_size_one_holds_the_largest_inline_closure() {
    let mut b = open(1);
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let pad = [7u8; 16];
    assert!(push(&mut b, move || {
        r.fetch_add(usize::from(pad[15]), Ordering::Relaxed);
    }));
    assert_eq!(b.left, 0);
    assert_eq!(run(&mut b), (1, 1, 0));
    assert_eq!(ran.load(Ordering::Relaxed), 7);
}

#[test]
fn a_batch_drained_in_pieces_then_run_runs_each_callback_once_in_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut b = open(64);
    for i in 0..30usize {
        let log = log.clone();
        let ok = match i % 4 {
            0 => push(&mut b, move || log.lock().unwrap().push(i)),
            1 => {
                let s = format!("{i}");
                push(&mut b, move || log.lock().unwrap().push(s.parse().unwrap()))
            }
            2 => {
                let big = [i; 8]; // boxed
                push(&mut b, move || log.lock().unwrap().push(big[7]))
            }
            _ => {
                let x = i as u8; // a run of its own type
                push(&mut b, move || log.lock().unwrap().push(usize::from(x)))
            }
        };
        assert!(ok);
    }
    let mut node = b.take().expect("open");
    let Work::Batch(batch) = &mut node.value else {
        unreachable!()
    };
    let mut taken = Vec::new();
    for n in [1, 7, 3] {
        assert_eq!(take_some(batch, n, &mut taken), n);
    }
    assert!(!batch.drained());
    run_all(taken);
    assert_eq!(*log.lock().unwrap(), (0..11).collect::<Vec<_>>());
    // The rest, resumed at the cursor; the count is the whole batch's.
    assert_eq!(batch.run(|| false), (30, 0));
    assert_eq!(*log.lock().unwrap(), (0..30).collect::<Vec<_>>());
    assert_eq!(Arc::strong_count(&log), 1, "every closure was consumed");
}

#[test]
fn a_batch_drained_to_the_end_runs_nothing_more() {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut b = open(16);
    for _ in 0..10 {
        let ran = ran.clone();
        assert!(push(&mut b, move || {
            ran.fetch_add(1, Ordering::Relaxed);
        }));
    }
    let mut node = b.take().expect("open");
    let Work::Batch(batch) = &mut node.value else {
        unreachable!()
    };
    let mut taken = Vec::new();
    assert_eq!(take_some(batch, 100, &mut taken), 10);
    assert!(batch.drained());
    assert_eq!(take_some(batch, 5, &mut taken), 0);
    run_all(taken);
    assert_eq!(
        batch.run(|| false),
        (10, 0),
        "counted whole, run none twice"
    );
    assert_eq!(ran.load(Ordering::Relaxed), 10);
}

#[test]
fn a_drain_tick_counts_the_batch_down_without_losing_room_or_run_counts() {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut b = open(20);
    let push_one = |b: &mut OpenBatch| {
        let ran = ran.clone();
        assert!(push(b, move || {
            ran.fetch_add(1, Ordering::Relaxed);
        }));
    };
    push_one(&mut b); // opens the run
    b.tick(7);
    assert_eq!(b.left(), 7);
    for _ in 0..7 {
        push_one(&mut b);
    }
    assert_eq!(b.left(), 0, "the tick is due");
    b.untick();
    assert_eq!(b.left(), 12, "the batch's room is back");
    b.tick(7);
    push_one(&mut b);
    b.untick();
    assert_eq!(run(&mut b), (9, 9, 0), "one run of 9, its header right");
    assert_eq!(ran.load(Ordering::Relaxed), 9);
}

/// `defer`'s typed fast path (`try_push_fn`) and the `Deferred` one write
/// the same run: a closure type's entry point is one, whichever path
/// stored it, and each closure runs once, in order, whichever path
/// stored it. A closure of another type, or one the batch has no room
/// for, is handed back whole.
#[test]
fn the_typed_fast_path_and_the_deferred_one_share_a_run() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut b = open(32);
    let start = b.cur;
    // Under miri a run per closure: 24 fit in the batch's memory.
    let n = if cfg!(miri) { 20 } else { 32 };
    let mut typed = 0;
    let other = Arc::new(AtomicUsize::new(0));
    for i in 0..n {
        if i == 16 {
            // Another type, in the middle of the run: refused, unconsumed.
            let o = other.clone();
            match b.try_push_fn(move || {
                o.fetch_add(1, Ordering::Relaxed);
            }) {
                Ok(()) => panic!("another type joined the run"),
                Err(f) => f(),
            }
        }
        let log = log.clone();
        let f = move || log.lock().unwrap().push(i);
        if i % 3 == 0 {
            assert!(push(&mut b, f));
            continue;
        }
        match b.try_push_fn(f) {
            Ok(()) => typed += 1,
            // Under miri each closure may open a run (entry points of one
            // function compare unequal): the way `defer` then goes.
            Err(f) => assert!(push(&mut b, f)),
        }
    }
    if !cfg!(miri) {
        assert_eq!(typed, 21, "every typed push after the first joined the run");
        assert_eq!(
            b.cur,
            start.wrapping_add(2 + 2 * 32),
            "one run of two-word closures"
        );
    }
    // A full batch refuses a closure of its run's type, unconsumed (under
    // miri the batch is not full, and the type's entry point compares
    // unequal: refused too).
    let l = log.clone();
    match b.try_push_fn(move || l.lock().unwrap().push(99)) {
        Ok(()) => panic!("a full batch took a closure"),
        Err(f) => drop(f),
    }
    assert_eq!(run(&mut b), (n, n as u64, 0));
    assert_eq!(*log.lock().unwrap(), (0..n).collect::<Vec<_>>());
    assert_eq!(Arc::strong_count(&log), 1);
    assert_eq!(Arc::strong_count(&other), 1);
}

/// `Batch::take_some` into `max` fresh slots, the slots it filled
/// appended to `taken`; returns how many.
fn take_some(batch: &mut Batch, max: usize, taken: &mut Vec<MaybeUninit<Item>>) -> usize {
    let mut slots: Vec<MaybeUninit<Item>> = (0..max).map(|_| MaybeUninit::uninit()).collect();
    let n = batch.take_some(&mut slots);
    slots.truncate(n);
    taken.append(&mut slots);
    n
}

/// Runs every item `take_some` put in `taken`, in order.
fn run_all(mut taken: Vec<MaybeUninit<Item>>) {
    for slot in &mut taken {
        // SAFETY: `take_some` filled the slot; it is run once (the vector
        // is dropped after, and a `MaybeUninit` drops nothing).
        unsafe { Item::run_in(slot) };
    }
}

#[test]
fn a_ticks_items_run_in_place_each_once_past_panics() {
    // A drain tick's run (`run::run_items_and_chain`): the items run where
    // they lie in the tick's array; one that panics is counted and the
    // run goes on with the next, none run twice or skipped.
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut b = open(16);
    for i in 0..7usize {
        let log = log.clone();
        let ok = if i % 3 == 2 {
            // Three words (a heap string: its drop checked by miri).
            let s = format!("{i}");
            push(&mut b, move || {
                let i = s.parse::<usize>().unwrap();
                log.lock().unwrap().push(i);
                if i == 5 {
                    panic!("item {i} panics on purpose");
                }
            })
        } else {
            push(&mut b, move || {
                log.lock().unwrap().push(i);
                assert_ne!(i, 0, "item 0 panics on purpose");
            })
        };
        assert!(ok);
    }
    let mut node = b.take().expect("open");
    let Work::Batch(batch) = &mut node.value else {
        unreachable!()
    };
    let mut slots: [MaybeUninit<Item>; 7] = [const { MaybeUninit::uninit() }; 7];
    assert_eq!(batch.take_some(&mut slots), 7);
    assert!(batch.drained());
    // SAFETY: `take_some` filled all 7 slots; they are not read again.
    let ran =
        unsafe { crate::run::run_items_and_chain(0, &mut slots, crate::llist::Chain::new(), drop) };
    assert_eq!(ran.panicked, 2, "items 0 and 5");
    assert_eq!(*log.lock().unwrap(), (0..7).collect::<Vec<_>>());
    assert_eq!(batch.run(|| false), (7, 0), "nothing left to run");
    assert_eq!(Arc::strong_count(&log), 1, "every closure was consumed");
}

#[test]
fn whole_ticks_come_from_one_run_and_the_rest_across_runs_each_once_in_order() {
    // `Batch::take_tick`: a tick the current run holds whole is taken in
    // one unrolled copy (with the next tick hinted when the run holds that
    // too), any other through `take_some`; the cursor stays the one
    // `take_some` and `run` use. Runs of widths 1, 0, 3 and 2, with
    // lengths that end runs inside ticks.
    static ZST_RAN: AtomicUsize = AtomicUsize::new(0);
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut b = open(64);
    let mut logged = 0;
    for i in 0..17usize {
        let log = log.clone();
        assert!(push(&mut b, move || log.lock().unwrap().push(i)));
        logged += 1;
    }
    for _ in 0..9 {
        assert!(push(&mut b, || {
            ZST_RAN.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for i in 17..22usize {
        let (log, s) = (log.clone(), format!("{i}"));
        assert!(push(&mut b, move || log
            .lock()
            .unwrap()
            .push(s.parse().unwrap())));
        logged += 1;
    }
    for i in 22..38u32 {
        let (log, x) = (log.clone(), u64::from(i));
        assert!(push(&mut b, move || log.lock().unwrap().push(x as usize)));
        logged += 1;
    }
    let total = logged + 9;
    let mut node = b.take().expect("open");
    let Work::Batch(batch) = &mut node.value else {
        unreachable!()
    };
    let mut sizes = Vec::new();
    loop {
        let mut slots: [MaybeUninit<Item>; 7] = [const { MaybeUninit::uninit() }; 7];
        let n = batch.take_tick(&mut slots);
        if n == 0 {
            break;
        }
        sizes.push(n);
        for slot in &mut slots[..n] {
            // SAFETY: `take_tick` filled the first `n` slots; each is run
            // once.
            unsafe { Item::run_in(slot) };
        }
    }
    assert_eq!(sizes, [7, 7, 7, 7, 7, 7, 5], "every tick full but the last");
    assert!(batch.drained());
    assert_eq!(*log.lock().unwrap(), (0..38).collect::<Vec<_>>());
    assert_eq!(ZST_RAN.load(Ordering::Relaxed), 9);
    assert_eq!(
        batch.run(|| false),
        (total as u64, 0),
        "counted whole, none run twice"
    );
    assert_eq!(Arc::strong_count(&log), 1, "every closure was consumed");
}
