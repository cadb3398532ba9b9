//! Following the log from a seq on: the lines after it, in order, across the
//! rotated files and on into the live file as it grows, one line in memory at a
//! time — what a notification sink reads instead of being handed lines (so a
//! slow one slows only its own reading).
//!
//! The set of files is listed by [`super::segments`]. The live file stays open
//! between calls: [`Tail::read_next`] answers [`Next::CaughtUp`] at its end and goes on
//! from there at the next call. When the file at the log's path is no longer the
//! one open (rotated away, or replaced under the daemon), what is left of the open
//! one is read first, then the files are listed again; a file cut shorter in place
//! is read again from its start. Lines at or below the seq already passed are
//! skipped, so reading a file twice never hands a line out twice.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::segments::{MAX_LINE_BYTES, open_live, open_regular, segments};

/// What [`Tail::read_next`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// The next line after the seq passed so far.
    Line {
        /// Its seq.
        seq: u64,
        /// Its bytes, without the newline.
        bytes: Vec<u8>,
    },
    /// A line that is not a line of the log (no `seq`): reported, then passed.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Its line number there, from 1.
        line: u64,
    },
    /// Every complete line written so far has been handed out.
    CaughtUp,
}

/// The file being read.
struct Open {
    path: PathBuf,
    reader: BufReader<File>,
    /// Lines read from it.
    number: u64,
    /// Bytes read from it, complete lines and the partial one.
    offset: u64,
    /// For the live file: its device and inode, to notice that the path now
    /// names another file; `None` for a file that no longer grows.
    live: Option<(u64, u64)>,
}

/// A reader of the log whose live file is `live`, from after a seq on.
pub struct Tail {
    live: PathBuf,
    /// The last seq handed out or passed.
    after: u64,
    /// The last seq of the rotated files read to their end.
    rotated_done: u64,
    open: Option<Open>,
    /// The start of a line whose newline is not written yet.
    partial: Vec<u8>,
}

impl Tail {
    /// Reads the log of `live` from the first line after seq `after` (0: all).
    pub fn new(live: &Path, after: u64) -> Tail {
        Tail {
            live: live.to_path_buf(),
            after,
            rotated_done: 0,
            open: None,
            partial: Vec::new(),
        }
    }

    /// The last seq handed out or passed.
    pub fn after(&self) -> u64 {
        self.after
    }

    /// The next line after the ones handed out, or [`Next::CaughtUp`]. `Err` when
    /// the files cannot be listed, opened or read (the next call tries again).
    pub fn read_next(&mut self) -> std::io::Result<Next> {
        loop {
            if self.open.is_none() && !self.open_next()? {
                return Ok(Next::CaughtUp);
            }
            let Some(open) = self.open.as_mut() else {
                return Ok(Next::CaughtUp);
            };
            let room = (MAX_LINE_BYTES + 1).saturating_sub(self.partial.len()) as u64;
            let read = (&mut open.reader)
                .take(room)
                .read_until(b'\n', &mut self.partial);
            let n = match read {
                Ok(n) => n,
                Err(e) => {
                    self.open = None;
                    self.partial.clear();
                    return Err(e);
                }
            };
            open.offset += n as u64;
            let complete = self.partial.last() == Some(&b'\n');
            let overlong = self.partial.len() > MAX_LINE_BYTES;
            if n == 0 || (!complete && !overlong) {
                if open.live.is_some() && n == 0 {
                    match still_live(&self.live, open) {
                        Moved::No => return Ok(Next::CaughtUp),
                        // Renamed away or replaced: what it still holds first.
                        Moved::Away => open.live = None,
                        Moved::Cut => {
                            self.open = None;
                            self.partial.clear();
                        }
                    }
                    continue;
                }
                if open.live.is_some() {
                    // A line being written: the rest comes with the next read.
                    return Ok(Next::CaughtUp);
                }
                if n == 0 {
                    self.finish_rotated();
                    continue;
                }
            }
            open.number += 1;
            let mut bytes = std::mem::take(&mut self.partial);
            if complete {
                bytes.pop();
            }
            match seq_of(&bytes) {
                Some(seq) if seq <= self.after => continue,
                Some(seq) => {
                    self.after = seq;
                    return Ok(Next::Line { seq, bytes });
                }
                None => {
                    return Ok(Next::Unreadable {
                        path: open.path.clone(),
                        line: open.number,
                    });
                }
            }
        }
    }

    /// A file that no longer grows was read to its end (a partial last line of
    /// it was handed out as a line).
    fn finish_rotated(&mut self) {
        let name = self.open.take().map(|o| o.path);
        let range = name
            .as_deref()
            .and_then(|p| segments(p).ok())
            .into_iter()
            .flatten()
            .find(|s| Some(&s.path) == name.as_ref())
            .and_then(|s| s.seqs);
        if let Some((_, last)) = range {
            self.rotated_done = self.rotated_done.max(last);
        }
    }

