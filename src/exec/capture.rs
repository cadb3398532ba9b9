//! Bounded capture of one output stream: the head and tail stay in memory, and once
//! the stream outgrows them every byte goes to a spool file on disk (created only
//! then, so the common small output costs no file), and a flood past the hard cap
//! kills the tree. Memory per stream is bounded by `keep` bytes twice, whatever the
//! tool prints.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::budget::{CutReason, SpoolBudget};

/// What was kept of one stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Captured {
    /// The first bytes, up to the keep size.
    pub head: Vec<u8>,
    /// The last bytes after `head`, up to the keep size.
    pub tail: Vec<u8>,
    /// Every byte the stream produced.
    pub total: u64,
    /// The spool file, when the stream outgrew memory: every byte, or the first
    /// [`Captured::spooled`] of them when [`Captured::cut`] is set.
    pub spool: Option<PathBuf>,
    /// Bytes written to the spool.
    pub spooled: u64,
    /// Why the spool stopped before the stream's end (the task's spool budget, or
    /// free space under the reserve); the rest was counted, not kept.
    pub cut: Option<CutReason>,
}

impl Captured {
    /// Bytes neither in `head` nor in `tail`.
    pub fn omitted(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// Head and tail, with nothing between them: the whole stream when
    /// [`Captured::omitted`] is 0.
    pub fn bytes(&self) -> Vec<u8> {
        let mut bytes = self.head.clone();
        bytes.extend_from_slice(&self.tail);
        bytes
    }

    /// [`Captured::bytes`] as text (lossy UTF-8); the caller counts
    /// [`Captured::omitted`] into its own marker.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

/// Shared state of a stream being read; the reader thread writes, the executor
/// takes a snapshot when the process is done.
pub(crate) struct Sink {
    keep: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    /// Where to spill once memory is not enough.
    spool_path: Option<PathBuf>,
    spool: Option<File>,
    spool_error: Option<String>,
    /// What the task may still keep; asked before every spool write.
    budget: SpoolBudget,
    /// Bytes written to the spool.
    spooled: u64,
    /// Set when the budget refused a write: the spool stays a prefix of the stream.
    cut: Option<CutReason>,
}

impl Sink {
    pub(crate) fn new(keep: usize, spool: Option<PathBuf>) -> Sink {
        Sink {
            keep,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            spool_path: spool,
            spool: None,
            spool_error: None,
            budget: SpoolBudget::unlimited(),
            spooled: 0,
            cut: None,
        }
    }

    /// The same sink, spooling only what `budget` grants.
    pub(crate) fn with_budget(mut self, budget: SpoolBudget) -> Sink {
        self.budget = budget;
        self
    }

    /// Starts the spool file with what memory holds so far (the whole stream: it
    /// has not outgrown head and tail yet).
    fn open_spool(&mut self) -> std::io::Result<()> {
        let Some(path) = &self.spool_path else {
            return Ok(());
        };
        let mut file = create_exclusive(path)?;
        self.spool = Some(file.try_clone()?);
        // At most twice `keep` bytes: the bound memory already holds.
        let held: Vec<u8> = self.head.iter().chain(self.tail.iter()).copied().collect();
        let n = self.granted(held.len());
        file.write_all(&held[..n])?;
        self.spooled += n as u64;
        Ok(())
    }

    /// How many of `want` bytes may go to the spool; records a cut, which is
    /// final for the stream (so the spool stays a prefix of it).
    fn granted(&mut self, want: usize) -> usize {
        if self.cut.is_some() {
            return 0;
        }
        let (n, why) = self.budget.grant(want as u64);
        self.cut = why;
        usize::try_from(n).unwrap_or(want).min(want)
    }

    /// Gives up the spool after a failed write: the file is removed (a partial
    /// spool must not fill the disk nor be taken for the full output), and the
    /// record falls back to head and tail.
    fn spool_failed(&mut self, e: &std::io::Error) {
        self.spool_error = Some(format!("{}: {e}", self.spool_path_display()));
        self.spool = None;
        if let Some(path) = self.spool_path.take() {
            let _ = std::fs::remove_file(path);
        }
        self.budget.give_back(self.spooled);
        self.spooled = 0;
    }

    fn push(&mut self, chunk: &[u8]) {
        let outgrows = self.total + chunk.len() as u64 > 2 * self.keep as u64;
        if outgrows
            && self.spool.is_none()
            && self.spool_error.is_none()
            && let Err(e) = self.open_spool()
        {
            self.spool_failed(&e);
        }
        self.total += chunk.len() as u64;
        if self.spool.is_some() {
            let n = self.granted(chunk.len());
            if let Some(file) = &mut self.spool
                && n > 0
            {
                match file.write_all(&chunk[..n]) {
                    Ok(()) => self.spooled += n as u64,
                    Err(e) => self.spool_failed(&e),
                }
            }
        }
        let room = self.keep.saturating_sub(self.head.len());
        let (to_head, rest) = chunk.split_at(room.min(chunk.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(rest);
        let excess = self.tail.len().saturating_sub(self.keep);
        self.tail.drain(..excess);
    }

    fn spool_path_display(&self) -> String {
        self.spool_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    pub(crate) fn snapshot(&self) -> Captured {
        Captured {
            head: self.head.clone(),
            tail: self.tail.iter().copied().collect(),
            total: self.total,
            spool: self.spool.as_ref().and(self.spool_path.as_ref()).cloned(),
            spooled: self.spooled,
            cut: self.cut,
        }
    }

    pub(crate) fn spool_error(&self) -> Option<String> {
        self.spool_error.clone()
    }
}

/// Creates `path` owner-only, exclusively: an existing entry there, a symlink
/// above all, is never followed or reused. One left by a crash mid-call (the
/// same tool_use id) is removed first; unlink never follows a link.
fn create_exclusive(path: &Path) -> std::io::Result<File> {
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(path)?;
            open()
        }
        other => other,
    }
}

/// Reads `stream` to its end into `sink`; calls `on_flood` once when the total
/// passes `cap` and stops reading then (the writer is about to be killed). Each
/// chunk is also given to `tee` first; when it returns `false` reading stops
/// (where the chunks were copied is gone).
pub(crate) fn pump(
    mut stream: impl Read,
    sink: Arc<Mutex<Sink>>,
    cap: u64,
    on_flood: impl Fn(),
    mut tee: impl FnMut(&[u8]) -> bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !tee(&buf[..n]) {
            return;
        }
        let total = {
            let Ok(mut s) = sink.lock() else { return };
            s.push(&buf[..n]);
            s.total
        };
        if total > cap {
            on_flood();
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_only() {
        let sink = Arc::new(Mutex::new(Sink::new(4, None)));
        pump(&b"0123456789"[..], sink.clone(), u64::MAX, || {}, |_| true);
        let c = sink.lock().unwrap().snapshot();
        assert_eq!(c.head, b"0123");
        assert_eq!(c.tail, b"6789");
        assert_eq!(c.total, 10);
        assert_eq!(c.omitted(), 2);
    }

    #[test]
    fn short_stream_is_whole() {
        let sink = Arc::new(Mutex::new(Sink::new(4, None)));
        pump(&b"abcdef"[..], sink.clone(), u64::MAX, || {}, |_| true);
        let c = sink.lock().unwrap().snapshot();
        assert_eq!(c.text(), "abcdef");
        assert_eq!(c.omitted(), 0);
    }

    #[test]
    fn spool_is_created_only_when_memory_is_outgrown() {
        let dir = std::env::temp_dir().join(format!("harnessd-spool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("small");
        let sink = Arc::new(Mutex::new(Sink::new(4, Some(small.clone()))));
        pump(&b"12345678"[..], sink.clone(), u64::MAX, || {}, |_| true);
        assert!(!small.exists());
        assert_eq!(sink.lock().unwrap().snapshot().spool, None);
        let big = dir.join("big");
        let sink = Arc::new(Mutex::new(Sink::new(4, Some(big.clone()))));
        pump(
            std::io::Cursor::new(b"0123456789abcdef".to_vec()),
            sink.clone(),
            u64::MAX,
            || {},
            |_| true,
        );
        let c = sink.lock().unwrap().snapshot();
        assert_eq!(c.spool.as_deref(), Some(big.as_path()));
        assert_eq!(std::fs::read(&big).unwrap(), b"0123456789abcdef");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_spool_never_writes_through_a_planted_link() {
        let dir = std::env::temp_dir().join(format!("harnessd-spool-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let spool = dir.join("x.stdout.part");
        std::os::unix::fs::symlink(&victim, &spool).unwrap();
        let sink = Arc::new(Mutex::new(Sink::new(4, Some(spool.clone()))));
        pump(
            &b"0123456789abcdef"[..],
            sink.clone(),
            u64::MAX,
            || {},
            |_| true,
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let meta = std::fs::symlink_metadata(&spool).unwrap();
        assert!(meta.is_file(), "the spool is a fresh file, not the link");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(&spool).unwrap(), b"0123456789abcdef");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn flood_stops_reading() {
        let sink = Arc::new(Mutex::new(Sink::new(4, None)));
        let flooded = std::cell::Cell::new(false);
        let data = vec![b'y'; 300 * 1024];
        pump(&data[..], sink.clone(), 100, || flooded.set(true), |_| true);
        assert!(flooded.get());
        assert!(sink.lock().unwrap().total < data.len() as u64);
    }
}
