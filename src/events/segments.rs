//! The set of files that make up the audit log: the rotated files
//! `events-<first_seq>-<last_seq>.jsonl` next to the live file, oldest first, then
//! the live file itself (docs/events.md). Every reader lists the set here, so that none
//! forgets a file, and reads it through [`SegmentLines`], one line at a time.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// One file of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// The file.
    pub path: PathBuf,
    /// Seq range from a rotated file's name; `None` for the live file, whose range
    /// is only known by reading it.
    pub seqs: Option<(u64, u64)>,
}

/// The name a full live file gets when it is closed.
pub fn rotated_name(first_seq: u64, last_seq: u64) -> String {
    format!("events-{first_seq}-{last_seq}.jsonl")
}

/// The seq range in a rotated file's name, if `name` is one.
fn parse_rotated(name: &str) -> Option<(u64, u64)> {
    let range = name.strip_prefix("events-")?.strip_suffix(".jsonl")?;
    let (first, last) = range.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// Every file of the log whose live file is `live`, oldest first; the live file
/// last, when it exists. A missing directory is an empty log.
pub fn segments(live: &Path) -> std::io::Result<Vec<Segment>> {
    let dir = live.parent().unwrap_or_else(|| Path::new("."));
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut rotated = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(seqs) = name.to_str().and_then(parse_rotated) {
            rotated.push(Segment {
                path: entry.path(),
                seqs: Some(seqs),
            });
        }
    }
    rotated.sort_by_key(|s| s.seqs);
    if live.exists() {
        rotated.push(Segment {
            path: live.to_path_buf(),
            seqs: None,
        });
    }
    Ok(rotated)
}

/// The longest line a reader holds: far above any line harnessd writes (every
/// string field is capped, a model response is capped by `api.max_response_mb`),
/// so only a foreign file has longer ones, and reading one whole could take any
/// amount of memory. The start of such a line is returned, marked [`LogLine::overlong`].
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// One line of the log and where it is.
#[derive(Debug)]
pub struct LogLine {
    /// The file.
    pub path: PathBuf,
    /// Line number in that file, from 1.
    pub number: u64,
    /// Its bytes, without the newline.
    pub bytes: Vec<u8>,
    /// Whether it ended with a newline (only a torn last line does not).
    pub complete: bool,
    /// Longer than [`MAX_LINE_BYTES`]: `bytes` holds only its start; the rest is
    /// skipped, unread into memory, when the next line is asked for.
    pub overlong: bool,
}

/// The last seq of the newest rotated file in `segments` (0: none).
pub fn listed_upto(segments: &[Segment]) -> u64 {
    segments
        .iter()
        .filter_map(|s| s.seqs.map(|(_, last)| last))
        .max()
        .unwrap_or(0)
}

/// The lines of a set of segments, in order, streamed: memory holds one line.
///
/// A rotation may happen while the set is read. Before the live file is opened,
/// and again just after, the directory is listed once more: rotated files that
/// appeared since (first seq above what was listed) are read first, so the lines
/// of a live file renamed away in between are never skipped. Once the live file is
/// open with no rotation in between, its descriptor reads it to its end even if it
/// is renamed later.
pub struct SegmentLines {
    pending: VecDeque<Segment>,
    /// Rotated files up to this seq were listed already.
    listed_upto: u64,
    current: Option<(PathBuf, BufReader<File>, u64)>,
    /// The current line was overlong: skip to its end before the next one.
    skip_rest: bool,
}

impl SegmentLines {
    /// Reads `segments` in order; `listed_upto` is the last seq of the newest
    /// rotated file of the listing they were chosen from ([`listed_upto`]).
    pub fn new(segments: Vec<Segment>, listed_upto: u64) -> SegmentLines {
        SegmentLines {
            pending: segments.into(),
            listed_upto,
            current: None,
            skip_rest: false,
        }
    }

    /// The whole log of `live`, skipping rotated files that end before `min_seq`.
    pub fn from_seq(live: &Path, min_seq: u64) -> std::io::Result<SegmentLines> {
        let listed = segments(live)?;
        let upto = listed_upto(&listed);
        let all = listed
            .into_iter()
            .filter(|s| s.seqs.is_none_or(|(_, last)| last >= min_seq))
            .collect();
        Ok(SegmentLines::new(all, upto))
    }

    /// Rotated files of `live`'s log newer than the listing.
    fn rotated_since(&self, live: &Path) -> std::io::Result<Vec<Segment>> {
        Ok(segments(live)?
            .into_iter()
            .filter(|s| s.seqs.is_some_and(|(first, _)| first > self.listed_upto))
            .collect())
    }

    /// Queues `fresh` rotated files before the live file, which is read after them.
    fn read_first(&mut self, fresh: Vec<Segment>, live: Segment) {
        self.listed_upto = self.listed_upto.max(listed_upto(&fresh));
        self.pending.push_front(live);
        for seg in fresh.into_iter().rev() {
            self.pending.push_front(seg);
        }
    }

