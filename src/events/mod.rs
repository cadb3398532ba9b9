//! The audit log, `events.jsonl`: one writer thread owns the file; everyone else
//! holds an [`EventLog`] handle and sends it events. [`EventLog::record`] returns
//! only after the line was written, so "recorded before it happens" is a fact.
//!
//! A write that fails is cut back to the last complete line and answered with an
//! error, so the action it recorded does not happen; until a later write succeeds,
//! [`EventLog::failing`] says why (the daemon's `/healthz` 503 and 507 on new
//! tasks). With `audit.sync = "before_action"`, lines that gate an action are
//! synced before their answer, one sync covering every line written before it.
//!
//! Each line carries `seq` (strictly increasing across files and across runs),
//! `ts` (RFC 3339 UTC, milliseconds), `prev` (the SHA-256 of the previous line's
//! bytes, so an edited, deleted or reordered line breaks the chain: see
//! [`verify`]), `type` and `task_id` where a task is concerned. A file past
//! `audit.rotate_mb` is closed and a new one started ([`segments`]); the rotation
//! is itself a `log_rotated` line, the first of the new file.
//! String fields longer than [`MAX_FIELD_CHARS`] are cut in the middle. Diagnostics
//! never go here; they go through `tracing`.

mod failpoint;
mod file;
mod kinds;
mod open_tasks;
pub mod query;
mod reserve;
pub mod segments;
pub mod since;
pub mod tail;
mod trail;
pub mod verify;

pub use file::{EventError, GENESIS, Repair};
pub use kinds::{
    Event, Record, SkillRecord, SpoolCutReason, SpoolCutRecord, event_types, events_schema,
};
pub use open_tasks::{ended_cleanly, open_tasks};
pub use trail::{CallTrail, TrailError, call_trails};

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc as std_mpsc};

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::config::AuditSync;
use file::LogFile;

/// Longest string field kept whole in an event.
pub const MAX_FIELD_CHARS: usize = 4096;

/// What the writer thread is asked to do.
enum WriterJob {
    /// Write one line.
    Append {
        body: Map<String, Value>,
        /// The line records an end ([`records_an_end`]): it may use a released
        /// reserve.
        ends: bool,
        /// Sync before answering: the line gates an action and `audit.sync` is on.
        sync: bool,
        /// Receives the seq once the line is written (and synced, if asked); dropped
        /// unanswered if the writer died.
        ack: oneshot::Sender<Result<u64, EventError>>,
    },
    /// Sync every line written so far.
    Sync {
        ack: oneshot::Sender<Result<(), EventError>>,
    },
    /// Hold the reserve of `mb` MiB at `path` (0: none, and a left-over file is
    /// removed); answered with why it could not be held.
    HoldReserve {
        path: std::path::PathBuf,
        mb: u64,
        ack: oneshot::Sender<Result<(), String>>,
    },
}

/// Whether the log can be written, shared by the writer (which sets it after every
/// write and sync) and everyone who must refuse work while it cannot.
#[derive(Default)]
struct Health {
    /// Why the last write failed; `None` once one succeeds.
    write: Mutex<Option<String>>,
    /// Why the last sync failed; `None` once one succeeds. Kept apart from writes:
    /// after a failed `fdatasync` the lines may not be on the disk, and a later
    /// write that lands in the page cache proves nothing until a sync succeeds.
    sync: Mutex<Option<String>>,
    /// Set while the reserve is released (the disk filled): only the ends of
    /// things are recorded until space returns and the reserve is held again.
    reserve: Mutex<Option<String>>,
    /// The chain head: seq and hash of the last line written.
    head: Mutex<(u64, String)>,
    /// The head's seq, for readers that follow the log (notification sinks):
    /// sent by the writer after each line, watched through
    /// [`EventLog::watch_head`]; holds one value, so a slow reader never makes
    /// it grow.
    head_seq: tokio::sync::watch::Sender<u64>,
    /// The last `events_gap` this writer recorded; kept until restart.
    gap: Mutex<Option<Gap>>,
}

/// An `events_gap` the writer recorded: the file at the log's path had lost
/// lines it wrote (removed, replaced, cut).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Gap {
    /// The `events_gap` line's seq.
    pub seq: u64,
    /// The last seq written before it.
    pub last_seq: u64,
    /// That line's hash.
    pub last_hash: String,
    /// The log's path.
    pub file: String,
}

