//! The domains the roles share, one per configuration worth torturing.
use std::sync::atomic::{AtomicPtr, AtomicU64};
use std::time::Duration;

use exitq::{Callbacks, Domain, Expedite, RcuCell, RcuOption, Reclaimer};

use crate::handoffs;
use crate::world::{new_obj, Slot, Tracked};

/// The domains (a `Slot` each: the domain, a cell, an option, the
/// counters of what was issued and ran), the polled one last.
pub(crate) fn slots() -> Vec<Slot> {
    let fast = Duration::from_micros(100);
    let configs: Vec<(&'static str, exitq::DomainBuilder)> = vec![
        ("default", Domain::builder()),
        (
            "offload, batch 2",
            Domain::builder()
                .callbacks(Callbacks::Offload)
                .batch_size(2)
                .flush_latency(fast),
        ),
        (
            "inline, batch 3",
            Domain::builder()
                .reclaimer(Reclaimer::Inline)
                .batch_size(3)
                .flush_latency(fast),
        ),
        (
            "batch 1, backlog 8",
            Domain::builder()
                .batch_size(1)
                .backlog_limit(8)
                .first_check_delay(Duration::ZERO)
                .flush_latency(Duration::from_micros(200)),
        ),
        (
            "fences, batch 7",
            Domain::builder()
                .expedite(Expedite::Fallback)
                .batch_size(7)
                .flush_latency(fast),
        ),
        (
            handoffs::SLOT_NAME,
            Domain::builder()
                .batch_size(4)
                .flush_latency(fast)
                .exit_poll(Some(fast)),
        ),
        // Last: used by the streamers only (`World::shared`).
        ("polled", Domain::builder().batch_size(16)),
    ];
    configs
        .into_iter()
        .enumerate()
        .map(|(i, (name, b))| {
            let domain = b.stall_timeout(Duration::from_secs(30)).build();
            Slot {
                name,
                cell: RcuCell::new(&domain, Tracked::new(i, 0)),
                option: RcuOption::new(&domain, Some(Tracked::new(i, 0))),
                domain,
                current: AtomicPtr::new(new_obj(0)),
                issued: AtomicU64::new(0),
                ran: AtomicU64::new(0),
                panics: AtomicU64::new(0),
            }
        })
        .collect()
}