    /// Opens the next file; `None` when none is left.
    fn open_next(&mut self) -> Option<Result<(), (PathBuf, std::io::Error)>> {
        loop {
            let seg = self.pending.pop_front()?;
            if seg.seqs.is_some() {
                return Some(match open_regular(&seg.path) {
                    Ok(f) => {
                        self.current = Some((seg.path, BufReader::new(f), 0));
                        Ok(())
                    }
                    Err(e) => Err((seg.path, e)),
                });
            }
            let live = seg.path.clone();
            let fresh = match self.rotated_since(&live) {
                Ok(f) => f,
                Err(e) => return Some(Err((live, e))),
            };
            if !fresh.is_empty() {
                self.read_first(fresh, seg);
                continue;
            }
            let file = match open_live(&live) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Some(Err((live, e))),
            };
            match self.rotated_since(&live) {
                Ok(fresh) if !fresh.is_empty() => self.read_first(fresh, seg),
                Ok(_) => {
                    self.current = Some((live, BufReader::new(file), 0));
                    return Some(Ok(()));
                }
                Err(e) => return Some(Err((live, e))),
            }
        }
    }
}

impl Iterator for SegmentLines {
    type Item = Result<LogLine, (PathBuf, std::io::Error)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.current.is_none()
                && let Err(e) = self.open_next()?
            {
                return Some(Err(e));
            }
            let (path, reader, number) = self.current.as_mut()?;
            if std::mem::take(&mut self.skip_rest)
                && let Err(e) = skip_line(reader)
            {
                let path = path.clone();
                self.current = None;
                return Some(Err((path, e)));
            }
            let mut bytes = Vec::new();
            let mut limited = reader.take(MAX_LINE_BYTES as u64 + 1);
            match limited.read_until(b'\n', &mut bytes) {
                Ok(0) => {
                    self.current = None;
                }
                Ok(_) => {
                    *number += 1;
                    let complete = bytes.last() == Some(&b'\n');
                    let overlong = !complete && bytes.len() > MAX_LINE_BYTES;
                    if complete {
                        bytes.pop();
                    }
                    if overlong {
                        bytes.truncate(MAX_LINE_BYTES);
                        self.skip_rest = true;
                    }
                    return Some(Ok(LogLine {
                        path: path.clone(),
                        number: *number,
                        bytes,
                        complete: complete || overlong,
                        overlong,
                    }));
                }
                Err(e) => {
                    let path = path.clone();
                    self.current = None;
                    return Some(Err((path, e)));
                }
            }
        }
    }
}

/// Opens the live log for reading. A link is followed (`paths.events` may name one),
/// but a FIFO or device there is refused without waiting: opening a FIFO with no
/// writer blocks, so every reader (`events`, `audit verify`, a start) would hang.
pub fn open_live(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

/// Opens a file harnessd wrote itself (a rotated log, a transcript) for reading:
/// anything but a regular file there (a FIFO would block every reader, a link
/// could point anywhere, `/dev/zero` never ends) was put there by someone else,
/// and is refused without being opened through.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => not_regular(),
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

fn not_regular() -> std::io::Error {
    std::io::Error::other(
        "not a regular file (a link, FIFO or device put where harnessd keeps its own files)",
    )
}

/// Reads past the rest of the current line, a buffer at a time.
fn skip_line(reader: &mut BufReader<File>) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            reader.consume(i + 1);
            return Ok(());
        }
        let n = buf.len();
        reader.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotated_files_come_in_seq_order_then_the_live_file() {
        let dir = std::env::temp_dir().join(format!("harnessd-seg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [
            ("events-11-20.jsonl", "b\n"),
            ("events-1-10.jsonl", "a\n"),
            ("events.jsonl", "c\nd"),
            ("events.jsonl.torn-x", "no\n"),
            ("events-x-1.jsonl", "no\n"),
        ] {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let live = dir.join("events.jsonl");
        let lines: Vec<(String, u64, bool)> = SegmentLines::from_seq(&live, 0)
            .unwrap()
            .map(|l| {
                let l = l.unwrap();
                (String::from_utf8(l.bytes).unwrap(), l.number, l.complete)
            })
            .collect();
        assert_eq!(
            lines,
            vec![
                ("a".into(), 1, true),
                ("b".into(), 1, true),
                ("c".into(), 1, true),
                ("d".into(), 2, false)
            ]
        );
        let skipped: Vec<_> = SegmentLines::from_seq(&live, 11).unwrap().collect();
        assert_eq!(skipped.len(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rotation_between_listing_and_reading_loses_no_line() {
        let dir = std::env::temp_dir().join(format!("harnessd-seg-rot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let live = dir.join("events.jsonl");
        std::fs::write(&live, "1\n2\n").unwrap();
        let lines = SegmentLines::from_seq(&live, 0).unwrap();
        // The writer rotates after the listing, before the live file is opened.
        std::fs::rename(&live, dir.join("events-1-2.jsonl")).unwrap();
        std::fs::write(&live, "3\n").unwrap();
        let got: Vec<String> = lines
            .map(|l| String::from_utf8(l.unwrap().bytes).unwrap())
            .collect();
        assert_eq!(got, ["1", "2", "3"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
