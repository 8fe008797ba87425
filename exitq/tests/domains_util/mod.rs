//! The domain configurations the guarantees of `tests/domain.rs` and
//! `tests/grace_periods.rs` are checked under: a reclaimer thread, the
//! inline reclaimer, and the fence fallback instead of membarrier.
use exitq::{Domain, Expedite, Reclaimer};

pub fn domains() -> Vec<(&'static str, Domain)> {
    vec![
        ("thread", Domain::new()),
        (
            "inline",
            Domain::builder().reclaimer(Reclaimer::Inline).build(),
        ),
        (
            "fallback",
            Domain::builder().expedite(Expedite::Fallback).build(),
        ),
    ]
}