impl Health {
    fn note<T>(slot: &Mutex<Option<String>>, result: &Result<T, EventError>) {
        if let Ok(mut failing) = slot.lock() {
            *failing = result.as_ref().err().map(ToString::to_string);
        }
    }

    fn failing(&self) -> Option<String> {
        let get = |slot: &Mutex<Option<String>>| slot.lock().ok().and_then(|f| f.clone());
        get(&self.sync)
            .or_else(|| get(&self.write))
            .or_else(|| get(&self.reserve))
    }
}

/// A handle to the log. Cheap to clone; the writer thread ends when every handle
/// is dropped.
#[derive(Clone)]
pub struct EventLog {
    /// Sent to by every handle, received by the writer thread.
    tx: std_mpsc::Sender<WriterJob>,
    /// Copies of every written line go here (the `run` progress trail); dropping the
    /// receiver just stops the copies.
    tap: Option<mpsc::UnboundedSender<Value>>,
    /// Set by the writer: whether the last write failed, and why.
    health: Arc<Health>,
    /// `audit.sync = "before_action"`: lines that gate an action are synced.
    sync_before_action: Arc<AtomicBool>,
    /// `audit.rotate_mb` in bytes, read by the writer after each line; 0: never.
    rotate_bytes: Arc<AtomicU64>,
}

impl EventLog {
    /// Opens `path` (repairing a torn last line) and starts the writer thread.
    /// Lines that gate an action are synced until [`EventLog::set_sync`] says not to.
    pub fn open(
        path: &Path,
        tap: Option<mpsc::UnboundedSender<Value>>,
    ) -> Result<(EventLog, Option<Repair>), EventError> {
        let (log, repair) = LogFile::open(path)?;
        let (tx, rx) = std_mpsc::channel::<WriterJob>();
        let (seq, hash) = log.head();
        let health = Arc::new(Health {
            write: Mutex::new(None),
            sync: Mutex::new(None),
            reserve: Mutex::new(None),
            head: Mutex::new((seq, hash.to_string())),
            head_seq: tokio::sync::watch::Sender::new(seq),
            gap: Mutex::new(None),
        });
        let rotate_bytes = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            log,
            tap: tap.clone(),
            health: health.clone(),
            rotate_bytes: rotate_bytes.clone(),
            reserve: None,
        };
        std::thread::Builder::new()
            .name("events-writer".into())
            .spawn(move || writer.run(&rx))
            .map_err(|source| EventError::Io {
                op: "start writer thread for",
                path: path.to_path_buf(),
                source,
            })?;
        let log = EventLog {
            tx,
            tap,
            health,
            sync_before_action: Arc::new(AtomicBool::new(true)),
            rotate_bytes,
        };
        Ok((log, repair))
    }

    /// Applies `audit.rotate_mb` (0: never rotate).
    pub fn set_rotate_mb(&self, mb: f64) {
        // Saturating float-to-int cast: a huge value means "practically never".
        let bytes = (mb * 1024.0 * 1024.0) as u64;
        self.rotate_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The chain head: seq and `prev`-hash of the last line written (0 and
    /// [`GENESIS`] for an empty log). Logged to the diagnostic log at start, stop
    /// and hourly, where a rewrite of the whole audit log cannot reach it.
    pub fn head(&self) -> (u64, String) {
        self.health
            .head
            .lock()
            .map(|h| h.clone())
            .unwrap_or_else(|_| (0, String::new()))
    }

    /// The seq of the last line written, changed after each line: a reader of
    /// the file waits on it for new lines instead of being sent them.
    pub fn watch_head(&self) -> tokio::sync::watch::Receiver<u64> {
        self.health.head_seq.subscribe()
    }

    /// Applies `audit.sync`.
    pub fn set_sync(&self, sync: AuditSync) {
        self.sync_before_action
            .store(sync == AuditSync::BeforeAction, Ordering::Relaxed);
    }

    /// Writes one event and waits until it is written; returns its seq. An event
    /// that gates an action (see [`gates_action`]) is also synced to disk first when
    /// `audit.sync = "before_action"`. `Err` means the line is not in the log (a
    /// failed write is cut back), so the action it records must not happen.
    pub async fn record(&self, task_id: Option<&str>, event: Event) -> Result<u64, EventError> {
        let (ack, done) = oneshot::channel();
        let sync = gates_action(&event) && self.sync_before_action.load(Ordering::Relaxed);
        self.tx
            .send(WriterJob::Append {
                body: body(task_id, &event),
                ends: records_an_end(&event),
                sync,
                ack,
            })
            .map_err(|_| EventError::Closed)?;
        done.await.map_err(|_| EventError::Closed)?
    }

    /// Holds the reserve (docs/events.md): `path` (`transcripts/.reserve`) preallocated to
    /// `mb` MiB, given up by the writer only to record a failure when the disk
    /// fills, and taken back when space returns. 0 removes a left-over reserve.
    /// `Err` says why it could not be held; the log then runs without one.
    pub async fn hold_reserve(&self, path: std::path::PathBuf, mb: u64) -> Result<(), String> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(WriterJob::HoldReserve { path, mb, ack })
            .map_err(|_| EventError::Closed.to_string())?;
        done.await.map_err(|_| EventError::Closed.to_string())?
    }

    /// Syncs every line written so far to disk. Syncs asked for together are one
    /// `fdatasync`: the writer performs it once for everything before it.
    pub async fn sync(&self) -> Result<(), EventError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(WriterJob::Sync { ack })
            .map_err(|_| EventError::Closed)?;
        done.await.map_err(|_| EventError::Closed)?
    }

    /// Why the log cannot be written, while the last write or the last sync failed;
    /// `None` once a write, and after a failed sync a sync, succeeds again.
    pub fn failing(&self) -> Option<String> {
        self.health.failing()
    }

    /// The last `events_gap` recorded since this log was opened: the file at the
    /// path lost lines written before it. Kept until restart.
    pub fn gap(&self) -> Option<Gap> {
        self.health.gap.lock().ok().and_then(|g| g.clone())
    }

    /// Writes the chain head to the diagnostic log (journald under systemd), a
    /// record the audit log's own tools cannot rewrite: a log rewritten whole,
    /// chain and all, no longer ends in a head logged there (docs/events.md).
    pub fn log_head(&self, when: &str) {
        let (seq, hash) = self.head();
        // A notice, like the daemon's other start and stop lines: journald keeps it
        // whatever `HARNESSD_LOG` filters.
        tracing::info!(
            target: crate::text::NOTICE,
            "harnessd: audit log chain head at {when}: seq {seq} {hash}"
        );
    }

    /// Whether a tap is attached.
    pub fn has_tap(&self) -> bool {
        self.tap.is_some()
    }
}

