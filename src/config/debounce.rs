//! Debouncing file events: editors write a file in several steps (truncate, write,
//! rename a temp file over it), so a reload waits until the files have been quiet
//! for a moment. Pure: the caller supplies the clock.

use std::time::{Duration, Instant};

/// Collects events and says when the burst is over, or has gone on long enough:
/// a file rewritten more often than `quiet` would otherwise never be loaded.
#[derive(Debug, Clone)]
pub struct Debouncer {
    quiet: Duration,
    max_wait: Duration,
    /// The first event of the pending burst, which the maximum wait counts from.
    first: Option<Instant>,
    /// The latest event of the pending burst, which the quiet time counts from.
    last: Option<Instant>,
}

impl Debouncer {
    /// A debouncer that waits for `quiet` without events, but never longer than
    /// `max_wait` after the first event of a burst.
    pub fn new(quiet: Duration, max_wait: Duration) -> Debouncer {
        Debouncer {
            quiet,
            max_wait,
            first: None,
            last: None,
        }
    }

    /// Records an event at `now`.
    pub fn event(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// When to look again: `None` if nothing is pending.
    pub fn deadline(&self) -> Option<Instant> {
        let quiet = self.last? + self.quiet;
        let cap = self.first.map_or(quiet, |f| f + self.max_wait);
        Some(quiet.min(cap))
    }

    /// Whether a burst is over (or has waited its maximum) at `now`; if so, it is
    /// consumed and the next event starts a new burst.
    pub fn take_due(&mut self, now: Instant) -> bool {
        match self.deadline() {
            Some(d) if now >= d => {
                self.first = None;
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
        let mut d = Debouncer::new(ms(50), ms(500));
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

    #[test]
    fn events_every_20_ms_forever_still_fire_by_the_max_wait() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debouncer::new(ms(50), ms(500));
        let mut fired = Vec::new();
        // 3 s of events every 20 ms, looking every 5 ms as the event loop would.
        for step in 0..=600u64 {
            let now = t0 + ms(step * 5);
            if step % 4 == 0 {
                d.event(now);
            }
            if d.take_due(now) {
                fired.push(step * 5);
            }
        }
        assert!(
            fired.first().is_some_and(|&t| t <= 500),
            "first fire by the max wait: {fired:?}"
        );
        assert!(fired.len() >= 5, "keeps firing: {fired:?}");
        for pair in fired.windows(2) {
            assert!(pair[1] - pair[0] <= 520, "gap too long: {fired:?}");
            assert!(pair[1] - pair[0] >= 50, "fires too often: {fired:?}");
        }
    }

    #[test]
    fn deadline_is_the_earlier_of_quiet_and_max_wait() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Debouncer::new(ms(50), ms(100));
        d.event(t0);
        d.event(t0 + ms(40));
        assert_eq!(d.deadline(), Some(t0 + ms(90)));
        d.event(t0 + ms(80));
        assert_eq!(
            d.deadline(),
            Some(t0 + ms(100)),
            "capped by the first event"
        );
        assert!(d.take_due(t0 + ms(100)));
        d.event(t0 + ms(110));
        assert_eq!(
            d.deadline(),
            Some(t0 + ms(160)),
            "a new burst starts its own max wait"
        );
    }
}
