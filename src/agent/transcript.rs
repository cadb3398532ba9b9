//! `transcripts/<task_id>.json`: the task's exact API messages and per-turn record,
//! rewritten atomically (temp file + rename) after every turn so a crash leaves the
//! last complete turn. Each writer uses a temp file of its own, and a run holds the
//! task's [`RunLock`] so that no two processes drive one transcript.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::llm::{Message, Usage};
use crate::protocol::{Source, StopReason, TaskStatus};

/// The largest transcript file read back (a refused one is named, never read).
pub const MAX_TRANSCRIPT_BYTES: u64 = 512 * 1024 * 1024;

/// One model request's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// Request number, from 1.
    pub turn: u32,
    /// The model's stop reason.
    pub stop_reason: String,
    /// Tokens of this request.
    pub usage: Usage,
    /// Its cost in US dollars; `None` when the model has no price (and in
    /// transcripts older than cost accounting).
    #[serde(default)]
    pub usd: Option<f64>,
    /// Time to the full response.
    pub latency_ms: u64,
}

/// The fields of a transcript file the daemon's task index needs, read without
/// building its messages: at start the daemon reads every transcript ever written,
/// and holding them whole (even briefly) left the daemon at 160 MiB for 20 000 tasks.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TranscriptHead {
    /// Task id.
    pub task_id: String,
    /// When the task was created (RFC 3339).
    pub created: String,
    /// Where the task stands.
    pub status: TaskStatus,
    /// The task's stop reason, once finished.
    pub stop_reason: Option<StopReason>,
    /// The error, when stop_reason is `error`.
    #[serde(default)]
    pub error: Option<String>,
    /// Tokens summed over the task.
    pub usage: Usage,
    /// The task's cost in US dollars; `None` when unknown.
    #[serde(default)]
    pub usd: Option<f64>,
    /// The start of the prompt (the first message's text), at most
    /// [`PROMPT_HEAD_CHARS`] characters: listings show it after a restart. The
    /// other messages are skipped unread.
    #[serde(default, rename = "messages", deserialize_with = "prompt_head")]
    pub prompt: Option<String>,
}

/// How much of the prompt a [`TranscriptHead`] keeps: one more character than a
/// listing shows, so the listing still knows the prompt went on.
pub const PROMPT_HEAD_CHARS: usize = 101;

/// The start of `text`, at most [`PROMPT_HEAD_CHARS`] characters; `None` if empty.
pub fn prompt_head_of(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.chars().take(PROMPT_HEAD_CHARS).collect())
}

/// Reads the `messages` array for [`TranscriptHead::prompt`]: the first message's
/// text blocks, cut, and every later message skipped without being built.
fn prompt_head<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    /// A content block, as far as the prompt needs it.
    #[derive(Deserialize)]
    struct Piece {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        text: Option<String>,
    }
    /// The first message, as far as the prompt needs it.
    #[derive(Deserialize)]
    struct First {
        content: Vec<Piece>,
    }
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of messages")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let first = seq.next_element::<First>()?;
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            let texts: Vec<String> = first
                .into_iter()
                .flat_map(|m| m.content)
                .filter(|p| p.kind == "text")
                .filter_map(|p| p.text)
                .collect();
            Ok(prompt_head_of(&texts.join("\n")))
        }
    }
    de.deserialize_seq(Visit)
}

/// The whole transcript file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    /// The task's id; the file is named after it.
    pub task_id: String,
    /// The model the task started with (`api.model`).
    pub model: String,
    /// When the task was created (RFC 3339).
    pub created: String,
    /// `queued` (accepted, not started), `running`, `finished`, or `interrupted`
    /// after a crash.
    pub status: TaskStatus,
    /// The task's stop reason, once finished.
    pub stop_reason: Option<StopReason>,
    /// The answer, once finished.
    pub answer: Option<String>,
    /// The error, when stop_reason is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Tokens summed over the task.
    pub usage: Usage,
    /// The task's cost in US dollars, summed over its requests; `None` (absent)
    /// when a request went to a model without a price (cost unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// The API messages exactly as sent and received.
    pub messages: Vec<Message>,
    /// One record per model request.
    pub turns: Vec<TurnRecord>,
    /// The `max_turns` the task was submitted with, if any: a task queued again
    /// after a crash, or resumed, runs with the limit it was accepted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Where the task came from (`cli` or `api`); absent in older transcripts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Who submitted it through the API (`uid:N`); absent for `run` and in older
    /// transcripts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A `queued` transcript waiting to be resumed: its `task_resumed` is on the
    /// record, and the run it waits for (after a restart too) continues it. A
    /// `queued` transcript without it was never started and starts as a new task.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resume_queued: bool,
    /// The W3C `traceparent` the task was submitted with: every run of it is traced
    /// within the caller's trace, after a restart too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// For a child task: the parent's `delegate` call that started it (the parent
    /// is named by the task's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_use_id: Option<String>,
    /// For a child task narrowed by its `delegate` call: the only tools it may use,
    /// kept so a resumed child stays narrowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// What the task's children spent, already part of `usage` and `usd`: the
    /// task's own spending is the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated: Option<Spent>,
}