impl EventError {
    /// Whether the line may be in the file despite the error: its write succeeded
    /// and the sync after it failed. A failed write is cut back, so its line is not.
    pub fn line_may_remain(&self) -> bool {
        // `LogFile::sync` names its operation "sync".
        matches!(self, EventError::Io { op: "sync", .. })
    }
}

/// Whether `event` records the end of something (a call, a task, the daemon):
/// while the reserve is released, only these are written, so every running task
/// can still record how it stopped and nothing new starts.
fn records_an_end(event: &Event) -> bool {
    matches!(
        event,
        Event::ToolFinished { .. }
            | Event::TaskFinished { .. }
            | Event::TaskInterrupted { .. }
            | Event::TaskCancelled { .. }
            | Event::DaemonStopping { .. }
    )
}

/// Whether `event` is the last line before an action (a tool run, an approval
/// taking effect, a 202 to a new task or a resume), and so must be on disk before
/// it proceeds.
pub fn gates_action(event: &Event) -> bool {
    matches!(
        event,
        Event::PolicyDecision { .. }
            | Event::ApprovalResolved { .. }
            | Event::TaskQueued { .. }
            | Event::TaskResumed { .. }
    )
}

/// The writer thread's state: the file, the tap, the health it reports.
struct Writer {
    log: LogFile,
    tap: Option<mpsc::UnboundedSender<Value>>,
    health: Arc<Health>,
    rotate_bytes: Arc<AtomicU64>,
    /// The space kept for recording a failure; `None`: no reserve.
    reserve: Option<reserve::Reserve>,
}

/// How often, while no line comes, the writer retakes a released reserve, probes
/// a failed log and checks that the file at the path is still its own.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// An answer held back until the batch's sync: an append's seq or a sync request.
enum Held {
    Append(oneshot::Sender<Result<u64, EventError>>, u64),
    Sync(oneshot::Sender<Result<(), EventError>>),
}

