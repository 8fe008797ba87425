//! Progress bars for long measurements (indicatif).
//!
//! A bar is only ever drawn on an interactive terminal: it stays hidden
//! when stderr or stdout is not a terminal (output piped or redirected, CI
//! logs) and in child measurements ([`crate::runner::is_child`]), whose
//! parent draws the one bar. It also stays hidden for the first
//! [`REVEAL_AFTER`]: short runs print nothing but their results.
//!
//! The measured threads never draw: [`Progress::inc`] is one relaxed
//! atomic add and [`Progress::set_message`] an uncontended store. A helper
//! thread, registered as such so that the perf counters leave it out
//! (`perf/helpers.rs`), reveals the bar and redraws it five times a
//! second, and indicatif's own ticker is never started. So a storm on a
//! terminal measures what the same storm measures into a pipe. Create the
//! bar before the perf session opens (the helper must exist by then to be
//! kept out of the counted cgroup).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a run must last before its bar appears.
pub const REVEAL_AFTER: Duration = Duration::from_secs(2);

/// How often the helper redraws a visible bar.
pub const REDRAW: Duration = Duration::from_millis(200);

/// True when a bar may be drawn: both output streams are terminals and
/// this process is not a child measurement.
pub fn allowed() -> bool {
    allowed_for(
        crate::runner::is_child(),
        std::io::stderr().is_terminal(),
        std::io::stdout().is_terminal(),
    )
}

/// The rule behind [`allowed`], on explicit facts.
pub fn allowed_for(is_child: bool, stderr_tty: bool, stdout_tty: bool) -> bool {
    !is_child && stderr_tty && stdout_tty
}

/// What the measured threads update and the helper draws.
#[derive(Debug, Default)]
struct Shared {
    pos: AtomicU64,
    msg: Mutex<Option<String>>,
    done: AtomicBool,
}

/// A counted progress bar over `total` steps (e.g. child runs).
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    shared: Arc<Shared>,
}

impl Progress {
    /// A bar over `total` steps described by `what` (e.g. "runs"). Hidden
    /// unless [`allowed`]; revealed after [`REVEAL_AFTER`].
    pub fn new(total: u64, what: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        let style = ProgressStyle::with_template(&format!(
            "{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {what} (eta {{eta}}) {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        let shared = Arc::new(Shared::default());
        if allowed() {
            let (bar, shared) = (bar.clone(), shared.clone());
            let _ = std::thread::Builder::new()
                .name("herd-progress".into())
                .spawn(move || draw(&bar, &shared));
        }
        Progress { bar, shared }
    }

    /// Says what is running now.
    pub fn set_message(&self, msg: impl Into<String>) {
        let mut m = self.shared.msg.lock().unwrap_or_else(|p| p.into_inner());
        *m = Some(msg.into());
    }

    /// One step done.
    pub fn inc(&self) {
        // Relaxed: a display counter; the helper's redraw needs no order.
        self.shared.pos.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        // Relaxed: the helper only polls it; the bar itself is shared
        // through indicatif's own lock.
        self.shared.done.store(true, Ordering::Relaxed);
        self.bar.finish_and_clear();
    }
}

/// The helper: waits [`REVEAL_AFTER`], then redraws every [`REDRAW`]
/// until the bar is finished.
fn draw(bar: &ProgressBar, shared: &Shared) {
    crate::perf::helpers::register_current();
    let reveal = Instant::now() + REVEAL_AFTER;
    while Instant::now() < reveal {
        if shared.done.load(Ordering::Relaxed) {
            crate::perf::helpers::leave();
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !bar.is_finished() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    while !shared.done.load(Ordering::Relaxed) && !bar.is_finished() {
        bar.set_position(shared.pos.load(Ordering::Relaxed));
        let msg = shared.msg.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(m) = msg {
            bar.set_message(m);
        }
        bar.tick();
        std::thread::sleep(REDRAW);
    }
    crate::perf::helpers::leave();
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_on_an_interactive_parent() {
        assert!(allowed_for(false, true, true));
        assert!(!allowed_for(true, true, true), "child measurement");
        assert!(!allowed_for(false, false, true), "stderr redirected");
        assert!(!allowed_for(false, true, false), "stdout piped");
    }

    #[test]
    fn hidden_at_first_and_the_caller_only_counts() {
        // Hidden for REVEAL_AFTER even on a terminal; counting still works
        // and never touches the bar from the calling thread.
        let p = Progress::new(3, "runs");
        p.inc();
        p.set_message("x");
        assert!(p.bar.is_hidden());
        assert_eq!(p.shared.pos.load(Ordering::Relaxed), 1);
        assert_eq!(p.bar.position(), 0, "only the helper draws");
        p.finish();
        assert!(p.bar.is_finished());
    }
}
