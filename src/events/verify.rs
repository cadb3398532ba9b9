//! `audit verify`: checks every line's `seq` and `prev` over every file of the
//! log in order (docs/events.md). Streams the files with one line of lookahead, so memory
//! holds two lines whatever the log's size; the lookahead tells an edited line (the
//! next line's `prev` no longer matches it) from a forged or reordered one.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::GENESIS;
use super::segments::{LogLine, SegmentLines};

/// An intact log.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Lines checked.
    pub lines: u64,
    /// Files read.
    pub files: u64,
    /// The last line's seq and hash: the chain head, to compare with the one the
    /// daemon wrote to the diagnostic log.
    pub head: Option<(u64, String)>,
    /// Where the chain begins when earlier lines (written by a version without
    /// `prev`) precede it: file, line number, seq.
    pub chain_begins: Option<(PathBuf, u64, u64)>,
    /// Lines before the chain begins.
    pub unchained: u64,
    /// Gaps the daemon recorded (`events_gap`): the file it wrote to was removed,
    /// replaced or cut, and the lines named are not in the files. The chain is
    /// checked on from each gap line, which chains to the last line lost.
    pub gaps: Vec<RecordedGap>,
}

/// Lines missing from the log, as an `events_gap` line records them.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedGap {
    /// The file holding the `events_gap` line.
    pub path: PathBuf,
    /// Its line number, from 1.
    pub line: u64,
    /// Its seq.
    pub seq: u64,
    /// The first seq missing (one past the last line before it in the files).
    pub first_missing: u64,
    /// The last seq missing: the last line the daemon wrote before the gap.
    pub last_missing: u64,
}

/// The first thing wrong with a log.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}:{line}: seq {}: {what}", path.display(), seq.map_or("?".to_string(), |s| s.to_string()))]
pub struct Break {
    /// The file.
    pub path: PathBuf,
    /// Line number in it, from 1.
    pub line: u64,
    /// The line's seq, when it has one.
    pub seq: Option<u64>,
    /// What is wrong.
    pub what: String,
}

/// Why verification did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The log was altered.
    #[error("{0}")]
    Broken(Break),
}

/// The two fields checked; everything else in a line is skipped unparsed.
#[derive(Deserialize)]
struct Chained {
    seq: Option<u64>,
    prev: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    last_seq: Option<u64>,
}

/// One line as the checks see it.
struct Checked {
    path: PathBuf,
    number: u64,
    seq: Option<u64>,
    prev: Option<String>,
    hash: String,
    /// For an `events_gap` line: the last seq it says was written before it.
    gap_after: Option<u64>,
    /// Why it cannot be checked (torn, unparseable, no seq).
    unreadable: Option<String>,
}

impl Checked {
    fn from_line(line: LogLine) -> Checked {
        let hash = crate::protocol::sha256_hex(&line.bytes);
        let parsed = serde_json::from_slice::<Chained>(&line.bytes);
        let unreadable = match (&parsed, line.complete) {
            _ if line.overlong => Some(format!(
                "foreign line: longer than {} MiB, which harnessd never writes",
                super::segments::MAX_LINE_BYTES >> 20
            )),
            (_, false) => Some("truncated: the last line has no newline".to_string()),
            (Err(e), _) => Some(format!("unparseable line (edited or foreign): {e}")),
            (Ok(c), _) if c.seq.is_none() => Some("foreign line: it has no seq".to_string()),
            _ => None,
        };
        let (seq, prev, gap_after) = parsed.map_or((None, None, None), |c| {
            let gap = (c.kind.as_deref() == Some("events_gap")).then_some(c.last_seq);
            (c.seq, c.prev, gap.flatten())
        });
        Checked {
            path: line.path,
            number: line.number,
            seq,
            prev,
            hash,
            gap_after,
            unreadable,
        }
    }

    fn broken(&self, what: impl Into<String>) -> VerifyError {
        VerifyError::Broken(Break {
            path: self.path.clone(),
            line: self.number,
            seq: self.seq,
            what: what.into(),
        })
    }
}

