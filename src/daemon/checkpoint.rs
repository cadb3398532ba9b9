//! Keeping transcripts in line with the log while the daemon runs (docs/events.md,
//! "The log is the truth"): transcripts whose save failed are saved again once the
//! disk takes them, and a `checkpoint` line is written every
//! [`CHECKPOINT_EVERY`] while the log grows and nothing is owed, so a start checks
//! transcripts against the log from there on, not against the whole log.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::shutdown::Shutdown;
use crate::agent::Unsaved;
use crate::events::{Event, EventLog};
use crate::protocol::CheckpointReason;

/// How often the owed saves are tried again while there are any.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// How often a checkpoint is written while the log grows.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(60);

/// Starts the loop on the daemon's tracker; it ends when `stop` is cancelled,
/// between two rounds, never in the middle of a save or a checkpoint.
pub fn spawn(
    daemon: &Shutdown,
    stop: CancellationToken,
    events: EventLog,
    unsaved: Unsaved,
    dir: PathBuf,
) -> tokio::task::JoinHandle<()> {
    daemon.spawn(async move {
        let mut tick = tokio::time::interval(RETRY_EVERY);
        let mut since_checkpoint = Duration::ZERO;
        let mut checkpointed = events.head().0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => return,
            }
            since_checkpoint += RETRY_EVERY;
            if !unsaved.is_empty() {
                unsaved.retry(&dir).await;
            }
            if since_checkpoint >= CHECKPOINT_EVERY {
                since_checkpoint = Duration::ZERO;
                if let Some(seq) = checkpoint(
                    &events,
                    &unsaved,
                    &mut checkpointed,
                    CheckpointReason::Periodic,
                )
                .await
                {
                    checkpointed = seq;
                }
            }
        }
    })
}

/// Writes a `checkpoint` when nothing is owed and the log grew since the last one
/// (`checkpointed`, the head then); returns its seq.
pub async fn checkpoint(
    events: &EventLog,
    unsaved: &Unsaved,
    checkpointed: &mut u64,
    reason: CheckpointReason,
) -> Option<u64> {
    if !unsaved.is_empty() || events.head().0 == *checkpointed {
        return None;
    }
    let event = Event::Checkpoint { reason };
    let seq = events.record(None, event).await.ok()?;
    *checkpointed = seq;
    Some(seq)
}

/// At a clean stop, after the last task ended: the owed saves are tried once more,
/// then a checkpoint is written before `daemon_stopping` if nothing is left owed.
pub async fn at_stop(events: &EventLog, unsaved: &Unsaved, dir: &std::path::Path) {
    if !unsaved.is_empty() {
        unsaved.retry(dir).await;
    }
    let mut none = 0;
    let _ = checkpoint(events, unsaved, &mut none, CheckpointReason::Stop).await;
}
