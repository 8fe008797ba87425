//! Waiting for a freshly built rayon pool to fall asleep before the
//! measurement starts.
//!
//! rayon's `build` returns once it has spawned its workers, not once they
//! are idle: each new worker first looks for work for 32 rounds, each a
//! steal attempt on every other worker's deque (`crossbeam-deque`, one
//! epoch pin per attempt, and every 128th pin walks every thread's epoch
//! record), yielding between rounds, before it sleeps. That is O(n^2) and
//! worse for n workers: with 4,000 workers on 2 CPUs the spinning went on
//! for seconds after `build` returned, inside the measured phase (its CPU
//! time in `user_s`, its yields competing with the first burst). So the
//! pool counts as started only when every worker has run rayon's start
//! handler and is asleep: its task state in `/proc/self/task/TID/stat` is
//! `S` (a worker between rounds yields and stays runnable, `R`).

use std::time::{Duration, Instant};

/// How often the task states are read.
const POLL: Duration = Duration::from_millis(20);

/// Waits until `workers` threads whose name starts with `prefix` are all
/// asleep and `started()` says all of them started; gives up after
/// `limit` (false: the measurement would start with some still awake).
pub(super) fn wait_until_asleep(
    prefix: &str,
    workers: usize,
    started: impl Fn() -> usize,
    limit: Duration,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        // Without /proc/self/task there is nothing to wait for.
        if started() >= workers && asleep(prefix).is_none_or(|n| n >= workers) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Threads of this process named `prefix...` (the name as the kernel keeps
/// it: 15 bytes) that are sleeping (state `S`); `None` without
/// `/proc/self/task`.
pub(super) fn asleep(prefix: &str) -> Option<usize> {
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    let n = dir
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            // `TID (NAME) STATE ...`: the name may hold spaces and parens.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                return false;
            };
            stat[open + 1..close].starts_with(prefix)
                && stat[close + 1..].trim_start().starts_with('S')
        })
        .count();
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn counts_only_sleeping_threads_of_the_prefix() {
        let (tx, rx) = mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("settle-test-1".into())
            .spawn(move || {
                let _ = rx.recv();
            })
            .unwrap();
        assert!(wait_until_asleep(
            "settle-test-",
            1,
            || 1,
            Duration::from_secs(60)
        ));
        assert_eq!(asleep("settle-test-"), Some(1));
        assert_eq!(asleep("no-such-thread-"), Some(0));
        drop(tx);
        t.join().unwrap();
        // Gone: nothing to wait for, so the wait gives up.
        assert!(!wait_until_asleep("settle-test-", 1, || 1, Duration::ZERO));
    }
}
