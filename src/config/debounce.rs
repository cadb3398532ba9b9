//! Debouncing file events: editors write a file in several steps (truncate, write,
//! rename a temp file over it), so a reload waits until the files have been quiet
//! for a moment. Pure: the caller supplies the clock.

use std::time::{Duration, Instant};

/// Collects events and says when the burst is over.
#[derive(Debug, Clone)]
pub struct Debouncer {
    quiet: Duration,
    last: Option<Instant>,
}

impl Debouncer {
    /// A debouncer that waits for `quiet` without events.
    pub fn new(quiet: Duration) -> Debouncer {
        Debouncer { quiet, last: None }
    }

    /// Records an event at `now`.
    pub fn event(&mut self, now: Instant) {
        self.last = Some(now);
    }

    /// When to look again: `None` if nothing is pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.last.map(|t| t + self.quiet)
    }

    /// Whether a burst is over at `now`; if so, it is consumed.
    pub fn take_due(&mut self, now: Instant) -> bool {
        match self.deadline() {
            Some(d) if now >= d => {
                self.last = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_quiet_after_the_last_event() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debouncer::new(ms(50));
        assert!(!d.take_due(t0));
        assert_eq!(d.deadline(), None);
        d.event(t0);
        d.event(t0 + ms(30));
        assert!(
            !d.take_due(t0 + ms(60)),
            "30 ms after the last event is too early"
        );
        assert_eq!(d.deadline(), Some(t0 + ms(80)));
        assert!(d.take_due(t0 + ms(80)));
        assert!(!d.take_due(t0 + ms(200)), "a burst fires once");
    }
}
