//! Per-CPU perf groups: one group of counters per CPU, enabled, disabled
//! and read through its leader, so that the cost of a session grows with
//! the CPUs, not with events x CPUs.
//!
//! # Why
//! A per-CPU counter (system scope, and process scope through a cgroup) is
//! one descriptor per event per CPU: 9 to 14 events on 512 CPUs are 4,608
//! to 7,168 descriptors. Enabled, disabled and read one by one, each is a
//! system call, and each ioctl or read of an active counter that lives on
//! another CPU is an IPI to that CPU (`event_function_call()`,
//! `perf_event_read()` in kernel/events/core.c), which in a guest is a VM
//! exit on both sides. herd paid that three times per session (enable,
//! disable, read), on every CPU of the run.
//!
//! # The layout
//! On each CPU the software, tracepoint and kprobe events form one group
//! ([`CpuGroup`]): the leader is the first event of the catalog that opened
//! on that CPU, opened disabled with `PERF_FORMAT_GROUP`; every later event
//! joins it (`group_fd` = the leader), opened *enabled*. A member that is
//! enabled counts only while its leader is, so
//!
//! * enabling is one `PERF_EVENT_IOC_ENABLE` on each leader, disabling one
//!   `PERF_EVENT_IOC_DISABLE` (one IPI per CPU each). This is what `perf
//!   stat` does (it enables group leaders only). `PERF_IOC_FLAG_GROUP` is
//!   not used: with it the kernel walks the group and makes one
//!   `event_function_call()` per member (`perf_event_for_each()`), an IPI
//!   per event again, and re-schedules the CPU's context for each;
//! * reading is one `read()` per CPU on the leader: the kernel reads every
//!   member in the same cross-call (`__perf_event_read()` with `group`)
//!   and returns them all with the leader's `time_enabled`/`time_running`,
//!   which are every member's (they are enabled and disabled together).
//!
//! Hardware events (cycles, instructions) are *not* put in the software
//! group. The PMU has a few counters per CPU and the kernel multiplexes
//! hardware events over them; a group is scheduled all or nothing, and a
//! hardware member moves the whole group into the hardware context. The
//! exact software and tracepoint counts (never scaled, see `percpu.rs`)
//! would then stop whenever the PMU is busy and come back as
//! extrapolations. They stay ungrouped ([`CounterSet::singles`]), as before,
//! each enabled, disabled and read on its own; inherited per-thread
//! counters are ungrouped too (`inherit` and group reads do not mix on
//! many kernels).
//!
//! # What does not change
//! Each counter is still its own descriptor: the descriptor budget
//! (`budget.rs`) counts the same, per-CPU values and totals are the same
//! samples, an event that fails on any CPU is unavailable as before and
//! its counters already opened on other CPUs are closed (it is always the
//! last to have joined their groups, so no group loses anything else; if
//! it was to lead them, no other event has joined yet). Where the kernel
//! refuses to add an event to a group but opens it alone, it is counted
//! alone ([`CounterSet::singles`]), never lost. The closer (`closer.rs`) gets
//! every descriptor, members before leaders (a closed leader would first
//! promote its members to groups of their own).
//!
//! [`open_per_cpu`] places the counters and is generic over the counter
//! type, so the layout and its failure handling are tested without a
//! kernel; the reads and ioctls are [`CounterSet<Counter>`]'s.

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use anyhow::{anyhow, Context, Result};
use perf_event::{Counter, ReadFormat};

use super::events::EventSpec;
use super::percpu::Sample;
use super::sys::{EventKind, Unavailable};

/// The read format of counters read alone.
pub(super) const SINGLE_FORMAT: ReadFormat =
    ReadFormat::TOTAL_TIME_ENABLED.union(ReadFormat::TOTAL_TIME_RUNNING);
/// The read format of a group leader (every member with its id).
pub(super) const LEADER_FORMAT: ReadFormat =
    SINGLE_FORMAT.union(ReadFormat::GROUP).union(ReadFormat::ID);

/// One counter and what it counts: event `event` of [`CounterSet::events`],
/// its descriptor number `pos` there (the CPU's index in the event's
/// `cpus`, or the thread's for per-thread counters).
#[derive(Debug)]
pub(super) struct Slot<C> {
    pub(super) event: usize,
    pub(super) pos: usize,
    pub(super) counter: C,
}

