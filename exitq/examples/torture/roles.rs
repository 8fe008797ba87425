//! The roles: one thread each, spawned together, stopped together.
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use crate::caches::{cache_reader, CACHE_READERS};
use crate::checks;
use crate::exits::{canceller, churner, exiter};
use crate::forker::forker;
use crate::handoffs::{barrier_looper, handoff_spawner};
use crate::nested::nester;
use crate::opts::Opts;
use crate::qsbr::qsbr_worker;
use crate::streams::{streamer, STREAMERS};
use crate::workers::{checker, worker, Bomb};
use crate::world::IN_FORK_CHILD;

/// A role's kind and its thread.
pub(crate) type Role = (&'static str, thread::JoinHandle<()>);

/// Spawns every role `opts` asks for.
pub(crate) fn spawn_all(opts: &Opts) -> Vec<Role> {
    let mut roles: Vec<Role> = Vec::new();
    let seed = opts.seed;
    for id in 0..opts.threads {
        roles.push(role("worker", format!("worker-{id}"), move || {
            worker(id, seed)
        }));
    }
    for id in 0..opts.qsbr {
        roles.push(role("qsbr", format!("qsbr-{id}"), move || {
            qsbr_worker(id, seed)
        }));
    }
    for id in 0..2 {
        roles.push(role("checker", format!("checker-{id}"), move || {
            checker(id, seed)
        }));
    }
    roles.push(role("exiter", "exiter".into(), move || exiter(seed)));
    roles.push(role("canceller", "canceller".into(), move || {
        canceller(seed)
    }));
    roles.push(role("churner", "churner".into(), move || churner(seed)));
    roles.push(role("nester", "nester".into(), move || nester(seed)));
    roles.push(role("forker", "forker".into(), move || forker(seed)));
    for id in 0..opts.handoffs {
        roles.push(role(
            "hand-off spawner",
            format!("handoffs-{id}"),
            move || handoff_spawner(id, seed),
        ));
    }
    for id in 0..if opts.handoffs > 0 { 2 } else { 0 } {
        roles.push(role("barrier looper", format!("looper-{id}"), move || {
            barrier_looper(id, seed)
        }));
    }
    for id in 0..STREAMERS {
        roles.push(role("streamer", format!("streamer-{id}"), move || {
            streamer(id, seed)
        }));
    }
    for id in 0..CACHE_READERS {
        roles.push(role("cache reader", format!("cache-{id}"), move || {
            cache_reader(id, seed)
        }));
    }
    roles
}

/// Notes the calling thread's panic (the panic hook's text, with its
/// location) for `role`, should the panic end the role.
pub(crate) fn note_panic(what: String) {
    let _ = LAST_PANIC.try_with(|l| *l.borrow_mut() = Some(what));
}

/// Fails the run if some role has not stopped within `limit` of being
/// told to (a hang the watchdog, which stops with the roles, would miss).
pub(crate) fn stopped_within(roles: &[Role], limit: Duration) {
    let since = Instant::now();
    while let Some((name, _)) = roles.iter().find(|(_, h)| !h.is_finished()) {
        if since.elapsed() > limit {
            eprintln!("torture: FAILURE: a {name} thread did not stop within {limit:?}: a hang");
            checks::hang_exit();
        }
        thread::sleep(Duration::from_millis(50));
    }
}

thread_local! {
    /// The calling thread's last panic, as the hook saw it (with its
    /// location): the hook stays quiet for the kinds roles catch
    /// themselves, so a role that one of them ends says it here.
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Spawns a role's thread (named `thread_name`); a panic that ends it is
/// reported with its message and location, then counted by `main`.
fn role(
    kind: &'static str,
    thread_name: String,
    body: impl FnOnce() + Send + 'static,
) -> (&'static str, thread::JoinHandle<()>) {
    let h = thread::Builder::new()
        .name(thread_name.clone())
        .spawn(move || {
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                if IN_FORK_CHILD.load(Ordering::Relaxed) {
                    // A fork child's copy of this role, stopped by exitq
                    // (`run::abandon`): it ends quietly, as it always did
                    // (printing could wait on a lock the parent held).
                    std::panic::resume_unwind(payload);
                }
                let what = LAST_PANIC
                    .with(|l| l.borrow_mut().take())
                    .unwrap_or_default();
                eprintln!("torture: the {kind} thread {thread_name} ended in a panic: {what}");
                if payload.downcast_ref::<Bomb>().is_some() {
                    // A `Bomb` panics when dropped outside a panic.
                    std::mem::forget(payload);
                    std::panic::resume_unwind(Box::new("a Bomb"));
                }
                std::panic::resume_unwind(payload);
            }
        })
        .unwrap_or_else(|e| panic!("torture: cannot spawn a {kind} thread: {e}"));
    (kind, h)
}