/// Tokens and dollars spent; `usd` is `None` once any request had no price.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    /// Tokens.
    pub usage: Usage,
    /// US dollars; `None` when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
}

impl Spent {
    /// Nothing spent yet: zero tokens, zero dollars.
    pub fn zero() -> Spent {
        Spent {
            usage: Usage::default(),
            usd: Some(0.0),
        }
    }

    /// Adds `usage` and its cost (`None`: unknown, and the sum with it).
    pub fn add(&mut self, usage: &Usage, usd: Option<f64>) {
        self.usage.add(usage);
        self.usd = self.usd.zip(usd).map(|(a, b)| a + b);
    }
}

impl Transcript {
    /// Path of a task's transcript in `dir`.
    pub fn path(dir: &Path, task_id: &str) -> PathBuf {
        dir.join(format!("{task_id}.json"))
    }

    /// Reads and parses the transcript at `path`; a file that does not parse is an
    /// `InvalidData` error.
    pub fn read(path: &Path) -> std::io::Result<Transcript> {
        let text = Transcript::read_text(path)?;
        Ok(serde_json::from_str(&text)?)
    }

    /// The text of the transcript file at `path`, read only from a regular file:
    /// transcripts/ also holds the audit log, and a FIFO or link dropped there as
    /// `*.json` would block its reader in open or feed it without end
    /// (`/dev/zero`), as the log's readers refuse for a rotated name.
    pub fn read_text(path: &Path) -> std::io::Result<String> {
        use std::io::Read as _;
        let file = crate::events::segments::open_regular(path)?;
        let meta = file.metadata()?;
        // A file dropped there can be sparse and gigabytes long; compaction keeps
        // real transcripts far below this, so a larger one is refused, not read.
        if meta.len() > MAX_TRANSCRIPT_BYTES {
            return Err(std::io::Error::other(format!(
                "{} bytes: larger than any transcript harnessd writes ({} MiB at most)",
                meta.len(),
                MAX_TRANSCRIPT_BYTES >> 20
            )));
        }
        // Sized from the metadata: one read for the file and one to see its end,
        // instead of a doubling buffer's nine (start reads every transcript).
        let mut text = String::with_capacity(usize::try_from(meta.len()).unwrap_or(0) + 1);
        file.take(MAX_TRANSCRIPT_BYTES).read_to_string(&mut text)?;
        Ok(text)
    }

    /// [`Transcript::read`] from async code, on a blocking thread.
    pub async fn read_async(path: PathBuf) -> std::io::Result<Transcript> {
        tokio::task::spawn_blocking(move || Transcript::read(&path))
            .await
            .map_err(std::io::Error::other)?
    }

