//! `ThreadRoom`'s accounting and edges, as pure functions where they can be.
use super::*;

fn room(arena: bool) -> ThreadRoom {
    ThreadRoom {
        default_stack: 2 << 20,
        arena_limit: if arena { 16 } else { 1 },
        page: 4096,
        sigstack: 8192,
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn a_thread_needs_its_stack_signal_stack_guards_and_arena() {
    let n = room(true).need(None, 1);
    assert_eq!(n.stack, (2 * MIB + 4096, 2 * MIB));
    assert_eq!(n.start, (12288, 12288));
    assert_eq!(
        n.all(),
        (
            2 * MIB + 16384 + ARENA_RESERVE_BYTES,
            2 * MIB + 12288 + ARENA_DATA_BYTES
        )
    );
    // A size is rounded up to pages; no arena when none is left.
    let n = room(true).need(Some(100_000), 0);
    assert_eq!(n.stack, (102_400 + 4096, 102_400));
    assert_eq!(n.all(), (102_400 + 16384, 102_400 + 12288));
}

/// glibc makes at most limit - 1 arenas; `peak` claimed threads alive
/// at once in arenas of their own made that many at least; threads
/// being created make one each, of those left.
#[test]
fn arenas_left_and_promised() {
    // 2 CPUs: 16, the main arena one of them.
    assert_eq!(arenas_left(16, 0), 15);
    assert_eq!(arenas_left(16, 6), 9);
    assert_eq!(arenas_left(16, 15), 0);
    assert_eq!(arenas_left(16, 200), 0);
    // MALLOC_ARENA_MAX=1 (or the tunable): none; =4: three.
    assert_eq!(arenas_left(1, 0), 0);
    assert_eq!(arenas_left(4, 0), 3);
    assert_eq!(arenas_left(0, 0), 0);
    assert_eq!(arenas_promised(40, 9), 9);
    assert_eq!(arenas_promised(3, 9), 3);
    assert_eq!(arenas_promised(3, 0), 0);
    // A thread counts an arena only while one is left, and says so.
    let r = room(true);
    let usage = Usage {
        address_space: Some(20 * MIB),
        data: None,
    };
    let lim = Some(40 * MIB);
    let with = r.need(None, 1);
    let d = r
        .verdict(with, (lim, None), usage, (with.all().0, 0))
        .unwrap();
    assert!(
        d.detail.contains("a malloc arena's reservation 67108864"),
        "{d:?}"
    );
    let without = r.need(None, 0);
    assert_eq!(
        r.verdict(without, (lim, None), usage, (without.all().0, 0)),
        None
    );
}

/// A new thread allocates from an arena of its own (or a shared one
/// past the limit), not the main one; with an arena limit of 1 from
/// the main one.
#[cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(miri)
))]
#[test]
fn a_new_thread_allocates_from_an_arena_of_its_own() {
    let own = thread::spawn(allocates_from_own_arena).join().unwrap();
    assert_eq!(own, crate::limits::arena_limit() > 1);
}

