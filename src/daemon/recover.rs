//! What a crashed or stopped daemon left, taken up at start: every transcript is
//! read; those still `running` belong to a daemon that died and are marked
//! interrupted, those still `queued` are handed back to the scheduler, misnamed
//! ones are moved aside; then the tasks the log left open are closed
//! ([`super::loose_ends`]) and the queued ones queued again, oldest first.

use std::path::{Path, PathBuf};

use super::loose_ends::{LooseEndsError, close_at_start};
use super::registry::Registry;
use super::tasks::Scheduler;
use crate::agent::{LockError, RunLock, Transcript, TranscriptHead};
use crate::config::Loaded;
use crate::events::since::{Since, since_checkpoint};
use crate::events::{Event, EventError, EventLog};
use crate::protocol::{Task, TaskStatus};

/// Why what the last daemon left could not be taken up.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The audit log could not be written.
    #[error(transparent)]
    Events(#[from] EventError),
    /// A crashed daemon's task could not be marked interrupted on disk.
    #[error("cannot save the transcript of {task_id} as interrupted: {error}")]
    Transcript {
        /// The task whose transcript it is.
        task_id: String,
        /// The write's error.
        error: std::io::Error,
    },
    /// Tasks left open on the record could not be closed.
    #[error(transparent)]
    LooseEnds(#[from] LooseEndsError),
    /// The start-up scan of the transcripts ended abnormally (it panicked).
    #[error("the scan of the transcripts at start-up failed: {0}")]
    Scan(tokio::task::JoinError),
}

/// Closes the tasks the log left open, then queues again the tasks accepted
/// before the last stop and never started (`queued`, from [`recover_tasks`]),
/// saying on stderr how many of each.
pub(super) async fn take_up(
    loaded: &Loaded,
    events: &EventLog,
    scheduler: &Scheduler,
    queued: Vec<Transcript>,
) -> Result<(), RecoverError> {
    let paths = &loaded.paths;
    let closed = close_at_start(paths.transcripts.clone(), paths.events.clone(), events).await?;
    if closed > 0 {
        tracing::info!(
            target: crate::text::NOTICE,
            "harnessd: recorded task_finished for {closed} task(s) the log left open \
             (see their events)"
        );
    }
    let requeued = scheduler.requeue(queued).await?;
    if requeued > 0 {
        tracing::info!(
            target: crate::text::NOTICE,
            "harnessd: requeued {requeued} queued task(s) accepted before the last stop, \
             oldest first"
        );
    }
    Ok(())
}

/// A transcript found at start: its head (all the task index keeps), the whole
/// transcript only when the task must be queued again, and whether a crashed
/// daemon left it `running` (it is now saved as `interrupted`).
struct Found {
    head: TranscriptHead,
    queued: Option<Transcript>,
    was_running: bool,
}

/// Loads every transcript; those still `running` belong to a daemon that died:
/// they are marked interrupted, on disk and in the record. Those still `queued`
/// were accepted and never started: they are returned, for the scheduler to queue
/// again, and not put in the registry here. The reads and saves run in one
/// blocking call, off the runtime's workers.
pub(super) async fn recover_tasks(
    loaded: &Loaded,
    registry: &Registry,
    events: &EventLog,
) -> Result<Vec<Transcript>, RecoverError> {
    let dir = loaded.paths.transcripts.clone();
    let log = loaded.paths.events.clone();
    let max_chars = loaded.policy.settings.output.max_chars;
    let Scan {
        found,
        refused,
        failed,
    } = tokio::task::spawn_blocking(move || {
        let since = since_checkpoint(&log).unwrap_or_else(|e| {
            tracing::warn!("{e}: transcripts are not checked against the log at this start");
            Since::default()
        });
        let check = Check {
            dir: &dir,
            since: &since,
            max_chars,
        };
        scan_transcripts(&check)
    })
    .await
    .map_err(RecoverError::Scan)?;
    for r in refused {
        let event = Event::TranscriptRefused {
            file: r.file.display().to_string(),
            moved_to: r.moved_to.display().to_string(),
            error: r.error,
        };
        events.record(None, event).await?;
    }
    let mut queued = Vec::new();
    for Found {
        head: t,
        queued: whole,
        was_running,
    } in found
    {
        if let Some(whole) = whole {
            queued.push(whole);
            continue;
        }
        if was_running {
            events
                .record(
                    Some(&t.task_id),
                    Event::TaskInterrupted {
                        was: TaskStatus::Running,
                    },
                )
                .await?;
        }
        let status = match t.status {
            TaskStatus::Interrupted => TaskStatus::Interrupted,
            // Still running in another process that holds its lock: shown as running,
            // so a resume here is refused (409).
            TaskStatus::Running => TaskStatus::Running,
            _ => TaskStatus::Finished,
        };
        registry.insert_recorded(Task {
            parent_task_id: crate::protocol::tree::parent_task_id(&t.task_id).map(str::to_string),
            task_id: t.task_id,
            status,
            stop_reason: t.stop_reason,
            usage: t.usage,
            prompt: t.prompt.as_deref().and_then(Task::prompt_start),
            usd: t.usd,
            answer: None,
            error: t.error,
            updated: t.created.clone(),
            created: t.created,
        });
    }
    failed.map_or(Ok(queued), Err)
}

/// What the start-up scan of the transcripts found.
#[derive(Default)]
struct Scan {
    found: Vec<Found>,
    refused: Vec<RefusedTranscript>,
    failed: Option<RecoverError>,
}

/// A transcript moved aside at start instead of being acted on.
struct RefusedTranscript {
    file: PathBuf,
    moved_to: PathBuf,
    error: String,
}

/// Reads every transcript in `dir` (unreadable ones are skipped, misnamed ones
/// refused) and saves those still `running` as `interrupted`. Stops at the first
/// save that fails: what was found before it is returned with the error, so it is
/// still recorded.
fn scan_transcripts(check: &Check) -> Scan {
    let dir = check.dir;
    let mut scan = Scan::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return scan;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Some(found_here) = read_found(check, &path, &mut scan.refused) else {
            continue;
        };
        match found_here {
            Ok(f) => scan.found.push(f),
            Err(e) => {
                scan.failed = Some(e);
                return scan;
            }
        }
    }
    scan
}

