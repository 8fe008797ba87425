//! Waiting without a futex: the naps and the backoff of a grace period's
//! wait for its readers (`grace`).
use std::time::Duration;

use crate::sync;

/// Sleeps `d` without a futex (nanosleep; loom: a yield).
pub(crate) fn nap(d: Duration) {
    #[cfg(exitq_loom)]
    {
        let _ = d;
        sync::yield_now();
    }
    #[cfg(not(exitq_loom))]
    std::thread::sleep(d);
}

/// Waiting for a reader: spin briefly, then sleep with exponential backoff.
pub(crate) struct WaitBackoff {
    spins: u32,
    sleep: Duration,
    max_sleep: Duration,
}

impl WaitBackoff {
    pub(crate) fn new(expedited: bool) -> Self {
        WaitBackoff {
            spins: if expedited { 1000 } else { 8 },
            sleep: Duration::from_micros(10),
            max_sleep: if expedited {
                Duration::from_micros(100)
            } else {
                Duration::from_millis(1)
            },
        }
    }

    pub(crate) fn wait(&mut self) {
        if self.spins > 0 {
            self.spins -= 1;
            if self.spins % 64 == 0 {
                sync::yield_now();
            } else {
                std::hint::spin_loop();
            }
            return;
        }
        nap(self.sleep);
        self.sleep = (self.sleep * 2).min(self.max_sleep);
    }
}