    /// Writes the transcript atomically into `dir`.
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        Transcript::write(dir, &self.task_id, &bytes)
    }

    /// [`Transcript::save`] from async code: serialised here, written on a blocking
    /// thread so a slow disk never stalls the runtime's workers.
    pub async fn save_async(&self, dir: PathBuf) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        let task_id = self.task_id.clone();
        tokio::task::spawn_blocking(move || Transcript::write(&dir, &task_id, &bytes))
            .await
            .map_err(std::io::Error::other)?
    }

    /// Writes `bytes` (a serialised transcript) as `task_id`'s transcript in `dir`,
    /// through a temporary file and a rename.
    fn write(dir: &Path, task_id: &str, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let path = Transcript::path(dir, task_id);
        // Unique per writer (process and call): two writers sharing one temp name
        // would rename each other's half-written bytes into place.
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{task_id}.{}.{n}.tmp", std::process::id()));
        // 0600, like the log: a transcript is shown through the API only to the
        // daemon's user, root and operators.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        // No fsync: the guarantee is against a crash of harnessd, which the page
        // cache survives; rename-over on ext4/xfs orders data before the rename.
        drop(f);
        std::fs::rename(&tmp, &path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

/// A task's transcript save whose write (temp file, rename) is under way on a
/// blocking thread. On ext4 the rename over the last save starts the new file's
/// writeback (`auto_da_alloc`), most of a millisecond that a task need not wait
/// for before its next request. The save counts as owed ([`Unsaved::is_empty`]
/// is false) until it has landed, and a failed one until its task has kept the
/// transcript ([`SaveInFlight::finished`]), so no `checkpoint` can claim the
/// transcripts are in line with the log while one may not be.
#[must_use = "a save in flight is settled, so that saves land in order and a failure is kept"]
pub struct SaveInFlight {
    write: tokio::task::JoinHandle<(std::io::Result<()>, Option<Owed>)>,
    unsaved: Unsaved,
}

impl SaveInFlight {
    /// Waits for the write. A failure keeps `latest` (the transcript as it is
    /// now, which holds all the failed save did) to be saved again, before the
    /// save stops counting as owed.
    pub async fn finished(self, latest: &Transcript) -> std::io::Result<()> {
        let (written, owed) = match self.write.await {
            Ok(done) => done,
            Err(e) => (Err(std::io::Error::other(e)), None),
        };
        if written.is_err() {
            self.unsaved.keep(latest);
        }
        drop(owed);
        written
    }
}

/// One save in flight, counted in [`Unsaved`] for as long as it lives.
struct Owed(std::sync::Arc<AtomicU64>);

impl Drop for Owed {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Transcripts whose last save failed (a full disk), kept whole, by task id: on
/// disk they disagree with the log (a finished task still `running`, calls whose
/// results were never saved), so they are saved again, as they are in memory, once
/// a save succeeds ([`Unsaved::retry`]). Cheap to clone; shared by every task.
#[derive(Clone, Default)]
pub struct Unsaved {
    kept: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, Transcript>>>,
    /// Saves started by tasks and not yet settled ([`SaveInFlight`]).
    in_flight: std::sync::Arc<AtomicU64>,
}

impl Unsaved {
    /// Keeps `t` (its latest state) to be saved again.
    pub fn keep(&self, t: &Transcript) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.insert(t.task_id.clone(), t.clone());
        }
    }

    /// Forgets task `id`: its transcript was just saved.
    pub fn forget(&self, id: &str) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.remove(id);
        }
    }

    /// Whether no transcript is owed a save: none kept after a failure, none
    /// in flight.
    pub fn is_empty(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
            && self.kept.lock().map_or(true, |k| k.is_empty())
    }

    /// Starts saving `t` (as it is now) into `dir` on a blocking thread: owed
    /// until it lands, or, if it fails, until it is settled.
    pub fn start_save(&self, t: &Transcript, dir: PathBuf) -> std::io::Result<SaveInFlight> {
        let bytes = serde_json::to_vec(t).map_err(std::io::Error::other)?;
        let task_id = t.task_id.clone();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let owed = Owed(self.in_flight.clone());
        let write = tokio::task::spawn_blocking(move || {
            let written = Transcript::write(&dir, &task_id, &bytes);
            // Landed: nothing is owed. Failed: owed until the task keeps it.
            let owed = written.is_err().then_some(owed);
            (written, owed)
        });
        Ok(SaveInFlight {
            write,
            unsaved: self.clone(),
        })
    }

    /// Saves the kept transcripts into `dir`, oldest task id first; stops at the
    /// first that fails (the disk is still full) and keeps the rest. Returns how
    /// many were saved.
    pub async fn retry(&self, dir: &Path) -> usize {
        let pending: Vec<Transcript> = match self.kept.lock() {
            Ok(kept) => kept.values().cloned().collect(),
            Err(_) => return 0,
        };
        let mut saved = 0;
        for t in pending {
            // Under the task's run lock: a run of it now (its own end, a resume)
            // owns the file and this state must not overwrite it; kept for the next
            // round (a run that saves forgets it, one that fails keeps its newer
            // state).
            let (d, id) = (dir.to_path_buf(), t.task_id.clone());
            let lock = tokio::task::spawn_blocking(move || RunLock::acquire(&d, &id)).await;
            let _lock = match lock {
                Ok(Ok(lock)) => lock,
                Ok(Err(LockError::Held { .. })) => continue,
                _ => break,
            };
            if let Err(e) = t.save_async(dir.to_path_buf()).await {
                tracing::debug!("transcript {} still cannot be saved: {e}", t.task_id);
                break;
            }
            // A newer state kept meanwhile is saved at the next round.
            if let Ok(mut kept) = self.kept.lock()
                && kept.get(&t.task_id) == Some(&t)
            {
                kept.remove(&t.task_id);
            }
            tracing::warn!(
                "transcript {} saved again, in line with the log, after its save had failed",
                t.task_id
            );
            saved += 1;
        }
        saved
    }
}