/// For a transcript the start would act on (queued or running): refuses it when
/// its file is not named after its `task_id` (the run would save under the id's
/// name and leave this file as it is, to be acted on again at every start). It is
/// moved aside to `<file>.refused-<ts>`, out of the next scans. `None`: it is
/// fine.
fn misnamed(path: &Path, task_id: &str) -> Option<RefusedTranscript> {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    if stem.as_deref() == Some(task_id) {
        return None;
    }
    let ts = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let moved_to = PathBuf::from(format!("{}.refused-{ts}", path.display()));
    let why = format!(
        "{}: its task_id is {task_id:?}, so it must be named {task_id}.json; not acted on",
        path.display()
    );
    let error = match std::fs::rename(path, &moved_to) {
        Ok(()) => format!("{why}, moved to {}", moved_to.display()),
        Err(e) => format!("{why}, and it cannot be moved aside: {e}"),
    };
    tracing::error!("{error}");
    Some(RefusedTranscript {
        file: path.to_path_buf(),
        moved_to,
        error,
    })
}

/// What the start checks transcripts against: the log since its last checkpoint.
struct Check<'a> {
    /// `transcripts/`.
    dir: &'a Path,
    /// What the log says of each task since its last checkpoint.
    since: &'a Since,
    /// `output.max_chars`, for a result filled from a kept `.out` file.
    max_chars: usize,
}

