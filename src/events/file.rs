//! The events.jsonl file itself: open and repair, find the last `seq` and the
//! hash of the last line, append one line under an exclusive lock so several
//! processes sharing a root still produce one strictly increasing sequence and one
//! hash chain, and close a full file as `events-<first>-<last>.jsonl` (rotation).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde_json::{Map, Value};

/// How far back from the end to look for the last line.
const TAIL_WINDOW: u64 = 1024 * 1024;

/// Room the writer's probe asks for: a few lines' worth.
const PROBE_BYTES: i64 = 64 * 1024;

/// The `prev` of the first line ever written.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

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
    /// Hex SHA-256 of the last line written (without its newline): the next `prev`.
    prev_hash: String,
    /// The `prev` the last line written carries.
    last_prev: String,
    known_len: u64,
    /// Close the file once it is this long (`audit.rotate_mb`); `None`: never.
    rotate_bytes: Option<u64>,
    /// The length to cut the file back to before the next write: set when a failed
    /// write could not be cut back at once.
    pending_cut: Option<u64>,
    /// The `events_gap` line the last write put first, for the writer to report.
    gap: Option<GapLine>,
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
        // 0600 when created: the log holds prompts, answers and tool inputs, which
        // the control API shows only to the daemon's user, root and operators.
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(io("open", path))?;
        let mut log = LogFile {
            path: path.to_path_buf(),
            file: Some(file),
            next_seq: 1,
            prev_hash: GENESIS.to_string(),
            last_prev: GENESIS.to_string(),
            known_len: u64::MAX,
            rotate_bytes: None,
            pending_cut: None,
            gap: None,
        };
        let repair = log.with_lock(repair)?;
        if let Some((seq, hash)) = log.with_lock(chain_tail)? {
            // A forged last seq of u64::MAX leaves no next one: the next append
            // refuses (see `append`) rather than wrapping or panicking.
            log.next_seq = seq.saturating_add(1);
            log.prev_hash = hash;
        }
        Ok((log, repair))
    }

    /// Runs `f` on the file under an exclusive lock. When the file was rotated
    /// away by another process since it was opened, the new live file is opened
    /// and locked instead: every line goes to the file named `path`.
    fn with_lock<T>(
        &mut self,
        f: impl FnOnce(&mut File, &Path) -> Result<T, EventError>,
    ) -> Result<T, EventError> {
        let mut locked = self.lock_live()?;
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

    /// Locks the file that is `path` now, reopening it when it was rotated away.
    fn lock_live(&mut self) -> Result<Flock<File>, EventError> {
        loop {
            let file = self.file.take().ok_or(EventError::Closed)?;
            let locked = Flock::lock(file, FlockArg::LockExclusive).map_err(|(file, e)| {
                self.file = Some(file);
                EventError::Io {
                    op: "lock",
                    path: self.path.clone(),
                    source: e.into(),
                }
            })?;
            let ours = locked.metadata().map_err(io("stat", &self.path))?;
            let same = std::fs::metadata(&self.path)
                .is_ok_and(|now| now.ino() == ours.ino() && now.dev() == ours.dev());
            if same {
                return Ok(locked);
            }
            drop(locked);
            // A new file after a rotation: as private as the first one.
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(0o600)
                .open(&self.path)
                .map_err(io("reopen", &self.path))?;
            self.file = Some(file);
            self.known_len = u64::MAX;
        }
    }

    /// Sets `audit.rotate_mb`: the size past which the file is closed.
    pub(crate) fn set_rotate_bytes(&mut self, bytes: Option<u64>) {
        self.rotate_bytes = bytes;
    }

    /// The last line written: its seq and hash (the chain head).
    /// The live file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn head(&self) -> (u64, &str) {
        (self.next_seq - 1, &self.prev_hash)
    }

    /// The `prev` of the last line this handle wrote.
    pub(crate) fn last_prev(&self) -> &str {
        &self.last_prev
    }

    /// Appends one event object (without `seq` and `prev`, which are assigned here)
    /// and returns its seq. The line is written with one `write` call to an
    /// `O_APPEND` file; `prev` chains it to the line before it, in this file or, at
    /// the start of a file, the last rotated one.
    ///
    /// A write that fails (disk full, I/O error) is cut back at once to the length
    /// the file had before it, so no partial line stays between complete ones; the
    /// seq it would have had is given to the next line, which is no duplicate since
    /// the failed line is gone. If even the cut fails, every later append first
    /// retries the cut and writes nothing until it succeeds.
    pub(crate) fn append(
        &mut self,
        ts: String,
        body: Map<String, Value>,
    ) -> Result<u64, EventError> {
        self.write_lines(ts, Some(body))
            .map(|seq| seq.unwrap_or(self.next_seq - 1))
    }

    /// Whether the file at `path` may no longer be the one this handle wrote to
    /// (another inode, gone, or another length): one `fstat` and one `stat`, so the
    /// writer can look while idle.
    pub(crate) fn moved_under_us(&self) -> bool {
        let Some(file) = &self.file else { return false };
        match (file.metadata(), std::fs::metadata(&self.path)) {
            (Ok(ours), Ok(now)) => {
                ours.ino() != now.ino() || ours.dev() != now.dev() || now.len() != self.known_len
            }
            _ => true,
        }
    }

    /// Writes `events_gap` now if the file at `path` lost lines this handle wrote
    /// (see [`LogFile::take_gap`]); nothing otherwise.
    pub(crate) fn check_gap(&mut self, ts: String) -> Result<(), EventError> {
        self.write_lines(ts, None).map(|_| ())
    }

    /// The `events_gap` line written by the last append or check, once.
    pub(crate) fn take_gap(&mut self) -> Option<GapLine> {
        self.gap.take()
    }

    /// Under the lock: the pending cut, the chain read back when the file is not
    /// the one last written, `events_gap` first when that file lost lines this
    /// handle wrote (removed, replaced by an older copy, cut), then `body`'s line.
    /// Returns `body`'s seq.
    fn write_lines(
        &mut self,
        ts: String,
        body: Option<Map<String, Value>>,
    ) -> Result<Option<u64>, EventError> {
        let known_len = self.known_len;
        let ours = (self.next_seq - 1, self.prev_hash.clone());
        let mut next_seq = self.next_seq;
        let mut prev = self.prev_hash.clone();
        let mut pending_cut = self.pending_cut;
        let mut gap = None;
        let result = self.with_lock(|file, path| {
            if let Some(at) = pending_cut {
                file.set_len(at)
                    .map_err(io("cut back a failed line in", path))?;
                pending_cut = None;
            }
            let mut len = file.metadata().map_err(io("stat", path))?.len();
            if len != known_len {
                // Someone else appended (another process on the same root), or this
                // is the first write: read the seq and the chain back from the log.
                let tail = chain_tail(file, path)?;
                let behind = tail.as_ref().map_or(0, |(seq, _)| *seq);
                if let Some((seq, hash)) = tail {
                    next_seq = seq.max(next_seq - 1).saturating_add(1);
                    prev = hash;
                }
                if ours.0 > behind {
                    // Lines this handle wrote are not in the files any more.
                    let line = gap_line(ours.0, &ours.1);
                    let at = next_seq;
                    let (new_len, hash) = write_line(file, path, len, at, &ts, &ours.1, line)
                        .map_err(|(e, cut)| {
                            pending_cut = cut;
                            e
                        })?;
                    gap = Some(GapLine {
                        seq: at,
                        last_seq: ours.0,
                        last_hash: ours.1.clone(),
                    });
                    (len, next_seq, prev) = (new_len, at.saturating_add(1), hash);
                }
            }
            let Some(body) = body else {
                return Ok((None, len, prev.clone(), prev.clone(), next_seq));
            };
            let (new_len, hash) =
                write_line(file, path, len, next_seq, &ts, &prev, body).map_err(|(e, cut)| {
                    pending_cut = cut;
                    e
                })?;
            Ok((Some(next_seq), new_len, hash, prev.clone(), next_seq + 1))
        });
        self.pending_cut = pending_cut;
        let (seq, len, hash, prev, next) = match result {
            Ok(written) => written,
            Err(e) => {
                // A gap line written before a failed line stays; the next write
                // must not write it twice.
                if let Some(g) = gap {
                    self.next_seq = g.seq + 1;
                    self.known_len = u64::MAX;
                    self.gap = Some(g);
                }
                return Err(e);
            }
        };
        self.gap = gap;
        self.next_seq = next;
        self.known_len = len;
        self.prev_hash = hash;
        self.last_prev = prev;
        Ok(seq)
    }

    /// Closes the file as `events-<first>-<last>.jsonl` when it has grown past
    /// `audit.rotate_mb`, and starts an empty one; returns the closed file's name
    /// and seq range. The old file is synced before the rename, so a closed file is
    /// complete on disk. Seq and chain continue in the new file.
    pub(crate) fn rotate_if_full(&mut self) -> Result<Option<(String, u64, u64)>, EventError> {
        let Some(limit) = self.rotate_bytes else {
            return Ok(None);
        };
        if self.known_len < limit {
            return Ok(None);
        }
        let rotated = self.with_lock(|file, path| {
            let len = file.metadata().map_err(io("stat", path))?.len();
            if len < limit {
                return Ok(None);
            }
            let Some((last, _)) = chain_tail(file, path)? else {
                return Ok(None);
            };
            let first = first_seq(path)?.unwrap_or(last);
            let name = super::segments::rotated_name(first, last);
            let to = path.with_file_name(&name);
            file.sync_data().map_err(io("sync", path))?;
            std::fs::rename(path, &to).map_err(io("rotate", path))?;
            if let Some(dir) = path.parent().and_then(|d| File::open(d).ok()) {
                let _ = dir.sync_all();
            }
            Ok(Some((name, first, last)))
        })?;
        if rotated.is_some() {
            // The next lock finds `path` is a new file and opens it.
            self.known_len = u64::MAX;
        }
        Ok(rotated)
    }

    /// Whether the next lines could be written now, without writing one: room for
    /// [`PROBE_BYTES`] more is allocated past the file's end (`fallocate` keeping
    /// its size, so readers see nothing), or where the file system cannot do that,
    /// written to a scratch file beside it and removed.
    pub(crate) fn probe(&mut self) -> Result<(), EventError> {
        use nix::fcntl::{FallocateFlags, fallocate};
        let file = self.file.as_ref().ok_or(EventError::Closed)?;
        super::failpoint::check("events.append").map_err(io("probe", &self.path))?;
        let len = file.metadata().map_err(io("stat", &self.path))?.len();
        let at = i64::try_from(len).unwrap_or(i64::MAX);
        match fallocate(file, FallocateFlags::FALLOC_FL_KEEP_SIZE, at, PROBE_BYTES) {
            Ok(()) => return Ok(()),
            Err(nix::errno::Errno::EOPNOTSUPP) => {}
            Err(e) => return Err(io("probe", &self.path)(e.into())),
        }
        let scratch = self.path.with_file_name(".events.probe");
        let written = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&scratch)
            .and_then(|mut f| {
                f.write_all(&[0; PROBE_BYTES as usize])?;
                f.sync_data()
            });
        let _ = std::fs::remove_file(&scratch);
        written.map_err(io("probe", &self.path))
    }

    /// Forces every line written so far to the disk (`fdatasync`).
    pub(crate) fn sync(&mut self) -> Result<(), EventError> {
        let file = self.file.as_ref().ok_or(EventError::Closed)?;
        super::failpoint::check("events.sync")
            .and_then(|()| file.sync_data())
            .map_err(io("sync", &self.path))
    }
}

