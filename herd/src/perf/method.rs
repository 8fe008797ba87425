//! The counting method: how the counters are attached to what a run
//! measures, and the checks that choose between the methods.
//!
//! * System scope: [`Method::PerCpu`], one counter per event per CPU of the
//!   run, on any task.
//! * Process scope, preferred: [`Method::Cgroup`], the process moves into a
//!   cgroup of its own and each event gets one counter per online CPU on
//!   it. Nothing is paid per thread.
//! * Process scope, fallback: [`Method::Inherit`], one counter per event per
//!   thread of ours, `inherit`ed by every thread created afterwards (what
//!   `perf stat <cmd>` does; the kernel copies the counters into each new
//!   thread and folds them back at its exit). Used, with a note saying why,
//!   where the cgroup counters cannot be opened ([`cgroup_failure`]); a
//!   probe ([`inherited_exits_counted`]) finds kernels on which inherited
//!   counters miss every thread exit.
//!
//! [`attach`] picks the method and opens the event catalog with it, per
//! CPU in one perf group per CPU ([`super::group`]), per thread ungrouped;
//! the [`super::Session`] keeps what it opened.

use std::time::Instant;

use perf_event::events::Tracepoint;
use perf_event::{Builder, Counter};
use serde::{Deserialize, Serialize};

use super::budget::FdBudget;
use super::cgroup::CgroupScope;
use super::events::{self, EventSpec, Source};
use super::group::{self, CounterSet, Role, LEADER_FORMAT, SINGLE_FORMAT};
use super::sys::{self, Kernel, OpenContext, Target, Unavailable};
use super::Scope;

/// How the counters are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Nothing opened (`--no-perf`).
    #[default]
    None,
    /// Process scope: per-CPU counters on the process's own cgroup.
    Cgroup,
    /// Process scope: per-thread counters inherited by new threads.
    Inherit,
    /// System scope: per-CPU counters on any task.
    PerCpu,
}

/// What [`attach`] opened, and how.
#[derive(Debug)]
pub(super) struct Attached {
    pub(super) method: Method,
    /// Why process scope fell back to inherited counters, if it did.
    pub(super) fallback: Option<Unavailable>,
    /// The threads the inherited counters were opened on (empty otherwise).
    pub(super) pids: Vec<i32>,
    /// herd's helper threads left out of the counting.
    pub(super) helpers_excluded: usize,
    /// Why helper threads are counted after all, when they are.
    pub(super) helpers_counted: Option<String>,
    /// The counters, grouped per CPU where they are per CPU (group.rs).
    pub(super) open: CounterSet,
    pub(super) unavailable: Vec<(EventSpec, Unavailable)>,
    /// Declared last: dropped after the counters, it moves the process back.
    pub(super) cgroup: Option<CgroupScope>,
}

impl Attached {
    /// What the counters watch (the contention sampler watches the same).
    pub(super) fn target(&self) -> Target<'_> {
        match (&self.cgroup, self.method) {
            (_, Method::PerCpu) => Target::AnyTask,
            (Some(cg), _) => Target::Cgroup(&cg.file),
            (None, _) => Target::Threads(&self.pids),
        }
    }
}

/// Opens the event catalog for `scope`: on `cpus` in system scope; in
/// process scope through a cgroup of our own, else on every thread of ours
/// but herd's helper threads (`helpers.rs`) with inherited counters.
pub(super) fn attach(
    kernel: &dyn Kernel,
    scope: Scope,
    cpus: &[usize],
    budget: &FdBudget,
) -> Attached {
    if scope == Scope::System {
        let (open, unavailable) = open_all(kernel, scope, Target::AnyTask, cpus, budget);
        return Attached {
            method: Method::PerCpu,
            fallback: None,
            pids: Vec::new(),
            helpers_excluded: 0,
            helpers_counted: None,
            open,
            unavailable,
            cgroup: None,
        };
    }
    let online = crate::host::online_cpus();
    match attach_cgroup(kernel, scope, &online, budget) {
        Ok(a) => a,
        Err(fallback) => attach_inherited(kernel, scope, &online, fallback, budget),
    }
}

