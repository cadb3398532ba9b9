//! The set of files that make up the audit log: the rotated files
//! `events-<first_seq>-<last_seq>.jsonl` next to the live file, oldest first, then
//! the live file itself (SPEC §7). Every reader lists the set here, so that none
//! forgets a file, and reads it through [`SegmentLines`], one line at a time.

use std::fs::File;
use std::io::{BufRead, BufReader};
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
}

/// The lines of a set of segments, in order, streamed: memory holds one line.
pub struct SegmentLines {
    pending: std::vec::IntoIter<Segment>,
    current: Option<(PathBuf, BufReader<File>, u64)>,
}

impl SegmentLines {
    /// Reads `segments` in order. A file that vanished since it was listed (a
    /// rotation in between) is looked up again by its rotated name by the caller;
    /// here it is an error.
    pub fn new(segments: Vec<Segment>) -> SegmentLines {
        SegmentLines {
            pending: segments.into_iter(),
            current: None,
        }
    }

    /// The whole log of `live`, skipping rotated files that end before `min_seq`.
    pub fn from_seq(live: &Path, min_seq: u64) -> std::io::Result<SegmentLines> {
        let all = segments(live)?
            .into_iter()
            .filter(|s| s.seqs.is_none_or(|(_, last)| last >= min_seq))
            .collect();
        Ok(SegmentLines::new(all))
    }
}

impl Iterator for SegmentLines {
    type Item = Result<LogLine, (PathBuf, std::io::Error)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.current.is_none() {
                let seg = self.pending.next()?;
                match File::open(&seg.path) {
                    Ok(f) => self.current = Some((seg.path, BufReader::new(f), 0)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && seg.seqs.is_none() => {
                        continue;
                    }
                    Err(e) => return Some(Err((seg.path, e))),
                }
            }
            let (path, reader, number) = self.current.as_mut()?;
            let mut bytes = Vec::new();
            match reader.read_until(b'\n', &mut bytes) {
                Ok(0) => {
                    self.current = None;
                }
                Ok(_) => {
                    *number += 1;
                    let complete = bytes.last() == Some(&b'\n');
                    if complete {
                        bytes.pop();
                    }
                    return Some(Ok(LogLine {
                        path: path.clone(),
                        number: *number,
                        bytes,
                        complete,
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
}