    /// Opens the oldest file that may hold a line after `after`; `false` when
    /// there is none (no live file yet).
    fn open_next(&mut self) -> std::io::Result<bool> {
        let passed = self.after.max(self.rotated_done);
        for seg in segments(&self.live)? {
            match seg.seqs {
                Some((_, last)) if last <= passed => continue,
                Some(_) => {
                    let file = open_regular(&seg.path)?;
                    self.open = Some(Open::of(seg.path, file, None));
                    return Ok(true);
                }
                None => {
                    let file = match open_live(&seg.path) {
                        Ok(f) => f,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                        Err(e) => return Err(e),
                    };
                    let meta = file.metadata()?;
                    let id = Some((meta.dev(), meta.ino()));
                    self.open = Some(Open::of(seg.path, file, id));
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

impl Open {
    fn of(path: PathBuf, file: File, live: Option<(u64, u64)>) -> Open {
        Open {
            path,
            reader: BufReader::new(file),
            number: 0,
            offset: 0,
            live,
        }
    }
}

/// What became of the live file at its end.
enum Moved {
    /// The path still names it, at least as long as what was read.
    No,
    /// The path names another file, or none.
    Away,
    /// It is shorter than what was read: cut in place.
    Cut,
}

fn still_live(path: &Path, open: &Open) -> Moved {
    match std::fs::metadata(path) {
        Ok(m) if Some((m.dev(), m.ino())) == open.live && m.len() < open.offset => Moved::Cut,
        Ok(m) if Some((m.dev(), m.ino())) == open.live => Moved::No,
        _ => Moved::Away,
    }
}

/// The `seq` of a line: read from its start, where the writer puts it, or
/// failing that from the whole line.
fn seq_of(line: &[u8]) -> Option<u64> {
    if let Some(rest) = line.strip_prefix(b"{\"seq\":") {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits > 0 && rest.get(digits) == Some(&b',') {
            return std::str::from_utf8(&rest[..digits]).ok()?.parse().ok();
        }
    }
    #[derive(serde::Deserialize)]
    struct SeqOnly {
        seq: u64,
    }
    serde_json::from_slice::<SeqOnly>(line).ok().map(|s| s.seq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(seq: u64) -> String {
        format!("{{\"seq\":{seq},\"ts\":\"t\",\"type\":\"checkpoint\"}}\n")
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn drain(tail: &mut Tail) -> Vec<u64> {
        let mut seqs = Vec::new();
        loop {
            match tail.read_next().unwrap() {
                Next::Line { seq, .. } => seqs.push(seq),
                Next::Unreadable { .. } => {}
                Next::CaughtUp => return seqs,
            }
        }
    }

    #[test]
    fn follows_growth_partial_lines_and_rotation_without_a_gap_or_a_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("events.jsonl");
        append(&live, &(line(1) + &line(2) + &line(3)));
        let mut tail = Tail::new(&live, 1);
        assert_eq!(drain(&mut tail), [2, 3]);
        // Half a line: not handed out until its newline is written.
        let four = line(4);
        append(&live, &four[..10]);
        assert_eq!(drain(&mut tail), Vec::<u64>::new());
        append(&live, &four[10..]);
        assert_eq!(drain(&mut tail), [4]);
        // Written, then rotated away before the reader looked: read from the
        // renamed file, then the new live file.
        append(&live, &line(5));
        std::fs::rename(&live, dir.path().join("events-1-5.jsonl")).unwrap();
        append(&live, &line(6));
        assert_eq!(drain(&mut tail), [5, 6]);
        // A new reader from the middle of a rotated file.
        let mut late = Tail::new(&live, 3);
        assert_eq!(drain(&mut late), [4, 5, 6]);
        assert_eq!(late.after(), 6);
    }

    #[test]
    fn a_foreign_line_is_reported_and_passed() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("events.jsonl");
        append(&live, &(line(1) + "not json\n" + &line(2)));
        let mut tail = Tail::new(&live, 0);
        assert!(matches!(
            tail.read_next().unwrap(),
            Next::Line { seq: 1, .. }
        ));
        assert_eq!(
            tail.read_next().unwrap(),
            Next::Unreadable {
                path: live.clone(),
                line: 2
            }
        );
        assert!(matches!(
            tail.read_next().unwrap(),
            Next::Line { seq: 2, .. }
        ));
        assert_eq!(tail.read_next().unwrap(), Next::CaughtUp);
    }

    #[test]
    fn seq_is_read_from_the_start_or_the_whole_line() {
        assert_eq!(seq_of(b"{\"seq\":42,\"ts\":\"t\"}"), Some(42));
        assert_eq!(seq_of(b"{\"ts\":\"t\",\"seq\":7}"), Some(7));
        assert_eq!(seq_of(b"{\"seq\":\"x\"}"), None);
    }
}