/// One transcript at start: its head, and for a task still `queued` or `running`
/// the whole transcript (a running one is saved as `interrupted` here). A
/// transcript whose status is not final is first brought in line with the log
/// ([`crate::agent::reconcile`]): one the log shows finished is saved `finished`.
/// `None` for a file that cannot be read or parsed (skipped).
fn read_found(
    check: &Check,
    path: &Path,
    refused: &mut Vec<RefusedTranscript>,
) -> Option<Result<Found, RecoverError>> {
    let dir = check.dir;
    // An unreadable transcript is skipped, but never silently: its task would vanish
    // from the API, so the operator is told which file and why.
    let skipped = |why: String| {
        tracing::warn!("skipping transcript {}: {why}", path.display());
    };
    let text = Transcript::read_text(path)
        .map_err(|e| skipped(e.to_string()))
        .ok()?;
    let head: TranscriptHead = serde_json::from_str(&text)
        .map_err(|e| skipped(e.to_string()))
        .ok()?;
    let acted_on = matches!(head.status, TaskStatus::Running | TaskStatus::Queued);
    let in_log = !acted_on
        && head.status != TaskStatus::Finished
        && check.since.tasks.contains_key(&head.task_id);
    if !acted_on && !in_log {
        return Some(Ok(Found {
            head,
            queued: None,
            was_running: false,
        }));
    }
    if let Some(r) = misnamed(path, &head.task_id) {
        refused.push(r);
        return None;
    }
    let transcript: Transcript = serde_json::from_str(&text)
        .map_err(|e| skipped(e.to_string()))
        .ok()?;
    // A transcript whose run lock is held belongs to a live process (a `harnessd
    // run`, another daemon on the same transcripts): it is running, not
    // interrupted, and is left as it is.
    let live = head.status == TaskStatus::Running
        && matches!(
            RunLock::acquire(dir, &head.task_id),
            Err(LockError::Held { .. })
        );
    if live {
        return Some(Ok(Found {
            head,
            queued: None,
            was_running: false,
        }));
    }
    let was = head.status;
    let transcript = match settle(check, path, was, transcript) {
        Ok(t) => t,
        Err(e) => return Some(Err(e)),
    };
    // A `queued` one the log shows started was running too (see `in_line`).
    let was_running = matches!(was, TaskStatus::Running | TaskStatus::Queued)
        && transcript.status == TaskStatus::Interrupted;
    let head = TranscriptHead {
        task_id: transcript.task_id.clone(),
        created: transcript.created.clone(),
        status: transcript.status,
        stop_reason: transcript.stop_reason,
        error: transcript.error.clone(),
        usage: transcript.usage,
        usd: transcript.usd,
        prompt: transcript
            .messages
            .first()
            .and_then(|m| crate::agent::prompt_head_of(&m.text())),
    };
    let queued = (head.status == TaskStatus::Queued).then_some(transcript);
    Some(Ok(Found {
        head,
        queued,
        was_running,
    }))
}

/// Brings a transcript found `was` (not final, not live) in line with the log, then
/// marks it `interrupted` if it is still `running` (its daemon died); saves it
/// when either changed it.
fn settle(
    check: &Check,
    path: &Path,
    was: TaskStatus,
    mut transcript: Transcript,
) -> Result<Transcript, RecoverError> {
    let dir = check.dir;
    let mut changed =
        crate::agent::reconcile::in_line(&mut transcript, check.since, dir, check.max_chars);
    if changed && transcript.status == TaskStatus::Finished {
        tracing::warn!(
            "transcript {} said {} but the audit log shows the task finished ({}); \
             saved as finished from the log",
            path.display(),
            was.as_str(),
            transcript.stop_reason.map_or("?", |r| r.as_str())
        );
    }
    if transcript.status == TaskStatus::Running {
        transcript.status = TaskStatus::Interrupted;
        changed = true;
    }
    if changed && let Err(error) = transcript.save(dir) {
        let task_id = transcript.task_id;
        return Err(RecoverError::Transcript { task_id, error });
    }
    Ok(transcript)
}