impl Writer {
    /// Serves commands in batches: everything queued is written, then one sync
    /// covers every line of the batch for all who asked for it (group sync).
    fn run(mut self, rx: &std_mpsc::Receiver<WriterJob>) {
        loop {
            // While nothing comes, the writer still looks after the log: a released
            // reserve is tried again, a failed write probed, the file at the path
            // checked, so the health recovers (and a lost file is noticed) by itself.
            let first = match rx.recv_timeout(WATCH_EVERY) {
                Ok(cmd) => cmd,
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    self.idle();
                    continue;
                }
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut held = Vec::new();
            let mut next = Some(first);
            while let Some(cmd) = next {
                match cmd {
                    WriterJob::Append {
                        body,
                        ends,
                        sync,
                        ack,
                    } => match self.append(body, ends) {
                        Ok(seq) if sync => held.push(Held::Append(ack, seq)),
                        result => {
                            let _ = ack.send(result);
                        }
                    },
                    WriterJob::Sync { ack } => held.push(Held::Sync(ack)),
                    WriterJob::HoldReserve { path, mb, ack } => {
                        let _ = ack.send(self.hold_reserve(path, mb));
                    }
                }
                next = rx.try_recv().ok();
            }
            if !held.is_empty() {
                self.sync_for(held);
            }
        }
    }