/// A chain head recorded elsewhere (the diagnostic log, journald): the seq of a
/// line and the SHA-256 of its bytes, as `harnessd` logs them at start, stop and
/// hourly. A log rewritten whole, chain and all, or cut after that line, no
/// longer holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The line's seq.
    pub seq: u64,
    /// The hex SHA-256 of its exact bytes.
    pub hash: String,
}

impl std::str::FromStr for Head {
    type Err = String;

    /// `SEQ:HASH` or `SEQ HASH`, as the diagnostic line prints them.
    fn from_str(s: &str) -> Result<Head, String> {
        let (seq, hash) = s
            .trim()
            .split_once([':', ' '])
            .ok_or_else(|| format!("{s:?}: expected SEQ:HASH (as logged at start and stop)"))?;
        let seq = seq
            .trim()
            .parse()
            .map_err(|_| format!("{seq:?}: the seq is not a number"))?;
        let hash = hash.trim().to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{hash:?}: expected 64 hex digits"));
        }
        Ok(Head { seq, hash })
    }
}

/// Verifies the log whose live file is `live`.
pub fn verify(live: &Path) -> Result<Report, VerifyError> {
    verify_against(live, None)
}

/// Verifies the log whose live file is `live` and, with `expected`, that it still
/// holds that line, unchanged.
pub fn verify_against(live: &Path, expected: Option<&Head>) -> Result<Report, VerifyError> {
    let lines = SegmentLines::from_seq(live, 0).map_err(|source| VerifyError::Io {
        path: live.to_path_buf(),
        source,
    })?;
    let mut lines = lines
        .map(|l| {
            l.map(Checked::from_line)
                .map_err(|(path, source)| VerifyError::Io { path, source })
        })
        .peekable();
    let mut report = Report {
        lines: 0,
        files: 0,
        head: None,
        chain_begins: None,
        unchained: 0,
        gaps: Vec::new(),
    };
    let mut last: Option<Checked> = None;
    // `0:GENESIS` is the head logged for an empty log: no line to find.
    let mut head_found = expected.is_none_or(|h| h.seq == 0 && h.hash == GENESIS);
    while let Some(cur) = lines.next() {
        let cur = cur?;
        // Before the lookahead: after an overlong line it would read the rest.
        if let Some(why) = &cur.unreadable {
            return Err(cur.broken(why.clone()));
        }
        let next = match lines.peek() {
            Some(Ok(n)) => Some(n),
            _ => None,
        };
        check(last.as_ref(), &cur, next, &mut report)?;
        if let Some(head) = expected
            && cur.seq == Some(head.seq)
            && cur.hash != head.hash
        {
            return Err(cur.broken(format!(
                "rewritten: this line's hash is {}, the head logged for seq {} was {}",
                cur.hash, head.seq, head.hash
            )));
        }
        head_found |= expected.is_some_and(|h| cur.seq == Some(h.seq));
        if last.as_ref().is_none_or(|l| l.path != cur.path) {
            report.files += 1;
        }
        report.lines += 1;
        report.head = cur.seq.map(|s| (s, cur.hash.clone()));
        last = Some(cur);
    }
    match expected {
        Some(head) if !head_found => Err(head_missing(head, &report, last, live)),
        _ => Ok(report),
    }
}

/// The log does not hold the expected head's line: cut before it, or rewritten
/// with seqs that pass over it (a fresh chain numbered past the head verifies on
/// its own, so meeting no line of that seq is itself the failure).
fn head_missing(head: &Head, report: &Report, last: Option<Checked>, live: &Path) -> VerifyError {
    let ends = report.head.as_ref().map(|(s, _)| *s);
    let what = if ends.is_none_or(|s| s < head.seq) {
        format!(
            "truncated: the log ends before seq {}, whose hash was logged as the head",
            head.seq
        )
    } else {
        format!(
            "rewritten: no line has seq {}, whose hash was logged as the head",
            head.seq
        )
    };
    VerifyError::Broken(Break {
        path: last.map_or_else(|| live.to_path_buf(), |l| l.path),
        line: report.lines,
        seq: ends,
        what,
    })
}

