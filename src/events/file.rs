//! The events.jsonl file itself: open and repair, find the last `seq`, append one
//! line under an exclusive lock so several processes sharing a root still produce
//! one strictly increasing sequence.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde_json::{Map, Value};

/// How far back from the end to look for the last line.
const TAIL_WINDOW: u64 = 1024 * 1024;

/// Why the log could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// An I/O operation on the log failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The writer thread is gone (the log was closed).
    #[error("the event log is closed")]
    Closed,
}

/// A partial last line that was moved aside.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair {
    /// The file it was moved to.
    pub torn_file: PathBuf,
    /// Its length in bytes.
    pub bytes: u64,
}

/// The open log.
pub(crate) struct LogFile {
    path: PathBuf,
    file: Option<File>,
    next_seq: u64,
    known_len: u64,
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> EventError + 'a {
    move |source| EventError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl LogFile {
    /// Opens (creating) the log, moving a torn last line aside.
    pub(crate) fn open(path: &Path) -> Result<(LogFile, Option<Repair>), EventError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io("create directory for", path))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io("open", path))?;
        let mut log = LogFile {
            path: path.to_path_buf(),
            file: Some(file),
            next_seq: 1,
            known_len: u64::MAX,
        };
        let repair = log.with_lock(repair)?;
        Ok((log, repair))
    }

    fn with_lock<T>(
        &mut self,
        f: impl FnOnce(&mut File, &Path) -> Result<T, EventError>,
    ) -> Result<T, EventError> {
        let file = self.file.take().ok_or(EventError::Closed)?;
        let mut locked = Flock::lock(file, FlockArg::LockExclusive).map_err(|(file, e)| {
            self.file = Some(file);
            EventError::Io {
                op: "lock",
                path: self.path.clone(),
                source: e.into(),
            }
        })?;
        let result = f(&mut locked, &self.path);
        match locked.unlock() {
            Ok(file) => self.file = Some(file),
            Err((locked, e)) => {
                // Dropping the guard unlocks; keep the error.
                drop(locked);
                return Err(EventError::Io {
                    op: "unlock",
                    path: self.path.clone(),
                    source: e.into(),
                });
            }
        }
        result
    }

    /// Appends one event object (without `seq`, which is assigned here) and returns
    /// its seq. The line is written with one `write` call to an `O_APPEND` file.
    pub(crate) fn append(
        &mut self,
        ts: String,
        body: Map<String, Value>,
    ) -> Result<u64, EventError> {
        let known_len = self.known_len;
        let mut next_seq = self.next_seq;
        let result = self.with_lock(|file, path| {
            let len = file.metadata().map_err(io("stat", path))?.len();
            if len != known_len {
                // Someone else appended (another process on the same root), or this
                // is the first write: read the seq back from the file.
                next_seq = last_seq(file, path)?.map_or(next_seq, |s| s.max(next_seq - 1) + 1);
            }
            let mut line = Map::new();
            line.insert("seq".into(), next_seq.into());
            line.insert("ts".into(), ts.into());
            line.extend(body);
            let mut bytes = serde_json::to_vec(&Value::Object(line))
                .map_err(|e| io("serialise event for", path)(std::io::Error::other(e)))?;
            bytes.push(b'\n');
            file.write_all(&bytes).map_err(io("append to", path))?;
            Ok((next_seq, len + bytes.len() as u64))
        });
        let (seq, len) = result?;
        self.next_seq = seq + 1;
        self.known_len = len;
        Ok(seq)
    }
}

/// The `seq` of the last line, if any.
fn last_seq(file: &mut File, path: &Path) -> Result<Option<u64>, EventError> {
    let tail = read_tail(file, path)?;
    let text = String::from_utf8_lossy(&tail);
    Ok(text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("seq").and_then(Value::as_u64)))
}

fn read_tail(file: &mut File, path: &Path) -> Result<Vec<u8>, EventError> {
    let len = file.metadata().map_err(io("stat", path))?.len();
    let start = len.saturating_sub(TAIL_WINDOW);
    file.seek(SeekFrom::Start(start))
        .map_err(io("seek", path))?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf).map_err(io("read", path))?;
    Ok(buf)
}

/// Moves a last line that is partial (no newline) or unparseable to
/// `<file>.torn-<ts>` and truncates it away, so every line of the log parses.
fn repair(file: &mut File, path: &Path) -> Result<Option<Repair>, EventError> {
    let len = file.metadata().map_err(io("stat", path))?.len();
    if len == 0 {
        return Ok(None);
    }
    let tail = read_tail(file, path)?;
    let tail_start = len - tail.len() as u64;
    let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
    let last_start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let last = &tail[last_start..];
    let complete =
        last.ends_with(b"\n") && serde_json::from_slice::<Value>(&last[..last.len() - 1]).is_ok();
    if complete {
        return Ok(None);
    }
    if last_start == 0 && tail_start > 0 {
        // A "line" longer than the window: not something harnessd writes; leave it.
        return Ok(None);
    }
    let ts = chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ");
    let torn_path = PathBuf::from(format!("{}.torn-{ts}", path.display()));
    std::fs::write(&torn_path, last).map_err(io("write", &torn_path))?;
    file.set_len(tail_start + last_start as u64)
        .map_err(io("truncate", path))?;
    Ok(Some(Repair {
        torn_file: torn_path,
        bytes: last.len() as u64,
    }))
}