    /// Writes one line, then rotates the file if it is now full; the rotation is
    /// recorded as the first line of the new file.
    ///
    /// A line that finds the disk full releases the reserve: the line itself is
    /// not written (the action it records does not happen), unless it records an
    /// end, which is written again into the space given up. While the reserve is
    /// released, only such lines are written.
    fn append(&mut self, body: Map<String, Value>, ends: bool) -> Result<u64, EventError> {
        if !ends && !self.retake_reserve() {
            let refused = EventError::Io {
                op: "append to",
                path: self.log.path().to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "the disk filled: the audit log's reserve is kept for recording how \
                     tasks end, and nothing new is recorded until space returns",
                ),
            };
            Health::note::<u64>(&self.health.write, &Err(copy_error(&refused)));
            return Err(refused);
        }
        let mut result = self.append_one(body.clone());
        if let Err(e) = &result
            && reserve::is_disk_full(e)
            && let Some(r) = self.reserve.as_mut().filter(|r| !r.released())
        {
            r.release();
            if let Ok(mut slot) = self.health.reserve.lock() {
                *slot = Some(format!(
                    "{e}; the audit log's reserve was released to record the failure, and \
                     new work is refused until space returns"
                ));
            }
            if ends {
                result = self.append_one(body);
            }
        }
        if result.is_ok() {
            self.rotate();
        }
        result
    }

    /// One round of looking after the log while nothing is written.
    fn idle(&mut self) {
        let _ = self.retake_reserve();
        let failing = |slot: &Mutex<Option<String>>| slot.lock().is_ok_and(|f| f.is_some());
        if failing(&self.health.sync) {
            let synced = self.log.sync();
            Health::note(&self.health.sync, &synced);
        }
        if failing(&self.health.write) {
            // No line to try: a probe of room past the end stands for one.
            let probed = self.log.probe();
            Health::note(&self.health.write, &probed);
        }
        if self.log.moved_under_us() {
            let ts = now();
            let checked = self.log.check_gap(ts.clone());
            self.report_gap(&ts);
            if let Err(e) = checked {
                tracing::warn!("cannot check the audit log at its path: {e}");
            }
        }
    }

    /// Reports an `events_gap` line the last write put first: an error in the
    /// diagnostic log, the health (until restart), the tap.
    fn report_gap(&mut self, ts: &str) {
        let Some(gap) = self.log.take_gap() else {
            return;
        };
        let path = self.log.path().display().to_string();
        tracing::error!(
            "the audit log {path} was removed, replaced or cut under the daemon: lines up to \
             seq {} are no longer in it; recorded as events_gap at seq {}",
            gap.last_seq,
            gap.seq
        );
        tracing::info!(
            target: crate::text::NOTICE,
            "harnessd: error: the audit log {path} was removed or replaced under the daemon; \
             events_gap recorded at seq {} (last seq written before: {})",
            gap.seq,
            gap.last_seq
        );
        if let Some(tap) = &self.tap {
            let mut line = Map::new();
            line.insert("seq".into(), gap.seq.into());
            line.insert("ts".into(), ts.into());
            line.insert("prev".into(), gap.last_hash.clone().into());
            let event = Event::EventsGap {
                last_seq: gap.last_seq,
                last_hash: gap.last_hash.clone(),
            };
            line.extend(body(None, &event));
            let _ = tap.send(Value::Object(line));
        }
        if let Ok(mut slot) = self.health.gap.lock() {
            *slot = Some(Gap {
                seq: gap.seq,
                last_seq: gap.last_seq,
                last_hash: gap.last_hash,
                file: path,
            });
        }
    }

    /// Holds the reserve asked for at start; see [`EventLog::hold_reserve`].
    fn hold_reserve(&mut self, path: std::path::PathBuf, mb: u64) -> Result<(), String> {
        if mb == 0 {
            self.reserve = None;
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(format!("cannot remove {}: {e}", path.display()))
                }
                _ => Ok(()),
            };
        }
        let mut r = reserve::Reserve::new(path.clone(), mb);
        let held = r
            .hold()
            .map_err(|e| format!("cannot preallocate {} ({mb} MiB): {e}", path.display()));
        // One that cannot be held at start is not one to wait for: the log runs
        // without it (and says so), as before the setting existed.
        self.reserve = held.is_ok().then_some(r);
        held
    }

    /// Whether nothing holds lines back: no reserve, a held one, or a released
    /// one taken back just now (the health recovers with it).
    fn retake_reserve(&mut self) -> bool {
        let Some(r) = self.reserve.as_mut() else {
            return true;
        };
        if !r.released() {
            return true;
        }
        let back = r.retake();
        if back {
            // Room for twice the reserve proves the disk has space again: a write
            // refused for a full disk no longer says anything about the log.
            for slot in [&self.health.reserve, &self.health.write] {
                if let Ok(mut slot) = slot.lock() {
                    *slot = None;
                }
            }
        }
        back
    }

    fn append_one(&mut self, body: Map<String, Value>) -> Result<u64, EventError> {
        let ts = now();
        let result = self.log.append(ts.clone(), body.clone());
        self.report_gap(&ts);
        Health::note(&self.health.write, &result);
        if let Ok(seq) = &result
            && let Ok(mut head) = self.health.head.lock()
        {
            *head = (*seq, self.log.head().1.to_string());
        }
        if let Ok(seq) = &result {
            self.health.head_seq.send_replace(*seq);
        }
        if let (Ok(seq), Some(tap)) = (&result, &self.tap) {
            let mut line = Map::new();
            line.insert("seq".into(), (*seq).into());
            line.insert("ts".into(), ts.into());
            line.insert("prev".into(), self.log.last_prev().into());
            line.extend(body);
            let _ = tap.send(Value::Object(line));
        }
        result
    }

    /// A failed rotation leaves the file open and growing, which loses nothing:
    /// it is reported in the diagnostic log and tried again after the next line.
    fn rotate(&mut self) {
        let limit = self.rotate_bytes.load(Ordering::Relaxed);
        self.log.set_rotate_bytes((limit > 0).then_some(limit));
        match self.log.rotate_if_full() {
            Ok(Some((file, first_seq, last_seq))) => {
                let event = Event::LogRotated {
                    file,
                    first_seq,
                    last_seq,
                };
                let _ = self.append_one(body(None, &event));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("cannot rotate the audit log: {e}"),
        }
    }

    /// One sync for every held answer; a failed sync fails them all, since the
    /// actions they gate must not proceed on lines that may not be on disk.
    fn sync_for(&mut self, held: Vec<Held>) {
        let synced = self.log.sync();
        Health::note(&self.health.sync, &synced);
        for h in held {
            let failed = synced.as_ref().err().map(copy_error);
            match h {
                Held::Append(ack, seq) => {
                    let _ = ack.send(failed.map_or(Ok(seq), Err));
                }
                Held::Sync(ack) => {
                    let _ = ack.send(failed.map_or(Ok(()), Err));
                }
            }
        }
    }
}

