//! Test set-up that herd's and exitq's tests share (a dev-dependency of
//! both, never of their libraries).
//!
//! * [`PidsCgroup`]: a pids cgroup made for one test, whose `pids.max`
//!   stops a child's next thread; the tests then check the diagnosis
//!   names it.
mod pids_cgroup;

pub use pids_cgroup::PidsCgroup;