/// One CPU's group: the leader and the counters that joined it.
#[derive(Debug)]
pub(super) struct CpuGroup<C> {
    pub(super) cpu: usize,
    pub(super) leader: Slot<C>,
    pub(super) members: Vec<Slot<C>>,
}

/// One opened event: its spec and the CPU of each of its descriptors
/// (empty for per-thread counters).
#[derive(Debug)]
pub(super) struct Placed {
    pub(super) spec: EventSpec,
    pub(super) cpus: Vec<usize>,
    /// Descriptors of this event.
    pub(super) fds: usize,
}

/// Every counter of a session's event catalog, and how they are grouped.
#[derive(Debug)]
pub(super) struct CounterSet<C = Counter> {
    /// The opened events, in catalog order.
    pub(super) events: Vec<Placed>,
    /// One group per CPU (per-CPU counters).
    pub(super) groups: Vec<CpuGroup<C>>,
    /// Counters outside any group: hardware events, per-thread counters,
    /// and any the kernel would not add to a group.
    pub(super) singles: Vec<Slot<C>>,
}

impl<C> Default for CounterSet<C> {
    fn default() -> Self {
        CounterSet {
            events: Vec::new(),
            groups: Vec::new(),
            singles: Vec::new(),
        }
    }
}

/// How [`open_per_cpu`] asks for one counter.
pub(super) enum Role<'a, C> {
    /// On its own, disabled (hardware events; a group the kernel refused).
    Alone,
    /// The first event on its CPU: disabled, with [`LEADER_FORMAT`].
    Leader,
    /// Into this leader's group (same CPU), enabled: it counts while the
    /// leader does.
    Member(&'a mut C),
}

/// True when `spec` joins its CPU's software group (see the module docs).
pub(super) fn groupable(spec: &EventSpec) -> bool {
    spec.kind() != EventKind::Hardware
}