/// The `events_gap` line a handle wrote: its seq, and the last line it had written
/// before (seq and hash).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GapLine {
    /// The gap line's own seq.
    pub(crate) seq: u64,
    /// The last seq written before.
    pub(crate) last_seq: u64,
    /// That line's hash.
    pub(crate) last_hash: String,
}

/// The body of an `events_gap` line.
fn gap_line(last_seq: u64, last_hash: &str) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("type".into(), "events_gap".into());
    body.insert("last_seq".into(), last_seq.into());
    body.insert("last_hash".into(), last_hash.into());
    body
}

/// Writes one line (`seq`, `ts`, `prev`, then `body`) at the end of `file`, whose
/// length is `len`; returns the new length and the line's hash. On failure: the
/// error, and the length still to cut back to when the cut failed too.
fn write_line(
    file: &mut File,
    path: &Path,
    len: u64,
    seq: u64,
    ts: &str,
    prev: &str,
    body: Map<String, Value>,
) -> Result<(u64, String), (EventError, Option<u64>)> {
    if seq == u64::MAX {
        return Err((
            io("append to", path)(std::io::Error::other(
                "the log's last seq leaves no next one (a line with a forged seq near \
                 2^64?); rotate the log aside and restart",
            )),
            None,
        ));
    }
    let mut line = Map::new();
    line.insert("seq".into(), seq.into());
    line.insert("ts".into(), ts.into());
    line.insert("prev".into(), prev.into());
    line.extend(body);
    let mut bytes = serde_json::to_vec(&Value::Object(line)).map_err(|e| {
        (
            io("serialise event for", path)(std::io::Error::other(e)),
            None,
        )
    })?;
    let hash = crate::protocol::sha256_hex(&bytes);
    bytes.push(b'\n');
    let written = match super::failpoint::check("events.append") {
        Ok(()) => append_line(file, len, &bytes),
        Err(e) => append_line(
            &mut super::failpoint::HalfThenFail {
                inner: file,
                error: Some(e),
                wrote_half: false,
            },
            len,
            &bytes,
        ),
    };
    match written {
        Ok(()) => Ok((len + bytes.len() as u64, hash)),
        Err(AppendFailure { write, cut }) => {
            Err((io("append to", path)(write), cut.is_err().then_some(len)))
        }
    }
}