/// At the edge: room for the stack but not the signal stack is
/// refused, naming the limit with its numbers; a page more than the
/// thread and the margin fits. Others' promises count.
#[test]
fn the_edge_of_each_limit() {
    let r = room(false);
    let need = r.need(None, 0);
    let own = need.all().0;
    let used = 20 * MIB;
    let usage = Usage {
        address_space: Some(used),
        data: Some(used),
    };
    let fits = used + own + MARGIN_BYTES;
    let v = |lim_as, lim_data, promised| r.verdict(need, (lim_as, lim_data), usage, promised);
    assert_eq!(v(Some(fits), None, (own, 0)), None);
    let d = v(Some(fits - 4096), None, (own, 0)).unwrap();
    assert_eq!((d.errno, d.limit), (libc::EAGAIN, Limit::RlimitAs));
    assert!(
        d.detail.starts_with(&format!(
            "RLIMIT_AS {} nearly reached: {used} bytes of address space in use (VmSize) \
             and 0 promised to threads being created leave {}, and a std thread needs {own} \
             (stack 2097152 and guard page, std's signal stack 8192 and guard page) plus \
             1048576 kept for other mappings: not created, as std aborts",
            fits - 4096,
            own + MARGIN_BYTES - 4096
        )),
        "{}",
        d.detail
    );
    // Another thread's promise takes room.
    let d = v(Some(fits), None, (2 * own, 0)).unwrap();
    assert!(d.detail.contains(&format!("and {own} promised")), "{d:?}");
    // RLIMIT_DATA: the stack and the signal stack with its guard.
    let own_data = need.all().1;
    let fits = used + own_data + MARGIN_BYTES;
    assert_eq!(v(None, Some(fits), (0, own_data)), None);
    let d = v(None, Some(fits - 1), (0, own_data)).unwrap();
    assert_eq!(d.limit, Limit::RlimitData);
    assert!(d.detail.contains("RLIMIT_DATA"), "{d:?}");
    // Unknown usage or no limit: nothing to refuse.
    let unknown = Usage::default();
    assert_eq!(r.verdict(need, (Some(1), Some(1)), unknown, (0, 0)), None);
}

#[test]
fn statm_is_read_in_pages() {
    let u = Usage::parse(b"5000 300 200 10 0 1200 0\n", 4096);
    assert_eq!(u.address_space, Some(5000 * 4096));
    assert_eq!(u.data, Some(1200 * 4096));
    let u = Usage::parse(b"garbage", 4096);
    assert_eq!((u.address_space, u.data), (None, None));
    let u = Usage::now();
    assert!(u.address_space.unwrap() > 0 && u.data.unwrap() > 0);
}

/// A claim's room is given back whatever happens to it, and a refusal
/// reads as its diagnosis through an io::Error.
#[test]
fn claims_are_given_back_and_refusals_read_as_their_diagnosis() {
    // No other test of this binary claims room.
    let r = room(true);
    let c = r.need(None, 0);
    let promised = || {
        (
            PROMISED_AS.load(Ordering::SeqCst),
            PROMISED_DATA.load(Ordering::SeqCst),
            STARTING.load(Ordering::SeqCst),
        )
    };
    let before = promised();
    let claims = Claims {
        stack: Claim::promise(c.stack, false),
        start: Claim::promise(c.start, true),
    };
    let all = c.all();
    assert_eq!(
        promised(),
        (before.0 + all.0, before.1 + all.1, before.2 + 1)
    );
    let holders = HOLDERS.load(Ordering::SeqCst);
    let t = thread::spawn(move || {
        let started = claims.start.started();
        // Alive in an arena of its own: counted, the peak with it.
        assert!(HOLDERS_PEAK.load(Ordering::SeqCst) >= HOLDERS.load(Ordering::SeqCst));
        drop(started);
    });
    drop(claims.stack);
    t.join().unwrap();
    assert_eq!(promised(), before);
    assert_eq!(HOLDERS.load(Ordering::SeqCst), holders);
    let d = Diagnosis {
        errno: libc::EAGAIN,
        limit: Limit::RlimitAs,
        detail: "x".into(),
    };
    let e = io::Error::from(NoRoom(d.clone()));
    assert_eq!(e.raw_os_error(), None);
    assert_eq!(NoRoom::of(&e), Some(&NoRoom(d)));
    assert_eq!(e.to_string(), "EAGAIN: x");
    assert_eq!(crate::limits::explain_thread_error(&e, None), "EAGAIN: x");
    assert!(NoRoom::of(&io::Error::from_raw_os_error(libc::EAGAIN)).is_none());
    // No room asked: a plain spawn.
    let h = spawn_std(None, thread::Builder::new(), None, || 7).unwrap();
    assert_eq!(h.join().unwrap(), 7);
    let h = spawn_std(Some(&room(false)), thread::Builder::new(), None, || 8);
    // Under this test's limits (none, normally) it is created.
    if let Ok(h) = h {
        assert_eq!(h.join().unwrap(), 8);
    }
}