/// Opens every event of `specs` on every CPU of `cpus`, in catalog order,
/// grouped per CPU as the module docs say. `prepare` is called once per
/// event (what is common to its CPUs, e.g. a tracepoint id) and `open`
/// once per counter. An event that fails to prepare or to open on any CPU
/// is returned as unavailable with the reason, and none of its counters
/// stays open.
pub(super) fn open_per_cpu<C, P>(
    specs: Vec<EventSpec>,
    cpus: &[usize],
    mut prepare: impl FnMut(&EventSpec) -> Result<P, Unavailable>,
    mut open: impl FnMut(&mut P, &EventSpec, usize, Role<'_, C>) -> Result<C, Unavailable>,
) -> (CounterSet<C>, Vec<(EventSpec, Unavailable)>) {
    let mut layout = CounterSet::default();
    let mut unavailable = Vec::new();
    // Built by CPU position; CPUs nothing opened on have no group.
    let mut groups: Vec<Option<CpuGroup<C>>> = cpus.iter().map(|_| None).collect();
    for spec in specs {
        let event = layout.events.len();
        let placed = prepare(&spec).and_then(|mut p| {
            for (pos, &cpu) in cpus.iter().enumerate() {
                let counter = |counter| Slot {
                    event,
                    pos,
                    counter,
                };
                match (&mut groups[pos], groupable(&spec)) {
                    (_, false) => {
                        let c = open(&mut p, &spec, cpu, Role::Alone)?;
                        layout.singles.push(counter(c));
                    }
                    (None, true) => {
                        let c = open(&mut p, &spec, cpu, Role::Leader)?;
                        groups[pos] = Some(CpuGroup {
                            cpu,
                            leader: counter(c),
                            members: Vec::new(),
                        });
                    }
                    (Some(g), true) => {
                        match open(&mut p, &spec, cpu, Role::Member(&mut g.leader.counter)) {
                            Ok(c) => g.members.push(counter(c)),
                            // Refused as a member: alone, or unavailable
                            // with the reason the kernel gives for that.
                            Err(_) => {
                                let c = open(&mut p, &spec, cpu, Role::Alone)?;
                                layout.singles.push(counter(c));
                            }
                        }
                    }
                }
            }
            Ok(())
        });
        match placed {
            Ok(()) => layout.events.push(Placed {
                spec,
                cpus: cpus.to_vec(),
                fds: cpus.len(),
            }),
            Err(u) => {
                // Close what this event opened: it is the newest member
                // of every group it joined, and a group it leads has no
                // other member yet (events open one after the other).
                for g in groups.iter_mut() {
                    if g.as_ref().is_some_and(|g| g.leader.event == event) {
                        *g = None;
                    } else if let Some(g) = g {
                        g.members.retain(|s| s.event != event);
                    }
                }
                layout.singles.retain(|s| s.event != event);
                unavailable.push((spec, u));
            }
        }
    }
    layout.groups = groups.into_iter().flatten().collect();
    (layout, unavailable)
}

impl<C> CounterSet<C> {
    /// Adds an ungrouped event: `counters[i]` is its descriptor `i` (one
    /// per thread, or per CPU of `cpus` when not empty).
    pub(super) fn push_singles(&mut self, spec: EventSpec, cpus: Vec<usize>, counters: Vec<C>) {
        let event = self.events.len();
        let fds = counters.len();
        self.singles
            .extend(counters.into_iter().enumerate().map(|(pos, counter)| Slot {
                event,
                pos,
                counter,
            }));
        self.events.push(Placed { spec, cpus, fds });
    }

    /// Takes out the ungrouped event `metric` (its counters are closed);
    /// `None` when there is none, or when it is in a group (a group's
    /// event cannot leave it without the others).
    pub(super) fn remove_single(&mut self, metric: &str) -> Option<EventSpec> {
        let event = self.events.iter().position(|p| p.spec.metric == metric)?;
        let grouped = self
            .groups
            .iter()
            .any(|g| g.leader.event == event || g.members.iter().any(|s| s.event == event));
        if grouped {
            return None;
        }
        self.singles.retain(|s| s.event != event);
        for s in &mut self.singles {
            if s.event > event {
                s.event -= 1;
            }
        }
        for g in &mut self.groups {
            for s in std::iter::once(&mut g.leader).chain(&mut g.members) {
                if s.event > event {
                    s.event -= 1;
                }
            }
        }
        Some(self.events.remove(event).spec)
    }

    /// True when no event is open.
    pub(super) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Descriptors open (leaders, members and singles).
    pub(super) fn fds(&self) -> usize {
        self.groups
            .iter()
            .map(|g| 1 + g.members.len())
            .sum::<usize>()
            + self.singles.len()
    }

    /// Every counter, members of a group before its leader.
    pub(super) fn into_counters(self) -> Vec<C> {
        let mut out = Vec::with_capacity(self.fds());
        let mut leaders = Vec::with_capacity(self.groups.len());
        for g in self.groups {
            out.extend(g.members.into_iter().map(|s| s.counter));
            leaders.push(g.leader.counter);
        }
        out.extend(leaders);
        out.extend(self.singles.into_iter().map(|s| s.counter));
        out
    }

    /// The `read()` calls [`CounterSet::read`] makes: one per group, one per
    /// ungrouped counter.
    pub(super) fn reads(&self) -> usize {
        self.groups.len() + self.singles.len()
    }
}

/// What [`CounterSet::read`] read: every event's samples, one per descriptor.
#[derive(Debug)]
pub(super) struct Readings {
    /// `samples[e][pos]`: descriptor `pos` of event `e` of the layout.
    pub(super) samples: Vec<Vec<Sample>>,
    /// `read()` calls made.
    pub(super) reads: usize,
}

impl CounterSet<Counter> {
    /// Starts counting: each group's leader (its members follow it) and
    /// each ungrouped counter.
    pub(super) fn enable(&mut self) -> Result<()> {
        self.switch("enable", Counter::enable)
    }

    /// Stops counting, as [`CounterSet::enable`] started it.
    pub(super) fn disable(&mut self) -> Result<()> {
        self.switch("disable", Counter::disable)
    }

    /// `ioctl` (through `f`) every leader and ungrouped counter, one each.
    fn switch(&mut self, what: &str, f: fn(&mut Counter) -> std::io::Result<()>) -> Result<()> {
        let (events, groups, singles) = (&self.events, &mut self.groups, &mut self.singles);
        for s in groups.iter_mut().map(|g| &mut g.leader).chain(singles) {
            f(&mut s.counter)
                .with_context(|| format!("perf: cannot {what} {}", events[s.event].spec.event))?;
        }
        Ok(())
    }

    /// Reads every counter: one `read()` per group, one per ungrouped
    /// counter.
    pub(super) fn read(&mut self) -> Result<Readings> {
        let mut samples: Vec<Vec<Sample>> = self
            .events
            .iter()
            .map(|p| vec![Sample::default(); p.fds])
            .collect();
        let mut reads = 0;
        let name = |s: &Slot<Counter>| self.events[s.event].spec.event;
        for g in &mut self.groups {
            let data = g
                .leader
                .counter
                .read_group()
                .with_context(|| format!("perf: cannot read the group of CPU {}", g.cpu))?;
            reads += 1;
            let ns = |t: Option<std::time::Duration>| t.map_or(0, |t| t.as_nanos() as u64);
            let (enabled_ns, running_ns) = (ns(data.time_enabled()), ns(data.time_running()));
            for s in std::iter::once(&g.leader).chain(&g.members) {
                let entry = data.get(&s.counter).ok_or_else(|| {
                    anyhow!(
                        "perf: the group of CPU {} read without {} (kernel id {})",
                        g.cpu,
                        name(s),
                        s.counter.id()
                    )
                })?;
                samples[s.event][s.pos] = Sample {
                    count: entry.value(),
                    enabled_ns,
                    running_ns,
                };
            }
        }
        for s in &mut self.singles {
            let d = s
                .counter
                .read_full()
                .with_context(|| format!("perf: cannot read {}", name(&*s)))?;
            reads += 1;
            samples[s.event][s.pos] = Sample {
                count: d.count(),
                enabled_ns: d.time_enabled().map_or(0, |t| t.as_nanos() as u64),
                running_ns: d.time_running().map_or(0, |t| t.as_nanos() as u64),
            };
        }
        debug_assert_eq!(reads, self.reads());
        Ok(Readings { samples, reads })
    }

    /// Every descriptor, members before leaders, for the closer.
    pub(super) fn into_fds(self) -> Vec<OwnedFd> {
        self.into_counters()
            .into_iter()
            // SAFETY: `into_raw_fd` gives up the Counter's ownership, so
            // the OwnedFd is the descriptor's only owner.
            .map(|c| unsafe { OwnedFd::from_raw_fd(c.into_raw_fd()) })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;
    use std::rc::Rc;

    use super::*;
    use crate::perf::budget::FdBudget;
    use crate::perf::events;
    use crate::perf::Scope;

    /// What the fake kernel did: descriptors open now, and every open.
    #[derive(Default)]
    struct Kernel {
        next: u32,
        open: BTreeSet<u32>,
        /// (metric, cpu, role, leader fd) of every successful open.
        log: Vec<(&'static str, usize, &'static str, Option<u32>)>,
    }

    /// A fake descriptor: closed when dropped.
    struct Fd {
        n: u32,
        kernel: Rc<RefCell<Kernel>>,
    }

    impl Drop for Fd {
        fn drop(&mut self) {
            assert!(
                self.kernel.borrow_mut().open.remove(&self.n),
                "double close"
            );
        }
    }

    type Fails = dyn Fn(&EventSpec, usize, &Role<'_, Fd>) -> bool;
    /// What [`place`] opened: the fake kernel, the counters, the events
    /// found unavailable.
    type Outcome = (
        Rc<RefCell<Kernel>>,
        CounterSet<Fd>,
        Vec<(EventSpec, Unavailable)>,
    );

    /// Opens the catalog on `cpus` with a fake kernel that refuses the
    /// opens `fails` says.
    fn place(specs: Vec<EventSpec>, cpus: &[usize], fails: &Fails) -> Outcome {
        let k = Rc::new(RefCell::new(Kernel::default()));
        let (layout, unavailable) = open_per_cpu(
            specs,
            cpus,
            |_| Ok(()),
            |_, spec, cpu, role| {
                if fails(spec, cpu, &role) {
                    return Err(Unavailable::fixable(format!("refused on CPU {cpu}"), ""));
                }
                let mut st = k.borrow_mut();
                let n = st.next;
                st.next += 1;
                st.open.insert(n);
                let (name, leader) = match role {
                    Role::Alone => ("alone", None),
                    Role::Leader => ("leader", None),
                    Role::Member(l) => ("member", Some(l.n)),
                };
                st.log.push((spec.metric, cpu, name, leader));
                Ok(Fd {
                    n,
                    kernel: k.clone(),
                })
            },
        );
        (k, layout, unavailable)
    }

    fn open_fds(k: &Rc<RefCell<Kernel>>) -> usize {
        k.borrow().open.len()
    }

    const CPUS: &[usize] = &[0, 1, 5, 300];

    #[test]
    fn one_group_per_cpu_led_by_the_first_event_hardware_alone() {
        let catalog = events::catalog(Scope::System);
        let hw = catalog.iter().filter(|s| !groupable(s)).count();
        assert!(hw >= 2, "the catalog has hardware events");
        let (k, layout, unavailable) = place(catalog.clone(), CPUS, &|_, _, _| false);
        assert!(unavailable.is_empty());
        assert_eq!(layout.events.len(), catalog.len());
        assert_eq!(layout.groups.len(), CPUS.len(), "one group per CPU");
        for (g, &cpu) in layout.groups.iter().zip(CPUS) {
            assert_eq!(g.cpu, cpu);
            assert_eq!(g.leader.event, 0, "led by the catalog's first event");
            assert_eq!(g.members.len(), catalog.len() - hw - 1);
            for s in std::iter::once(&g.leader).chain(&g.members) {
                assert!(groupable(&layout.events[s.event].spec));
                assert_eq!(layout.events[s.event].cpus[s.pos], cpu);
            }
        }
        assert_eq!(layout.singles.len(), hw * CPUS.len());
        assert!(layout
            .singles
            .iter()
            .all(|s| !groupable(&layout.events[s.event].spec)));
        // Every member joined its own CPU's leader.
        let st = k.borrow();
        for (metric, cpu, role, leader) in &st.log {
            if *role == "member" {
                let (lm, lc, lr, _) = st.log[leader.unwrap() as usize];
                assert_eq!((lc, lr), (*cpu, "leader"), "{metric} on {cpu}");
                assert_eq!(lm, catalog[0].metric);
            }
        }
        drop(st);
        // Reads: one per CPU, plus one per hardware counter.
        assert_eq!(layout.reads(), CPUS.len() * (1 + hw));
        // The budget counts exactly what is open.
        let budget = FdBudget::plan(catalog.len() as u64, CPUS.len() as u64, 0, 0);
        assert_eq!(open_fds(&k) as u64, budget.events * budget.per_event);
        assert_eq!(layout.fds(), open_fds(&k));
        // Closing: members before their leader.
        let order: Vec<u32> = layout.into_counters().iter().map(|f| f.n).collect();
        let leaders: Vec<u32> = (0..CPUS.len() as u32).collect();
        let first_leader = order.iter().position(|n| leaders.contains(n)).unwrap();
        assert_eq!(first_leader, CPUS.len() * (catalog.len() - hw - 1));
        assert_eq!(open_fds(&k), 0);
    }

    #[test]
    fn an_event_failing_on_cpu_k_leaves_nothing_behind_and_is_unavailable() {
        let catalog = events::catalog(Scope::System);
        for failing in [0, 3, catalog.len() - 1] {
            let metric = catalog[failing].metric;
            let (k, layout, unavailable) = place(catalog.clone(), CPUS, &move |s, cpu, _| {
                s.metric == metric && cpu == 5
            });
            assert_eq!(unavailable.len(), 1);
            assert_eq!(unavailable[0].0.metric, metric);
            assert!(unavailable[0].1.reason.contains("CPU 5"));
            assert!(layout.events.iter().all(|p| p.spec.metric != metric));
            // Nothing of it open, everything else open on every CPU.
            let per_cpu = catalog.len() - 1;
            assert_eq!(open_fds(&k), per_cpu * CPUS.len(), "{metric}");
            assert_eq!(layout.fds(), open_fds(&k));
            assert_eq!(layout.groups.len(), CPUS.len());
            for g in &layout.groups {
                let ev = |s: &Slot<Fd>| layout.events[s.event].spec.metric;
                assert!(std::iter::once(&g.leader)
                    .chain(&g.members)
                    .all(|s| ev(s) != metric));
                // The first event that opened leads (the second when the first failed).
                assert_eq!(ev(&g.leader), layout.events[0].spec.metric);
            }
            // Slots point at their event's CPUs.
            for s in layout.groups.iter().flat_map(|g| g.members.iter()) {
                assert_eq!(layout.events[s.event].fds, CPUS.len());
            }
        }
    }

    #[test]
    fn a_refused_member_is_counted_alone_and_a_refused_event_everywhere_is_unavailable() {
        let catalog: Vec<EventSpec> = events::catalog(Scope::System)
            .into_iter()
            .filter(groupable)
            .collect();
        // The kernel refuses group members on CPU 1 only.
        let (k, layout, unavailable) = place(catalog.clone(), CPUS, &|_, cpu, r| {
            cpu == 1 && matches!(r, Role::Member(_))
        });
        assert!(unavailable.is_empty());
        assert_eq!(layout.groups.len(), CPUS.len());
        let g1 = layout.groups.iter().find(|g| g.cpu == 1).unwrap();
        assert!(g1.members.is_empty());
        assert_eq!(layout.singles.len(), catalog.len() - 1);
        assert!(layout
            .singles
            .iter()
            .all(|s| layout.events[s.event].cpus[s.pos] == 1));
        assert_eq!(layout.reads(), CPUS.len() + catalog.len() - 1);
        assert_eq!(open_fds(&k), catalog.len() * CPUS.len());
        // Refused alone too (a real failure): unavailable, nothing left.
        let metric = catalog[2].metric;
        let (k, layout, unavailable) = place(catalog.clone(), CPUS, &move |s, cpu, _| {
            s.metric == metric && cpu == 300
        });
        assert_eq!(unavailable.len(), 1);
        assert_eq!(open_fds(&k), (catalog.len() - 1) * CPUS.len());
        drop(layout);
        assert_eq!(open_fds(&k), 0);
    }

    #[test]
    fn an_event_that_cannot_be_prepared_opens_nothing() {
        let catalog = events::catalog(Scope::System);
        let k = Rc::new(RefCell::new(0usize));
        let (layout, unavailable) = open_per_cpu(
            catalog.clone(),
            CPUS,
            |s| {
                if s.metric == catalog[0].metric {
                    Err(Unavailable::absent("no such tracepoint"))
                } else {
                    Ok(())
                }
            },
            |_, _, _, _: Role<'_, ()>| {
                *k.borrow_mut() += 1;
                Ok(())
            },
        );
        assert_eq!(unavailable.len(), 1);
        assert!(unavailable[0].1.absent);
        assert_eq!(*k.borrow(), (catalog.len() - 1) * CPUS.len());
        assert_eq!(layout.groups[0].leader.event, 0);
        assert_eq!(layout.events[0].spec.metric, catalog[1].metric);
    }

    #[test]
    fn removing_an_ungrouped_event_reindexes_the_rest() {
        let catalog = events::catalog(Scope::Process);
        let mut layout: CounterSet<u32> = CounterSet::default();
        for (i, spec) in catalog.iter().take(3).enumerate() {
            layout.push_singles(*spec, Vec::new(), vec![i as u32 * 10, i as u32 * 10 + 1]);
        }
        assert_eq!(layout.fds(), 6);
        assert_eq!(layout.reads(), 6);
        let gone = layout.remove_single(catalog[1].metric).unwrap();
        assert_eq!(gone.metric, catalog[1].metric);
        assert_eq!(layout.events.len(), 2);
        assert_eq!(layout.fds(), 4);
        for s in &layout.singles {
            assert_eq!(s.counter / 10, if s.event == 0 { 0 } else { 2 });
        }
        assert!(layout.remove_single("no_such_metric").is_none());
        // A grouped event cannot be taken out alone.
        let (_k, mut grouped, _) = place(events::catalog(Scope::System), CPUS, &|_, _, _| false);
        let leader = grouped.events[0].spec.metric;
        assert!(grouped.remove_single(leader).is_none());
    }
}