/// Numbers this process's temp files, so no two writes share one.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Why a task's run lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another run (in this process or another) holds it.
    #[error("task {task_id} is being run by another process (its lock {} is held)", path.display())]
    Held {
        /// The task.
        task_id: String,
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file could not be created or locked.
    #[error("cannot lock {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
}

/// An exclusive `flock` on `transcripts/<task_id>.lock`, held for a whole run so
/// that two processes (a daemon and anything else on the root) never drive one
/// transcript. The lock file is removed when the lock is dropped.
#[derive(Debug)]
pub struct RunLock {
    file: std::fs::File,
    path: PathBuf,
}

impl RunLock {
    /// Takes the run lock of `task_id` in `dir` without waiting: [`LockError::Held`]
    /// when another run has it. Blocking file I/O; call it off the runtime's workers.
    pub fn acquire(dir: &Path, task_id: &str) -> Result<RunLock, LockError> {
        let path = dir.join(format!("{task_id}.lock"));
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        // A holder removes the file before it lets go, so a lock taken on a file
        // that is no longer at `path` was taken on a dead file: open the new one.
        for _ in 0..8 {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                // A read-only descriptor is enough to flock: no one else may open it.
                .mode(0o600)
                .open(&path)
                .map_err(io)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(LockError::Held {
                        task_id: task_id.to_string(),
                        path,
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
            let held = file.metadata().map_err(io)?;
            match std::fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(RunLock { file, path });
                }
                _ => continue,
            }
        }
        Err(LockError::Held {
            task_id: task_id.to_string(),
            path,
        })
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Removed while still locked (see `acquire`), then unlocked by the close.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transcript written before `max_turns`, `source` and `by` existed still
    /// loads, with them absent; a new one without them does not write them.
    #[test]
    fn older_transcripts_still_load() {
        let old = serde_json::json!({
            "task_id": "t-1", "model": "m", "created": "2026-01-01T00:00:00.000Z",
            "status": "interrupted", "stop_reason": null, "answer": null,
            "usage": {"input_tokens": 0, "output_tokens": 0,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "messages": [], "turns": []
        });
        let t: Transcript = serde_json::from_value(old.clone()).unwrap();
        assert_eq!((t.max_turns, t.source, t.by.as_deref()), (None, None, None));
        assert_eq!(serde_json::to_value(&t).unwrap(), old);
    }

    fn transcript(id: &str) -> Transcript {
        serde_json::from_value(serde_json::json!({
            "task_id": id, "model": "m", "created": "2026-01-01T00:00:00.000Z",
            "status": "running", "stop_reason": null, "answer": null,
            "usage": {"input_tokens": 0, "output_tokens": 0,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "messages": [], "turns": []
        }))
        .unwrap()
    }

    /// A failed save stays owed until settled, then is kept, so a checkpoint
    /// waits for it; one that landed owes nothing; a dropped one (a task that
    /// panicked) owes nothing once its write ends.
    #[tokio::test]
    async fn a_failed_save_is_owed_until_its_task_keeps_the_transcript() {
        let dir = tempfile::tempdir().unwrap();
        let unsaved = Unsaved::default();
        let t = transcript("t-ok");
        let saving = unsaved.start_save(&t, dir.path().to_path_buf()).unwrap();
        saving.finished(&t).await.unwrap();
        assert!(unsaved.is_empty());
        assert!(dir.path().join("t-ok.json").exists());

        // A directory that cannot be made: a file stands at its path.
        let blocked = dir.path().join("file").join("sub");
        std::fs::write(dir.path().join("file"), "").unwrap();
        let t = transcript("t-fails");
        let saving = unsaved.start_save(&t, blocked.clone()).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(
            !unsaved.is_empty(),
            "a failed write is owed before it is settled"
        );
        assert!(saving.finished(&t).await.is_err());
        assert!(!unsaved.is_empty(), "a failed save is kept, still owed");
        unsaved.forget("t-fails");
        assert!(unsaved.is_empty());

        drop(unsaved.start_save(&t, blocked).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !unsaved.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "a dropped save stays owed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