/// Where a line is written: a file, or in tests a sink that fails on purpose.
pub(crate) trait LineSink: Write {
    /// Cuts the sink back to `len` bytes.
    fn cut_to(&mut self, len: u64) -> std::io::Result<()>;
}

impl LineSink for File {
    fn cut_to(&mut self, len: u64) -> std::io::Result<()> {
        self.set_len(len)
    }
}

/// A failed [`append_line`]: the write's error, and whether cutting back worked.
#[derive(Debug)]
pub(crate) struct AppendFailure {
    /// Why the write failed.
    pub(crate) write: std::io::Error,
    /// The cut back to the old length: `Err` leaves a partial line behind.
    pub(crate) cut: std::io::Result<()>,
}

/// Writes `bytes` (one whole line) to `sink`, whose length is `len`; on failure the
/// sink is cut back to `len`, since `write_all` may have written part of the line
/// (a short write on a nearly full disk) and a partial line must never stay.
pub(crate) fn append_line(
    sink: &mut impl LineSink,
    len: u64,
    bytes: &[u8],
) -> Result<(), AppendFailure> {
    sink.write_all(bytes).map_err(|write| AppendFailure {
        write,
        cut: sink.cut_to(len),
    })
}

/// The seq and hash of the last line of the log: of `file`, or when it is empty,
/// of the newest rotated file (the chain continues across files).
fn chain_tail(file: &mut File, path: &Path) -> Result<Option<(u64, String)>, EventError> {
    if let Some(found) = last_line_state(file, path)? {
        return Ok(Some(found));
    }
    let segments = super::segments::segments(path).map_err(io("list rotated files of", path))?;
    let Some(newest) = segments.iter().rev().find(|s| s.seqs.is_some()) else {
        return Ok(None);
    };
    let mut old = super::segments::open_regular(&newest.path).map_err(io("open", &newest.path))?;
    last_line_state(&mut old, &newest.path)
}

