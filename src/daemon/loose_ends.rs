//! Tasks the audit log shows begun and never ended get their `task_finished`
//! (no action without its record: nothing on the record is left open by a crash or a full
//! disk).
//!
//! Two ways a task can lack it, both closed here:
//! - a kill between `task_queued` and the save of the task's `queued` transcript
//!   (the request was never answered 202): there is no transcript, so the task can
//!   never run; the next start records that it was not accepted;
//! - a task whose `task_finished` could not be written (a full disk) after its
//!   transcript said `finished`: recorded from the transcript when space returns
//!   (the next successful `task_queued`, [`Owed`]) or at the next start.
//!
//! The order in `POST /v1/tasks` is record first, transcript second, so the other
//! half-state (a transcript with no `task_queued`) never exists.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::agent::{LockError, RunLock, Transcript, TranscriptHead};
use crate::events::{Event, EventError, EventLog, TrailError, ended_cleanly, open_tasks};
use crate::llm::Usage;
use crate::protocol::{StopReason, TaskStatus};

/// Why the loose ends could not be closed.
#[derive(Debug, thiserror::Error)]
pub enum LooseEndsError {
    /// The log could not be read back.
    #[error(transparent)]
    Read(#[from] TrailError),
    /// A `task_finished` could not be written.
    #[error(transparent)]
    Record(#[from] EventError),
    /// The scan ended abnormally (it panicked).
    #[error("the scan of the audit log for open tasks failed: {0}")]
    Scan(tokio::task::JoinError),
}

/// The `error` of a child task whose `task_started` is on the log but whose
/// transcript was never saved: the daemon died as it started.
pub const CHILD_NEVER_SAVED: &str = "the daemon stopped as this child task started, before \
                                     its transcript was saved, so it never ran; its \
                                     parent's call is answered when the parent is resumed";

/// The `error` of a task that never got past its `task_queued`.
pub const NEVER_SAVED: &str = "not accepted: the daemon stopped after recording the task \
                               and before saving its transcript, so it was never answered \
                               202 and never ran";

/// Closes every open task of the log at `log` whose transcript in `dir` is
/// missing or `finished` (queued, running and interrupted ones are the
/// scheduler's); returns how many got a `task_finished`. The whole log is read
/// only when its last line is not `daemon_stopping`: a clean stop leaves nothing
/// open ([`Owed::settle`] runs before it), so an ordinary start stays fast.
pub async fn close_at_start(
    dir: PathBuf,
    log: PathBuf,
    events: &EventLog,
) -> Result<usize, LooseEndsError> {
    let owed = tokio::task::spawn_blocking(move || -> Result<_, TrailError> {
        if ended_cleanly(&log)? {
            return Ok(Vec::new());
        }
        let open = open_tasks(&log)?;
        Ok(open
            .into_iter()
            .filter_map(|id| owed_event(&dir, &id).map(|ev| (id, ev)))
            .collect::<Vec<_>>())
    })
    .await
    .map_err(LooseEndsError::Scan)??;
    let n = owed.len();
    for (id, event) in owed {
        events.record(Some(&id), event).await?;
    }
    Ok(n)
}

/// The `task_finished` open task `id` is owed, if any: none while another process
/// holds its run lock (a live `harnessd run`), or while its transcript says it is
/// still to run or to be resumed.
fn owed_event(dir: &Path, id: &str) -> Option<Event> {
    if matches!(RunLock::acquire(dir, id), Err(LockError::Held { .. })) {
        return None;
    }
    let path = Transcript::path(dir, id);
    if !path.exists() {
        // A child is started by its parent's run, never accepted by a request.
        let why = match crate::protocol::tree::parent_task_id(id) {
            Some(_) => CHILD_NEVER_SAVED,
            None => NEVER_SAVED,
        };
        return Some(finished(
            StopReason::Error,
            0,
            Usage::default(),
            Some(why.into()),
        ));
    }
    // The head first: most open tasks are interrupted ones, left as they are.
    let text = Transcript::read_text(&path).ok()?;
    let head: TranscriptHead = serde_json::from_str(&text).ok()?;
    if head.status != TaskStatus::Finished {
        return None;
    }
    let t: Transcript = serde_json::from_str(&text).ok()?;
    (t.status == TaskStatus::Finished).then(|| {
        finished(
            t.stop_reason.unwrap_or(StopReason::Error),
            t.turns.len() as u32,
            t.usage,
            t.error,
        )
    })
}

fn finished(stop_reason: StopReason, turns: u32, usage: Usage, error: Option<String>) -> Event {
    Event::TaskFinished {
        stop_reason,
        turns,
        usage,
        duration_ms: 0,
        error,
        // Closed from the record, not a run: its cost is not known here.
        usd: None,
    }
}

/// Tasks of this daemon whose run ended without its `task_finished` on the log
/// (the log failed), with the error that ended them; settled once the log can be
/// written again.
#[derive(Clone, Default)]
pub struct Owed {
    tasks: Arc<Mutex<Vec<(String, String)>>>,
}

impl Owed {
    /// Notes that task `id` ended with `error` and its `task_finished` is missing.
    pub fn push(&self, id: &str, error: String) {
        if let Ok(mut t) = self.tasks.lock() {
            t.push((id.to_string(), error));
        }
    }

    /// Records the missing `task_finished` lines, oldest first; a task whose
    /// transcript could not be saved as `finished` is saved so now. Stops at the
    /// first line that cannot be written and keeps the rest for the next time.
    pub async fn settle(&self, dir: &Path, events: &EventLog) {
        let pending: Vec<(String, String)> = match self.tasks.lock() {
            Ok(mut t) => t.drain(..).collect(),
            Err(_) => return,
        };
        let mut rest = pending.into_iter();
        while let Some((id, error)) = rest.next() {
            let event = settled_event(dir, &id, &error).await;
            if events.record(Some(&id), event).await.is_err() {
                if let Ok(mut t) = self.tasks.lock() {
                    t.push((id, error));
                    t.extend(rest);
                }
                return;
            }
        }
    }
}

/// The `task_finished` of a task this daemon ended with `error`, from its
/// transcript, which is saved as `finished` first if the failure left it otherwise.
async fn settled_event(dir: &Path, id: &str, error: &str) -> Event {
    let path = Transcript::path(dir, id);
    let Ok(mut t) = Transcript::read_async(path).await else {
        return finished(StopReason::Error, 0, Usage::default(), Some(error.into()));
    };
    if t.status != TaskStatus::Finished {
        t.status = TaskStatus::Finished;
        t.stop_reason = Some(StopReason::Error);
        t.error = Some(error.into());
        if let Err(e) = t.save_async(dir.to_path_buf()).await {
            tracing::warn!("task {id}: cannot save its transcript as finished: {e}");
        }
    }
    finished(
        t.stop_reason.unwrap_or(StopReason::Error),
        t.turns.len() as u32,
        t.usage,
        t.error,
    )
}