/// Process scope through this process's own cgroup, one counter per CPU.
/// Fails with the reason when the cgroup, or a counter the machine has,
/// cannot be opened: a cgroup counter is a per-CPU counter, and where those
/// are not permitted (paranoid 1) inherited ones may still be; an event
/// the cgroup cannot count (ENOENT: no perf_event state in the cgroup)
/// falls back too, rather than leaving the run without counters.
fn attach_cgroup(
    kernel: &dyn Kernel,
    scope: Scope,
    online: &[usize],
    budget: &FdBudget,
) -> Result<Attached, Unavailable> {
    let cg = kernel.process_cgroup()?;
    let (open, unavailable) = open_all(kernel, scope, Target::Cgroup(&cg.file), online, budget);
    if let Some(u) = cgroup_failure(&cg.mount, &cg.dir, &unavailable) {
        // The counters close before the cgroup moves the process back.
        drop(open);
        drop(cg);
        return Err(u);
    }
    Ok(Attached {
        method: Method::Cgroup,
        fallback: None,
        pids: Vec::new(),
        helpers_excluded: cg.helpers_excluded,
        helpers_counted: cg.helpers_counted.clone(),
        open,
        unavailable,
        cgroup: Some(cg),
    })
}

/// Process scope on every thread of ours but the helpers, inherited by
/// the threads they create; `task_exits` is reported unavailable where the
/// kernel does not count inherited exits.
fn attach_inherited(
    kernel: &dyn Kernel,
    scope: Scope,
    online: &[usize],
    fallback: Unavailable,
    budget: &FdBudget,
) -> Attached {
    let helpers = super::helpers::tids();
    let mut pids = crate::host::own_threads();
    pids.retain(|tid| !helpers.contains(tid));
    if pids.is_empty() {
        pids.push(sys::gettid());
    }
    // Before the counters: the probe's own thread must not count. Its
    // counter is closed only once the catalog's are open: closing the last
    // counter of a tracepoint costs a grace period (closer.rs).
    let (exits_counted, probe) = inherited_exits_counted(kernel);
    let (mut open, mut unavailable) =
        open_all(kernel, scope, Target::Threads(&pids), online, budget);
    drop(probe);
    if exits_counted == Some(false) {
        if let Some(spec) = open.remove_single(EXITS_METRIC) {
            unavailable.push((spec, inherited_exits_missed()));
        }
    }
    Attached {
        method: Method::Inherit,
        fallback: Some(fallback),
        pids,
        helpers_excluded: helpers.len(),
        helpers_counted: None,
        open,
        unavailable,
        cgroup: None,
    }
}

/// Opens every event of the catalog for `target`: per CPU, grouped per
/// CPU ([`group`]); per thread, ungrouped.
fn open_all(
    kernel: &dyn Kernel,
    scope: Scope,
    target: Target<'_>,
    cpus: &[usize],
    budget: &FdBudget,
) -> (CounterSet, Vec<(EventSpec, Unavailable)>) {
    let Target::Threads(pids) = target else {
        return open_per_cpu(kernel, scope, target, cpus, budget);
    };
    let (mut open, mut unavailable) = (CounterSet::default(), Vec::new());
    for spec in events::catalog(scope) {
        match open_threads(kernel, &spec, pids, budget) {
            Ok(counters) => open.push_singles(spec, Vec::new(), counters),
            Err(u) => unavailable.push((spec, u)),
        }
    }
    (open, unavailable)
}

/// The catalog on every CPU of `cpus` (a cgroup's tasks, or any task),
/// one group per CPU.
fn open_per_cpu<'a>(
    kernel: &dyn Kernel,
    scope: Scope,
    target: Target<'a>,
    cpus: &[usize],
    budget: &FdBudget,
) -> (CounterSet, Vec<(EventSpec, Unavailable)>) {
    let ctx = OpenContext::of(kernel, true, Some(budget));
    group::open_per_cpu(
        events::catalog(scope),
        cpus,
        |spec| {
            let mut b = builder(kernel, spec)?;
            match target {
                Target::Cgroup(f) => b.observe_cgroup(f),
                _ => b.any_pid(),
            };
            Ok(b)
        },
        |b: &mut Builder<'a>, spec, cpu, role| {
            b.one_cpu(cpu);
            let opened = match role {
                Role::Alone => kernel.open(b.enabled(false).read_format(SINGLE_FORMAT)),
                Role::Leader => kernel.open(b.enabled(false).read_format(LEADER_FORMAT)),
                Role::Member(leader) => {
                    kernel.open_member(b.enabled(true).read_format(SINGLE_FORMAT), leader)
                }
            };
            opened.map_err(|e| sys::explain_open_error(&e, spec.kind(), &ctx))
        },
    )
}

