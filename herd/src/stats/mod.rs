//! Summaries of repeated measurements, and whether two of them differ.
//!
//! Invariants: a [`Summary`] is built from at least one finite value; NaN
//! and infinite values are rejected (a metric that could not be measured
//! is absent from a run, never NaN). The standard deviation printed
//! (`±%stddev`) is the *sample* standard deviation (n - 1), the one
//! Welch's test uses; LKP prints the population one (n), which is smaller
//! by sqrt((n-1)/n) (11% at n = 5). With one value it is 0.
//!
//! Comparing a baseline `a` with a candidate `b` ([`Change::between`]):
//! * `%change` = 100 (mean_b - mean_a) / |mean_a|
//!   ([`pct_change`](change::pct_change));
//! * Welch's t-test ([`welch`](welch::welch)): unequal variances,
//!   two-sided p-value from Student's t with the Welch–Satterthwaite
//!   degrees of freedom;
//! * LKP's rule ([`lkp_changed`](lkp::lkp_changed)), computed as `lkp
//!   compare` does (lkp-tests `lib/stats.rb`, `lib/changed_stat.rb`):
//!   each side sorted and trimmed by n/32 values at either end (at most 3;
//!   none below 32 runs), its centre the middle value of what is left (LKP
//!   calls it the mean; it is the upper median); changed when b's smallest
//!   value is above a's centre and b's centre above a's largest (or the
//!   mirror), at least one side has 3 runs or more, and the centres differ
//!   by more than 5% (LKP skips smaller changes);
//! * with ~60 metrics per comparison, some p-values fall under 0.05 by
//!   chance alone: [`adjust_family`] turns the p-values of every test in
//!   one table into Benjamini–Hochberg q-values (the false discovery rate
//!   over the table), and the stars and verdicts use q, not p;
//! * a change is *significant* only when both hold (q < alpha and LKP's
//!   rule). Never a verdict from one run: with fewer than two values on
//!   either side there is no p-value and nothing is significant.
//!
//! One idea a file: `summary.rs` (one metric over repetitions, and LKP's
//! trimmed view of it), `welch.rs` (Welch's t-test), `lkp.rs` (LKP's
//! rule), `change.rs` (`%change` and the verdict on one metric),
//! `family.rs` (Benjamini–Hochberg over one table's tests). What the rest of herd uses is
//! re-exported here, under the paths it had when this was one file.

mod change;
mod family;
mod lkp;
mod summary;
#[cfg(test)]
mod test_rng;
mod welch;

pub use change::{Change, Verdict, DEFAULT_ALPHA};
pub use family::{adjust_family, family_note, FamilyMember};
pub use summary::Summary;