/// Checks one line against the one before it, looking at the one after it to
/// say what happened.
fn check(
    last: Option<&Checked>,
    cur: &Checked,
    next: Option<&Checked>,
    report: &mut Report,
) -> Result<(), VerifyError> {
    if let Some(why) = &cur.unreadable {
        return Err(cur.broken(why.clone()));
    }
    let seq = cur.seq.unwrap_or(0);
    let last_seq = last.and_then(|l| l.seq).unwrap_or(0);
    if last.is_some() && seq <= last_seq {
        return Err(cur.broken(format!(
            "reordered or duplicated: seq {seq} comes after seq {last_seq}"
        )));
    }
    let Some(prev) = &cur.prev else {
        if report.chain_begins.is_some() {
            return Err(cur.broken("foreign line: it has no prev, after the chain began"));
        }
        report.unchained += 1;
        return check_gap(last, cur);
    };
    if report.chain_begins.is_none() {
        report.chain_begins = Some((cur.path.clone(), cur.number, seq));
    }
    let expected = last.map_or(GENESIS, |l| l.hash.as_str());
    if prev == expected {
        return check_gap(last, cur);
    }
    if let Some(gap) = recorded_gap(last, cur) {
        report.gaps.push(gap);
        return Ok(());
    }
    Err(explain_mismatch(last, cur, next))
}

/// An `events_gap` line after which the chain goes on: it follows the line it
/// names as the last one written (seq), past every line still in the files, so
/// the lines between are missing, and on the record as missing. Whether its
/// `prev` is the lost line's hash cannot be checked (the line is gone); the lines
/// after it are checked against it as any.
fn recorded_gap(last: Option<&Checked>, cur: &Checked) -> Option<RecordedGap> {
    let last_missing = cur.gap_after?;
    let seq = cur.seq?;
    let first_missing = last.and_then(|l| l.seq).map_or(1, |s| s + 1);
    (seq == last_missing.checked_add(1)? && first_missing <= last_missing).then(|| RecordedGap {
        path: cur.path.clone(),
        line: cur.number,
        seq,
        first_missing,
        last_missing,
    })
}

/// Seq must go up by one: a gap with an intact chain is a line deleted from a
/// log written before the chain began.
fn check_gap(last: Option<&Checked>, cur: &Checked) -> Result<(), VerifyError> {
    match (last.and_then(|l| l.seq), cur.seq) {
        (Some(l), Some(s)) if s != l + 1 => Err(cur.broken(format!(
            "deleted: seq jumps from {l} to {s}; the line(s) between are missing"
        ))),
        _ => Ok(()),
    }
}

/// `cur.prev` does not match the line before: say which line is at fault.
fn explain_mismatch(last: Option<&Checked>, cur: &Checked, next: Option<&Checked>) -> VerifyError {
    let seq = cur.seq.unwrap_or(0);
    let Some(last) = last else {
        return cur.broken(
            "the first line's prev is not the genesis hash: earlier lines or files are missing",
        );
    };
    let last_seq = last.seq.unwrap_or(0);
    if let Some(n) = next
        && n.seq.is_some_and(|s| s < seq)
    {
        return cur.broken(format!(
            "reordered: seq {seq} comes before seq {} on the next line",
            n.seq.unwrap_or(0)
        ));
    }
    if seq > last_seq + 1 {
        return cur.broken(format!(
            "deleted: seq jumps from {last_seq} to {seq} and prev does not match the line before"
        ));
    }
    match next {
        Some(n) if n.prev.as_deref() == Some(cur.hash.as_str()) => {
            last.broken("edited: this line's hash does not match the next line's prev")
        }
        Some(n) if n.prev.as_deref() == Some(last.hash.as_str()) => {
            cur.broken("foreign line inserted: the lines around it chain to each other")
        }
        Some(_) => cur.broken("foreign line: its prev does not match the line before"),
        None => cur.broken(
            "foreign line at the end: its prev does not match the line before \
             (or the line before was edited)",
        ),
    }
}