/// The seq of the last line that has one, and the hash of the very last line.
fn last_line_state(file: &mut File, path: &Path) -> Result<Option<(u64, String)>, EventError> {
    let tail = read_tail(file, path)?;
    let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
    if body.is_empty() {
        return Ok(None);
    }
    let last = body
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(body, |i| &body[i + 1..]);
    let seq = body
        .split(|&b| b == b'\n')
        .rev()
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .find_map(|v| v.get("seq").and_then(Value::as_u64));
    Ok(seq.map(|seq| (seq, crate::protocol::sha256_hex(last))))
}

/// The seq of the first line of the file at `path`.
fn first_seq(path: &Path) -> Result<Option<u64>, EventError> {
    let file = super::segments::open_live(path).map_err(io("open", path))?;
    let mut line = Vec::new();
    std::io::BufReader::new(file)
        .read_until(b'\n', &mut line)
        .map_err(io("read", path))?;
    Ok(serde_json::from_slice::<Value>(&line)
        .ok()
        .and_then(|v| v.get("seq").and_then(Value::as_u64)))
}

/// The end of the file, holding at least its whole last line: from
/// [`TAIL_WINDOW`], widened (×4) while the last line starts before the window, up
/// to [`super::segments::MAX_LINE_BYTES`] — a line longer than that is foreign.
/// Without the widening, a last line over the window (a tool input of megabytes)
/// would lose the chain at the next start.
fn read_tail(file: &mut File, path: &Path) -> Result<Vec<u8>, EventError> {
    let len = file.metadata().map_err(io("stat", path))?.len();
    let mut window = TAIL_WINDOW;
    loop {
        let start = len.saturating_sub(window);
        file.seek(SeekFrom::Start(start))
            .map_err(io("seek", path))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(io("read", path))?;
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let whole_last_line = start == 0 || body.contains(&b'\n');
        if whole_last_line || window >= super::segments::MAX_LINE_BYTES as u64 {
            return Ok(buf);
        }
        window = window.saturating_mul(4);
    }
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
    // A piece of an event (a prompt, a tool input): private like the log.
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&torn_path)
        .and_then(|mut f| f.write_all(last))
        .map_err(io("write", &torn_path))?;
    file.set_len(tail_start + last_start as u64)
        .map_err(io("truncate", path))?;
    Ok(Some(Repair {
        torn_file: torn_path,
        bytes: last.len() as u64,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that accepts `room` bytes, then fails like a full disk; its cut can be
    /// made to fail too.
    struct FullDisk {
        data: Vec<u8>,
        room: usize,
        cut_fails: bool,
    }

    impl Write for FullDisk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.room - self.data.len().min(self.room));
            if n == 0 {
                return Err(std::io::Error::from_raw_os_error(libc_enospc()));
            }
            self.data.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl LineSink for FullDisk {
        fn cut_to(&mut self, len: u64) -> std::io::Result<()> {
            if self.cut_fails {
                return Err(std::io::Error::other("cut refused"));
            }
            self.data.truncate(len as usize);
            Ok(())
        }
    }

    fn libc_enospc() -> i32 {
        nix::errno::Errno::ENOSPC as i32
    }

    #[test]
    fn a_line_that_fails_mid_write_is_cut_back_to_the_last_complete_line() {
        let mut sink = FullDisk {
            data: b"{\"seq\":1}\n".to_vec(),
            room: 15,
            cut_fails: false,
        };
        let failure = append_line(&mut sink, 10, b"{\"seq\":2,\"x\":\"long\"}\n").unwrap_err();
        assert_eq!(failure.write.raw_os_error(), Some(libc_enospc()));
        assert!(failure.cut.is_ok());
        assert_eq!(sink.data, b"{\"seq\":1}\n");
        // Room again: the next line follows the last complete one.
        sink.room = 100;
        append_line(&mut sink, 10, b"{\"seq\":2}\n").unwrap();
        assert_eq!(sink.data, b"{\"seq\":1}\n{\"seq\":2}\n");
    }

    #[test]
    fn a_failed_cut_is_reported() {
        let mut sink = FullDisk {
            data: Vec::new(),
            room: 3,
            cut_fails: true,
        };
        let failure = append_line(&mut sink, 0, b"{\"seq\":1}\n").unwrap_err();
        assert!(failure.cut.is_err());
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("harnessd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("events.jsonl")
    }

    #[test]
    fn the_chain_survives_a_last_line_longer_than_the_tail_window() {
        let path = scratch("longline");
        let (mut log, _) = LogFile::open(&path).unwrap();
        let mut body = Map::new();
        body.insert("big".into(), "x".repeat(3 * TAIL_WINDOW as usize).into());
        log.append("t".into(), body).unwrap();
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let last = text.lines().last().unwrap().to_string();
        // A new writer (a restart) chains its first line to the long one.
        let (mut log, repair) = LogFile::open(&path).unwrap();
        assert!(repair.is_none(), "a whole line is not torn");
        assert_eq!(log.append("t".into(), Map::new()).unwrap(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        let second: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(second["prev"], crate::protocol::sha256_hex(last.as_bytes()));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_forged_seq_at_the_top_of_the_range_refuses_the_next_line_without_panic() {
        let path = scratch("maxseq");
        let forged = format!("{{\"seq\":{},\"ts\":\"t\",\"type\":\"x\"}}\n", u64::MAX);
        std::fs::write(&path, forged).unwrap();
        let (mut log, _) = LogFile::open(&path).unwrap();
        let err = log.append("t".into(), Map::new()).unwrap_err();
        assert!(err.to_string().contains("no next one"), "{err}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_log_cut_under_the_writer_gets_events_gap_before_the_next_line() {
        let path = scratch("gap");
        let (mut log, _) = LogFile::open(&path).unwrap();
        for _ in 0..3 {
            log.append("t".into(), Map::new()).unwrap();
        }
        let head = log.head().1.to_string();
        // Cut in place (same inode): only the length tells.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        assert!(log.moved_under_us());
        assert_eq!(log.append("t".into(), Map::new()).unwrap(), 5);
        let gap = log.take_gap().expect("a gap line");
        assert_eq!(
            (gap.seq, gap.last_seq, gap.last_hash.as_str()),
            (4, 3, head.as_str())
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["type"], "events_gap");
        assert_eq!(lines[0]["prev"], head.as_str());
        assert_eq!(lines[1]["seq"], 5);
        // Written once: the next line is an ordinary one.
        assert_eq!(log.append("t".into(), Map::new()).unwrap(), 6);
        assert!(log.take_gap().is_none());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_pending_cut_is_made_before_the_next_line() {
        let dir = std::env::temp_dir().join(format!("harnessd-cut-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("events.jsonl");
        let (mut log, _) = LogFile::open(&path).unwrap();
        assert_eq!(log.append("t".into(), Map::new()).unwrap(), 1);
        let good = std::fs::metadata(&path).unwrap().len();
        // As if a failed write left half a line and the cut failed.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"seq\":2,\"ts").unwrap();
        log.pending_cut = Some(good);
        assert_eq!(log.append("t".into(), Map::new()).unwrap(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        let seqs: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, vec![1, 2]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
