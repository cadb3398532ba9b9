//! How much tool output a task may keep on disk: the per-task spool budget
//! (`output.max_spool_mb`, docs/events.md) and the floor of free space kept for the audit
//! log (`audit.reserve_mb`, docs/events.md, docs/sandbox.md). Bytes past either are counted, not kept;
//! the process is never killed for them (only the flood cap kills).
//!
//! It owns no file: the spool writers ask it before each write, and it answers how
//! many of the bytes they hold may go to disk.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why output was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutReason {
    /// The task's `output.max_spool_mb` was used up.
    Budget,
    /// Free space on the transcripts filesystem was under `audit.reserve_mb`.
    Reserve,
}

/// A task's spool budget with the disk floor. Cheap to clone: clones share the
/// count, so concurrent calls of one task draw from one budget.
#[derive(Debug, Clone)]
pub struct SpoolBudget {
    /// Bytes the task may keep in all.
    limit: u64,
    /// Bytes kept so far by every call of the task (shared with the task's env,
    /// so the count spans turns).
    used: Arc<AtomicU64>,
    /// A directory on the transcripts filesystem and the bytes that must stay free
    /// there; `None`: no floor.
    floor: Option<(PathBuf, u64)>,
}

impl SpoolBudget {
    /// A budget of `limit_mb` MiB counted in `used`, keeping `reserve_mb` MiB free
    /// on the filesystem of `dir` (0: no floor).
    pub fn new(limit_mb: u64, used: Arc<AtomicU64>, dir: PathBuf, reserve_mb: u64) -> Self {
        SpoolBudget {
            limit: limit_mb.saturating_mul(1024 * 1024),
            used,
            floor: (reserve_mb > 0).then(|| (dir, reserve_mb.saturating_mul(1024 * 1024))),
        }
    }

    /// No limit and no floor (tests, `harnessd sandbox`).
    pub fn unlimited() -> Self {
        SpoolBudget {
            limit: u64::MAX,
            used: Arc::new(AtomicU64::new(0)),
            floor: None,
        }
    }

    /// How many of `want` bytes may be written now; they are counted as kept. Less
    /// than `want` comes with the reason.
    pub fn grant(&self, want: u64) -> (u64, Option<CutReason>) {
        if let Some((dir, reserve)) = &self.floor
            && crate::disk::free_bytes(dir).is_some_and(|free| free < reserve.saturating_add(want))
        {
            // A write that would take free space under the floor is not made at
            // all: the floor belongs to the audit log.
            return (0, Some(CutReason::Reserve));
        }
        let mut granted = 0;
        let _ = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                granted = want.min(self.limit.saturating_sub(used));
                Some(used + granted)
            });
        (granted, (granted < want).then_some(CutReason::Budget))
    }

    /// Returns `n` granted bytes that are no longer on disk (a spool removed after
    /// a failed write).
    pub fn give_back(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(n))
            });
    }

    /// Whether free space is above the floor with `more` bytes on top (the copy
    /// into the `.out` file, whose bytes the budget already counted).
    pub fn room_for(&self, more: u64) -> bool {
        match &self.floor {
            Some((dir, reserve)) => {
                crate::disk::free_bytes(dir).is_none_or(|free| free >= reserve.saturating_add(more))
            }
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spool_budget_is_shared_by_clones_and_cut_at_its_limit() {
        let used = Arc::new(AtomicU64::new(0));
        let a = SpoolBudget::new(1, used.clone(), PathBuf::from("/"), 0);
        let b = a.clone();
        assert_eq!(a.grant(600 * 1024), (600 * 1024, None));
        assert_eq!(b.grant(600 * 1024), (424 * 1024, Some(CutReason::Budget)));
        assert_eq!(a.grant(1), (0, Some(CutReason::Budget)));
        assert_eq!(used.load(Ordering::SeqCst), 1024 * 1024);
    }

    #[test]
    fn spool_budget_grants_nothing_under_the_reserve() {
        let dir = std::env::temp_dir();
        let free = crate::disk::free_bytes(&dir).unwrap();
        // A floor above what is free: nothing may be written.
        let reserve_mb = free / (1024 * 1024) + 1;
        let b = SpoolBudget::new(u64::MAX, Arc::default(), dir, reserve_mb);
        assert_eq!(b.grant(1), (0, Some(CutReason::Reserve)));
        assert!(!b.room_for(0));
    }
}
