//! The compact form in which the registry keeps an ended task.
//!
//! A daemon that has run 20 000 tasks keeps one of these per task for its whole
//! life, so its size is the daemon's idle memory (the target: ≤ 20 MB with
//! 20 000 tasks): times are kept as milliseconds, not strings, the id only as the map's
//! key, and no answer (it is read from the transcript when asked for).

use std::cmp::Ordering;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::llm::Usage;
use crate::protocol::Task;
use crate::protocol::{StopReason, TaskStatus};

/// Longest error kept in the index of ended tasks; the whole one is in the
/// transcript.
pub const INDEX_ERROR_CHARS: usize = 300;

/// A task's creation or update time: milliseconds since the epoch, or, for a
/// transcript whose time does not parse as RFC 3339, the text as written (kept
/// rather than lost; it sorts after every parsed time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    /// A parsed time, in milliseconds since the epoch (UTC).
    At(i64),
    /// A time that did not parse, as written.
    Raw(Box<str>),
}

impl Stamp {
    /// Reads an RFC 3339 time; anything else is kept as written.
    pub fn parse(text: &str) -> Stamp {
        match DateTime::parse_from_rfc3339(text) {
            Ok(t) => Stamp::At(t.timestamp_millis()),
            Err(_) => Stamp::Raw(text.into()),
        }
    }

    /// The time in the registry's form (RFC 3339, UTC, milliseconds).
    pub fn render(&self) -> String {
        match self {
            Stamp::At(ms) => DateTime::<Utc>::from_timestamp_millis(*ms)
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
                .unwrap_or_else(|| ms.to_string()),
            Stamp::Raw(s) => s.to_string(),
        }
    }
}

impl Ord for Stamp {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Stamp::At(a), Stamp::At(b)) => a.cmp(b),
            (Stamp::Raw(a), Stamp::Raw(b)) => a.cmp(b),
            (Stamp::At(_), Stamp::Raw(_)) => Ordering::Less,
            (Stamp::Raw(_), Stamp::At(_)) => Ordering::Greater,
        }
    }
}

impl PartialOrd for Stamp {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What the registry keeps of an ended task (its id is the map's key).
#[derive(Debug, Clone)]
pub struct EndedTask {
    /// Finished or interrupted.
    pub status: TaskStatus,
    /// Why it stopped.
    pub stop_reason: Option<StopReason>,
    /// Tokens it used.
    pub usage: Usage,
    /// US dollars it cost, when its model has a price.
    pub usd: Option<f64>,
    /// The start of its error, if it stopped with one.
    pub error: Option<Box<str>>,
    /// The start of its prompt, for listings (for a task found on disk at start,
    /// from its transcript's head: the first message's start only).
    pub prompt: Option<Box<str>>,
    /// When it was created.
    pub created: Stamp,
    /// When it last changed.
    pub updated: Stamp,
}

impl EndedTask {
    /// The summary of `info`: no answer, the error's start.
    pub fn of(info: &Task) -> EndedTask {
        EndedTask {
            status: info.status,
            stop_reason: info.stop_reason,
            usage: info.usage,
            usd: info.usd,
            error: info.error.as_deref().map(short_error),
            prompt: info.prompt.as_deref().map(Box::from),
            created: Stamp::parse(&info.created),
            updated: Stamp::parse(&info.updated),
        }
    }

    /// The task as the API shows it, without its answer.
    pub fn task(&self, id: &str) -> Task {
        Task {
            task_id: id.to_string(),
            status: self.status,
            stop_reason: self.stop_reason,
            usage: self.usage,
            usd: self.usd,
            answer: None,
            error: self.error.as_deref().map(str::to_string),
            prompt: self.prompt.as_deref().map(str::to_string),
            created: self.created.render(),
            updated: self.updated.render(),
            parent_task_id: crate::protocol::tree::parent_task_id(id).map(str::to_string),
        }
    }
}

/// The start of a long error (with the omission marker), or all of a short one.
pub fn short_error(e: &str) -> Box<str> {
    if e.chars().count() > INDEX_ERROR_CHARS {
        crate::text::truncate_middle(e, INDEX_ERROR_CHARS, 0)
            .0
            .into_boxed_str()
    } else {
        e.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_in_the_registry_form_and_sort_by_time() {
        let a = Stamp::parse("2026-10-01T00:00:00Z");
        let b = Stamp::parse("2026-10-01T02:00:00.500+02:00");
        assert_eq!(a.render(), "2026-10-01T00:00:00.000Z");
        assert_eq!(b.render(), "2026-10-01T00:00:00.500Z");
        assert!(a < b);
        let raw = Stamp::parse("yesterday");
        assert_eq!(raw.render(), "yesterday");
        assert!(b < raw);
    }

    #[test]
    fn the_kept_summary_is_small() {
        // The index's whole point: one entry (key aside) stays well under the
        // ~450 bytes an ended `Task` took.
        assert!(
            std::mem::size_of::<EndedTask>() <= 128,
            "{}",
            std::mem::size_of::<EndedTask>()
        );
    }
}
