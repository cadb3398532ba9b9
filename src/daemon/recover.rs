//! What a crashed or stopped daemon left in `transcripts/`, taken up at start:
//! every transcript is read; those still `running` belong to a daemon that died and
//! are marked interrupted, those still `queued` are handed back to the scheduler,
//! misnamed ones are moved aside.

use std::path::{Path, PathBuf};

use super::serve::ServeError;
use super::tasks::{Registry, TaskStatus};
use crate::agent::{LockError, RunLock, Transcript, TranscriptHead};
use crate::config::Loaded;
use crate::control::Task;
use crate::events::{Event, EventLog};

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
) -> Result<Vec<Transcript>, ServeError> {
    let dir = loaded.paths.transcripts.clone();
    let Scan {
        found,
        refused,
        failed,
    } = tokio::task::spawn_blocking(move || scan_transcripts(&dir))
        .await
        .map_err(ServeError::Scan)?;
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
                        was: "running".into(),
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
            task_id: t.task_id,
            status,
            stop_reason: t.stop_reason,
            usage: t.usage,
            prompt: None,
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
    refused: Vec<Refused>,
    failed: Option<ServeError>,
}

/// A transcript moved aside at start instead of being acted on.
struct Refused {
    file: PathBuf,
    moved_to: PathBuf,
    error: String,
}

/// Reads every transcript in `dir` (unreadable ones are skipped, misnamed ones
/// refused) and saves those still `running` as `interrupted`. Stops at the first
/// save that fails: what was found before it is returned with the error, so it is
/// still recorded.
fn scan_transcripts(dir: &Path) -> Scan {
    let mut scan = Scan::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return scan;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Some(found_here) = read_found(dir, &path, &mut scan.refused) else {
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
fn misnamed(path: &Path, task_id: &str) -> Option<Refused> {
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
    Some(Refused {
        file: path.to_path_buf(),
        moved_to,
        error,
    })
}

/// One transcript at start: its head, and for a task still `queued` or `running`
/// the whole transcript (a running one is saved as `interrupted` here). `None` for
/// a file that cannot be read or parsed (skipped).
fn read_found(
    dir: &Path,
    path: &Path,
    refused: &mut Vec<Refused>,
) -> Option<Result<Found, ServeError>> {
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
    if !matches!(head.status, TaskStatus::Running | TaskStatus::Queued) {
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
    let mut transcript: Transcript = serde_json::from_str(&text)
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
    let was_running = head.status == TaskStatus::Running && !live;
    let mut head = head;
    if was_running {
        transcript.status = TaskStatus::Interrupted;
        head.status = TaskStatus::Interrupted;
        if let Err(error) = transcript.save(dir) {
            let task_id = transcript.task_id;
            return Some(Err(ServeError::Transcript { task_id, error }));
        }
    }
    let queued = (head.status == TaskStatus::Queued).then_some(transcript);
    Some(Ok(Found {
        head,
        queued,
        was_running,
    }))
}