/// The time as a line's `ts`.
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The same error again, for each waiter of one failed sync (io errors do not clone).
fn copy_error(e: &EventError) -> EventError {
    match e {
        EventError::Io { op, path, source } => EventError::Io {
            op,
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        EventError::Closed => EventError::Closed,
    }
}

/// The event as a JSON object: `type`, then `task_id`, then its fields, strings cut.
fn body(task_id: Option<&str>, event: &Event) -> Map<String, Value> {
    let mut value = serde_json::to_value(event).unwrap_or_else(
        |e| serde_json::json!({"type": "internal_error", "message": e.to_string()}),
    );
    cap_strings(&mut value);
    let mut out = Map::new();
    if let Value::Object(fields) = value {
        let mut fields = fields.into_iter();
        if let Some((k, v)) = fields.next() {
            out.insert(k, v);
        }
        if let Some(id) = task_id {
            out.insert("task_id".into(), id.into());
            // Read from the id itself, so no writer can leave it out.
            if let Some(parent) = crate::protocol::tree::parent_task_id(id) {
                out.insert("parent_task_id".into(), parent.into());
            }
        }
        out.extend(fields);
    }
    out
}

/// The `input_sha256` of a `tool_requested` event: lowercase hex SHA-256 of the
/// input's compact JSON serialisation as `serde_json` writes it (no whitespace, object
/// keys in the order the model sent them, non-ASCII as UTF-8). The transcript is
/// written by the same serialiser, so these are the exact bytes of the call's `input`
/// value in `transcripts/<task_id>.json`: the hash ties an event whose input was cut
/// to the full input there. A `tool_use` without `input` hashes as `null`.
pub fn input_sha256(input: &Value) -> String {
    // Serialising a `Value` cannot fail: its map keys are strings.
    crate::protocol::sha256_hex(&serde_json::to_vec(input).unwrap_or_default())
}

/// Cuts every string longer than [`MAX_FIELD_CHARS`], at any depth.
pub fn cap_strings(value: &mut Value) {
    match value {
        Value::String(s) if s.len() > MAX_FIELD_CHARS => {
            let (cut, truncated) = crate::text::truncate_middle(s, MAX_FIELD_CHARS, 0);
            if truncated {
                *s = cut;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(cap_strings),
        Value::Object(map) => map.values_mut().for_each(cap_strings),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_log(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("harnessd-ev-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("events.jsonl")
    }

    fn stop(reason: &str) -> Event {
        Event::DaemonStopping {
            reason: reason.into(),
        }
    }

    #[tokio::test]
    async fn seq_continues_across_opens_and_repairs_torn_line() {
        let path = temp_log("seq");
        {
            let (log, repair) = EventLog::open(&path, None).unwrap();
            assert!(repair.is_none());
            assert_eq!(log.record(Some("t1"), stop("a")).await.unwrap(), 1);
            assert_eq!(log.record(None, stop("b")).await.unwrap(), 2);
        }
        // A crash mid-write leaves half a line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"{\"seq\":3,\"ts\":\"2026").unwrap();
        let (log, repair) = EventLog::open(&path, None).unwrap();
        let repair = repair.expect("torn line found");
        assert_eq!(repair.bytes, 19);
        assert_eq!(
            std::fs::read(&repair.torn_file).unwrap(),
            b"{\"seq\":3,\"ts\":\"2026"
        );
        assert_eq!(log.record(None, stop("c")).await.unwrap(), 3);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["task_id"], "t1");
        assert_eq!(lines[0]["type"], "daemon_stopping");
        assert!(lines[1].get("task_id").is_none());
    }

    #[tokio::test]
    async fn two_handles_on_one_file_share_the_sequence() {
        let path = temp_log("two");
        let (a, _) = EventLog::open(&path, None).unwrap();
        let (b, _) = EventLog::open(&path, None).unwrap();
        let mut seqs = Vec::new();
        for i in 0..10 {
            let log = if i % 2 == 0 { &a } else { &b };
            seqs.push(log.record(None, stop("x")).await.unwrap());
        }
        assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    }

    #[test]
    fn input_sha256_hashes_the_compact_serialisation_in_key_order() {
        let input: Value = serde_json::from_str(r#"{ "b": "é\n", "a": [1, 2.5] }"#).unwrap();
        assert_eq!(
            input_sha256(&input),
            crate::protocol::sha256_hex(r#"{"b":"é\n","a":[1,2.5]}"#.as_bytes())
        );
        assert_ne!(
            input_sha256(&input),
            input_sha256(&serde_json::json!({"a": [1, 2.5], "b": "é\n"}))
        );
    }

    #[test]
    fn long_strings_are_capped() {
        let mut v = serde_json::json!({"a": ["x".repeat(5000)]});
        cap_strings(&mut v);
        let s = v["a"][0].as_str().unwrap();
        assert!(s.contains("[… 906 chars omitted …]"), "{}", &s[2040..2100]);
    }
}
