//! Progress bars for long measurements (indicatif).
//!
//! A bar is only ever drawn on an interactive terminal: it stays hidden
//! when stderr or stdout is not a terminal (output piped or redirected, CI
//! logs) and in child measurements ([`crate::runner::is_child`]), whose
//! parent draws the one bar. It also stays hidden for the first
//! [`REVEAL_AFTER`]: short runs print nothing but their results.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a run must last before its bar appears.
pub const REVEAL_AFTER: Duration = Duration::from_secs(2);

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

/// A counted progress bar over `total` steps (e.g. child runs).
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
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
        if allowed() {
            let weak = bar.downgrade();
            // Reveal from a helper thread, so a first run that lasts a
            // minute still shows its bar after two seconds.
            let _ = std::thread::Builder::new()
                .name("herd-progress".into())
                .spawn(move || {
                    std::thread::sleep(REVEAL_AFTER);
                    if let Some(bar) = weak.upgrade() {
                        if !bar.is_finished() {
                            bar.set_draw_target(ProgressDrawTarget::stderr());
                            bar.enable_steady_tick(Duration::from_millis(200));
                        }
                    }
                });
        }
        Progress { bar }
    }

    /// Says what is running now.
    pub fn set_message(&self, msg: impl Into<String>) {
        self.bar.set_message(msg.into());
    }

    /// One step done.
    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// Prints a line above the bar (or plainly when it is hidden).
    pub fn println(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// True while the bar is not drawn.
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
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
    fn hidden_at_first() {
        // Hidden for REVEAL_AFTER even on a terminal; counting still works.
        let p = Progress::new(3, "runs");
        p.inc();
        p.set_message("x");
        assert!(p.is_hidden());
        assert_eq!(p.bar.position(), 1);
        p.finish();
        assert!(p.bar.is_finished());
    }
}