/// The counter of `spec` with what every target shares.
fn builder<'a>(kernel: &dyn Kernel, spec: &EventSpec) -> Result<Builder<'a>, Unavailable> {
    let mut b = match spec.source {
        Source::Tracepoint(sys_name, name) => {
            Builder::new(Tracepoint::with_id(kernel.tracepoint_id(sys_name, name)?))
        }
        Source::KProbe(func) => Builder::new(Tracepoint::with_id(kernel.kprobe_id(func)?)),
        Source::Software(e) => Builder::new(e),
        Source::Hardware(e) => Builder::new(e),
    };
    b.include_kernel().exclude_user(false);
    Ok(b)
}

/// Opens one event on every thread of `pids`, inherited by the threads
/// they create (any CPU).
fn open_threads(
    kernel: &dyn Kernel,
    spec: &EventSpec,
    pids: &[i32],
    budget: &FdBudget,
) -> Result<Vec<Counter>, Unavailable> {
    let mut b = builder(kernel, spec)?;
    let ctx = OpenContext::of(kernel, false, Some(budget));
    b.inherit(true).any_cpu();
    let mut counters = Vec::new();
    for &pid in pids {
        b.observe_pid(pid);
        match kernel.open(&b) {
            Ok(c) => counters.push(c),
            // A thread that exited between listing and opening.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) && pid != pids[0] => {}
            Err(e) => return Err(sys::explain_open_error(&e, spec.kind(), &ctx)),
        }
    }
    Ok(counters)
}

/// The metric counting thread exits (`sched:sched_process_exit`).
const EXITS_METRIC: &str = "task_exits";

/// Why the cgroup method cannot be used, from the counters that failed on
/// the cgroup; `None` when every event the machine has was opened.
fn cgroup_failure(
    mount: &std::path::Path,
    dir: &std::path::Path,
    failed: &[(EventSpec, Unavailable)],
) -> Option<Unavailable> {
    let (spec, u) = failed
        .iter()
        .find(|(spec, u)| !u.absent || !spec.optional)?;
    if u.absent {
        // ENOENT for events that exist (they open on a CPU or a thread):
        // the cgroup has no perf_event state. Seen on 6.1 with a cgroup v2
        // hierarchy in which no controller was ever enabled (a bare
        // initramfs): enabling any one recomputes the root's controller
        // mask, and new cgroups then get perf_event (an implicit controller).
        let root = mount.join("cgroup.subtree_control");
        return Some(Unavailable::fixable(
            format!(
                "the kernel has no perf_event state for cgroup {} ({}: {}); seen where no \
                 cgroup v2 controller was ever enabled",
                dir.display(),
                spec.event,
                u.reason
            ),
            format!(
                "enable any controller once, e.g. `echo +pids > {}`, or use --perf-scope system",
                root.display()
            ),
        ));
    }
    // The counter's own explanation already fits the user and the errno
    // (paranoid for EACCES, the descriptor budget for EMFILE, ...).
    Some(Unavailable::fixable(
        format!(
            "per-CPU cgroup counters could not be opened ({}: {})",
            spec.event, u.reason
        ),
        u.fix.clone(),
    ))
}

/// Whether this kernel counts a thread's `sched:sched_process_exit` on a
/// counter the thread inherited: `Some(false)` when a probe thread's exit
/// was not counted, `None` when the probe could not run.
///
/// Upstream 4f6fc7821283 ("perf: Fix sample vs do_exit()", 6.16) moved
/// `perf_event_exit_task()`, which detaches a thread's inherited counters
/// and folds them into the parent's, ahead of `exit_mm()` in `do_exit()`;
/// mainline also fires `sched_process_exit` before it (6.18 here counts
/// every exit), but its stable backports left the tracepoint after
/// `exit_mm()` (Debian's 6.1.0-57, the guest of scripts/vm-run.sh, behaves
/// so: found in the guest tests, cause read from the sources), so it fires
/// when the thread has no counters any more and every inherited
/// `task_exits` reads 0. Per-CPU counters (a cgroup, or system scope) are
/// not the thread's own and still count it.
fn inherited_exits_counted(kernel: &dyn Kernel) -> (Option<bool>, Option<Counter>) {
    let mut counter = None;
    let counted = probe_exit(kernel, &mut counter);
    (counted, counter)
}

