//! Shared by the miri suites (`miri_core.rs`, `miri_cell.rs`): the domain
//! configurations each scenario runs in, with small batches so that a few
//! dozen callbacks (miri's size) seal, steal and hand over batches.
use std::time::Duration;

use exitq::{Callbacks, Domain, Reclaimer};

/// A reclaimer thread running callbacks locally, one offloading them to
/// the reclaimer, and the inline reclaimer (no thread).
pub fn domains() -> Vec<(&'static str, Domain)> {
    let fast = Duration::from_micros(100);
    vec![
        (
            "thread, local",
            Domain::builder().batch_size(4).flush_latency(fast).build(),
        ),
        (
            "thread, offload",
            Domain::builder()
                .batch_size(3)
                .callbacks(Callbacks::Offload)
                .flush_latency(fast)
                .build(),
        ),
        (
            "inline",
            Domain::builder()
                .batch_size(2)
                .reclaimer(Reclaimer::Inline)
                .build(),
        ),
    ]
}