/// The probe of [`inherited_exits_counted`]; leaves its counter in `keep`.
fn probe_exit(kernel: &dyn Kernel, keep: &mut Option<Counter>) -> Option<bool> {
    let id = kernel.tracepoint_id("sched", "sched_process_exit").ok()?;
    let mut b = Builder::new(Tracepoint::with_id(id));
    b.include_kernel()
        .exclude_user(false)
        .inherit(true)
        .any_cpu()
        .observe_pid(sys::gettid())
        .enabled(true);
    let counter = keep.insert(kernel.open(&b).ok()?);
    let (tx, rx) = std::sync::mpsc::channel();
    let probe = std::thread::Builder::new()
        .name("herd-exit-probe".into())
        .spawn(move || {
            let _ = tx.send(sys::gettid());
        })
        .ok()?;
    let tid = rx.recv().ok()?;
    probe.join().ok()?;
    // join returns when the kernel clears the thread's tid (in exit_mm), on
    // older kernels before the tracepoint; /proc/self/task/<tid> goes only
    // when the thread is released, after its counters were folded back.
    let task = std::path::PathBuf::from(format!("/proc/self/task/{tid}"));
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    while task.exists() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Some(counter.read().ok()? > 0)
}

/// The note for `task_exits` where inherited counters miss every exit.
pub(super) fn inherited_exits_missed() -> Unavailable {
    Unavailable::fixable(
        "this kernel detaches a thread's inherited counters before sched:sched_process_exit \
         fires (a probe thread's exit counted 0; stable backports of upstream 4f6fc7821283 \
         \"perf: Fix sample vs do_exit()\"; seen on Debian 6.1.0-57), so inherited per-thread \
         counters cannot count exits",
        "let process scope count through a cgroup instead (needs cgroup v2 mounted, e.g. \
         `mount -t cgroup2 none /sys/fs/cgroup`; see the note on the cgroup method), \
         or use --perf-scope system",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_failures_choose_the_fallback_and_explain_it() {
        let (mount, dir) = (
            std::path::Path::new("/sys/fs/cgroup"),
            std::path::Path::new("/sys/fs/cgroup/herd-perf-7"),
        );
        let spec = |metric: &str| {
            *events::catalog(Scope::Process)
                .iter()
                .find(|e| e.metric == metric)
                .unwrap()
        };
        // Absent optional events (no PMU, no futex2) are no reason to fall back.
        let absent = vec![
            (spec("cycles"), Unavailable::absent("no PMU")),
            (spec("sys_futex_wake"), Unavailable::absent("old kernel")),
        ];
        assert_eq!(cgroup_failure(mount, dir, &absent), None);
        // ENOENT for a required event: no perf_event state in the cgroup.
        let mut enoent = absent.clone();
        enoent.push((spec("task_exits"), Unavailable::absent("ENOENT")));
        let u = cgroup_failure(mount, dir, &enoent).unwrap();
        assert!(
            u.reason
                .contains("no perf_event state for cgroup /sys/fs/cgroup/herd-perf-7"),
            "{u:?}"
        );
        assert!(
            u.reason.contains("sched:sched_process_exit: ENOENT"),
            "{u:?}"
        );
        assert!(
            u.fix
                .contains("echo +pids > /sys/fs/cgroup/cgroup.subtree_control"),
            "{u:?}"
        );
        // Permission: the counter's own (paranoid) fix.
        let ctx = |root| OpenContext {
            system: true,
            paranoid: Some(2),
            root,
            budget: None,
        };
        let explain = |errno, root| {
            sys::explain_open_error(
                &std::io::Error::from_raw_os_error(errno),
                sys::EventKind::Tracepoint,
                &ctx(root),
            )
        };
        let denied = vec![(spec("sys_futex"), explain(libc::EACCES, false))];
        let u = cgroup_failure(mount, dir, &denied).unwrap();
        assert!(
            u.reason.contains(
                "could not be opened (syscalls:sys_enter_futex: permission denied (EACCES)"
            ),
            "{u:?}"
        );
        assert!(u.fix.contains("perf_event_paranoid=0"), "{u:?}");
        // EMFILE: named as such, never as a paranoid problem (today's bug).
        let emfile = vec![(spec("sys_futex"), explain(libc::EMFILE, true))];
        let u = cgroup_failure(mount, dir, &emfile).unwrap();
        assert!(u.reason.contains("EMFILE"), "{u:?}");
        assert!(!u.fix.contains("paranoid"), "{u:?}");
        assert!(u.fix.contains("ulimit"), "{u:?}");
        assert!(!inherited_exits_missed().fix.is_empty());
    }
}
