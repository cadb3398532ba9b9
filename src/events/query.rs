//! Queries over the audit log (docs/commands.md): `events --task --type --tool --since
//! --until --grep`, and the same as `/v1/events` query parameters. The files are
//! streamed one line at a time, so memory is bounded by the longest line; rotated
//! files that end before `--since` (or before the seq a follower already has) are
//! not read past their last line, and those that start after `--until` not at all.
//! A line that does not parse is handed to the caller with its file and line
//! number, never dropped.

use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;

use super::segments::{LogLine, Segment, SegmentLines, segments};

/// A bad query: each names the parameter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    /// `--type` names no event harnessd writes.
    #[error("unknown event type {given:?}; valid types: {}", valid.join(", "))]
    UnknownType {
        /// What was given.
        given: String,
        /// Every valid type.
        valid: Vec<String>,
    },
    /// `--since`/`--until` is neither a time nor a duration.
    #[error(
        "--{key} {given:?}: expected an RFC 3339 time (2026-11-30T12:00:00Z), a date \
         (2026-11-30) or a duration back from now (90s, 30m, 12h, 7d, 2w)"
    )]
    BadTime {
        /// `since` or `until`.
        key: &'static str,
        /// What was given.
        given: String,
    },
    /// `--grep` is not a regular expression.
    #[error("--grep {given:?}: {error}")]
    BadRegex {
        /// What was given.
        given: String,
        /// Why it does not compile.
        error: String,
    },
}

/// What a query asks for, as given on the command line or in the URL.
#[derive(Debug, Clone, Default)]
pub struct QueryParams {
    /// Only this task and its children (the tasks it delegated to, and theirs).
    pub task: Option<String>,
    /// Only this event type.
    pub kind: Option<String>,
    /// Only events about this tool.
    pub tool: Option<String>,
    /// Only events at or after this time or duration back.
    pub since: Option<String>,
    /// Only events at or before this time or duration back.
    pub until: Option<String>,
    /// Only lines whose text matches this regular expression.
    pub grep: Option<String>,
}

/// A checked query.
#[derive(Debug, Clone, Default)]
pub struct Query {
    task: Option<String>,
    kind: Option<String>,
    tool: Option<String>,
    /// As `ts` strings: the log's fixed format compares in time order.
    since: Option<String>,
    until: Option<String>,
    grep: Option<regex::Regex>,
    /// Only lines after this seq (a follower catching up).
    pub after_seq: u64,
    /// Only lines up to this seq (what a follower reads from the files before it
    /// switches to the live stream).
    pub until_seq: Option<u64>,
}

/// `ts` format of the log.
fn ts_string(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A time, a date or a duration back from `now`.
fn parse_time(key: &'static str, given: &str, now: DateTime<Utc>) -> Result<String, QueryError> {
    let bad = || QueryError::BadTime {
        key,
        given: given.to_string(),
    };
    if let Ok(t) = DateTime::parse_from_rfc3339(given) {
        return Ok(ts_string(t.with_timezone(&Utc)));
    }
    if let Ok(d) = NaiveDate::parse_from_str(given, "%Y-%m-%d") {
        let t = d.and_hms_opt(0, 0, 0).ok_or_else(bad)?.and_utc();
        return Ok(ts_string(t));
    }
    let split = given.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let n: i64 = given[..split].parse().map_err(|_| bad())?;
    let secs = match &given[split..] {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    let back = chrono::Duration::try_seconds(n.saturating_mul(secs)).ok_or_else(bad)?;
    Ok(ts_string(now.checked_sub_signed(back).ok_or_else(bad)?))
}

impl Query {
    /// Checks `p`: a known type, times, a regex.
    pub fn new(p: QueryParams) -> Result<Query, QueryError> {
        let valid = super::event_types();
        if let Some(k) = &p.kind
            && !valid.contains(k)
        {
            return Err(QueryError::UnknownType {
                given: k.clone(),
                valid,
            });
        }
        let now = Utc::now();
        let since = p.since.as_deref().map(|s| parse_time("since", s, now));
        let until = p.until.as_deref().map(|s| parse_time("until", s, now));
        let grep = p.grep.as_deref().map(|g| {
            regex::Regex::new(g).map_err(|e| QueryError::BadRegex {
                given: g.to_string(),
                error: e.to_string(),
            })
        });
        Ok(Query {
            task: p.task,
            kind: p.kind,
            tool: p.tool,
            since: since.transpose()?,
            until: until.transpose()?,
            grep: grep.transpose()?,
            after_seq: 0,
            until_seq: None,
        })
    }

    /// Whether the raw line (before parsing) can match: cheap tests that spare
    /// parsing most lines of a large log.
    fn may_match(&self, bytes: &[u8]) -> bool {
        let has = |needle: &str| memfind(bytes, needle.as_bytes());
        self.task.as_deref().is_none_or(has)
            && self.kind.as_deref().is_none_or(has)
            && self.tool.as_deref().is_none_or(has)
    }

    /// Whether the parsed event `ev`, whose text is `text`, matches.
    pub fn matches(&self, ev: &Value, text: &str) -> bool {
        let field = |k: &str| ev.get(k).and_then(Value::as_str);
        let ts = field("ts").unwrap_or("");
        let seq = ev.get("seq").and_then(Value::as_u64).unwrap_or(0);
        seq > self.after_seq
            && self.until_seq.is_none_or(|u| seq <= u)
            // A task's children are part of its work: their lines come too.
            && self.task.as_deref().is_none_or(|t| {
                field("task_id").is_some_and(|id| crate::protocol::tree::within_tree(id, t))
            })
            && self
                .kind
                .as_deref()
                .is_none_or(|k| field("type") == Some(k))
            && self
                .tool
                .as_deref()
                .is_none_or(|t| field("tool") == Some(t))
            && self.since.as_deref().is_none_or(|s| ts >= s)
            && self.until.as_deref().is_none_or(|u| ts <= u)
            && self.grep.as_ref().is_none_or(|g| g.is_match(text))
    }

    /// Whether a rotated file can hold a matching line, from its name and its
    /// first and last lines' `ts`.
    fn wants(&self, seg: &Segment) -> bool {
        let Some((first, last)) = seg.seqs else {
            return true;
        };
        if last <= self.after_seq || self.until_seq.is_some_and(|u| first > u) {
            return false;
        }
        let since = self
            .since
            .clone()
            .max(self.task.as_deref().and_then(task_floor));
        if since.is_none() && self.until.is_none() {
            return true;
        }
        let (first_ts, last_ts) = edge_ts(&seg.path);
        let before = since
            .as_deref()
            .zip(last_ts.as_deref())
            .is_some_and(|(s, l)| l < s);
        let after = self
            .until
            .as_deref()
            .zip(first_ts.as_deref())
            .is_some_and(|(u, f)| f > u);
        !(before || after)
    }
}

/// How far before the second its id names a task's lines may be stamped: a
/// clock stepped back by up to this much still finds every line.
const TASK_FLOOR_SLACK_MINUTES: i64 = 60;

/// The earliest `ts` a line of `task` can have: its id names its creation second
/// (`t-YYYYMMDDTHHMMSSZ-…`), and nothing of a task is written before it exists,
/// so `--task` skips rotated files that end earlier (less
/// [`TASK_FLOOR_SLACK_MINUTES`]). `None` for an id of another form: every file is
/// read.
fn task_floor(task: &str) -> Option<String> {
    let stamp = task.strip_prefix("t-")?.get(..16)?;
    let created = chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%SZ")
        .ok()?
        .and_utc();
    let floor = created.checked_sub_signed(chrono::Duration::minutes(TASK_FLOOR_SLACK_MINUTES))?;
    Some(ts_string(floor))
}

/// The `ts` of a file's first and last lines (read from its two ends only).
fn edge_ts(path: &Path) -> (Option<String>, Option<String>) {
    use std::io::{BufRead, Read, Seek, SeekFrom};
    let ts_of = |line: &[u8]| {
        serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|v| v.get("ts").and_then(Value::as_str).map(str::to_string))
    };
    // As the lines are read: only a regular file, and never more of a line than
    // a reader holds (a forged file's one huge line).
    let Ok(mut file) = super::segments::open_regular(path) else {
        return (None, None);
    };
    let mut first = Vec::new();
    let _ = std::io::BufReader::new(&file)
        .take(super::segments::MAX_LINE_BYTES as u64)
        .read_until(b'\n', &mut first);
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut tail = Vec::new();
    if file
        .seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))
        .is_ok()
    {
        let _ = file.read_to_end(&mut tail);
    }
    let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
    let last = body
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(body, |i| &body[i + 1..]);
    (ts_of(&first), ts_of(last))
}

fn memfind(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// One result of a query.
#[derive(Debug)]
pub enum Found {
    /// A matching line: its exact bytes (no newline), parsed.
    Line(Vec<u8>, Value),
    /// A line that does not parse (or a file that cannot be read on).
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Line number, from 1 (0: the file itself).
        line: u64,
        /// Why.
        error: String,
    },
}

/// Runs `query` over the log whose live file is `live`, streaming.
pub fn run(live: &Path, query: Query) -> std::io::Result<impl Iterator<Item = Found>> {
    let listed = segments(live)?;
    let upto = super::segments::listed_upto(&listed);
    let wanted: Vec<Segment> = listed.into_iter().filter(|s| query.wants(s)).collect();
    Ok(
        SegmentLines::new(wanted, upto).filter_map(move |l| match l {
            Err((path, e)) => Some(Found::Unreadable {
                path,
                line: 0,
                error: format!("cannot read on: {e}"),
            }),
            Ok(line) => filter_line(&query, line),
        }),
    )
}

fn filter_line(query: &Query, line: LogLine) -> Option<Found> {
    if line.overlong {
        return Some(Found::Unreadable {
            path: line.path,
            line: line.number,
            error: format!(
                "a line longer than {} MiB (foreign: harnessd never writes one); skipped",
                super::segments::MAX_LINE_BYTES >> 20
            ),
        });
    }
    // A torn line can only be parsed to find it is torn: it always goes through.
    // A line the cheap test rules out is still checked to be JSON (validated, not
    // built): an unreadable line is reported whatever the filter, never skipped.
    if line.complete && !query.may_match(&line.bytes) {
        return match serde_json::from_slice::<serde::de::IgnoredAny>(&line.bytes) {
            Ok(_) => None,
            Err(e) => Some(Found::Unreadable {
                path: line.path,
                line: line.number,
                error: e.to_string(),
            }),
        };
    }
    match serde_json::from_slice::<Value>(&line.bytes) {
        Ok(ev) if line.complete => {
            let text = String::from_utf8_lossy(&line.bytes);
            query
                .matches(&ev, &text)
                .then(|| Found::Line(line.bytes, ev))
        }
        Ok(_) => Some(Found::Unreadable {
            path: line.path,
            line: line.number,
            error: "partial last line (no newline)".into(),
        }),
        Err(e) => Some(Found::Unreadable {
            path: line.path,
            line: line.number,
            error: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_dates_and_durations_parse_and_bad_ones_name_the_key() {
        let now = DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            parse_time("since", "7d", now).unwrap(),
            "2026-11-23T12:00:00.000Z"
        );
        assert_eq!(
            parse_time("since", "2026-11-01", now).unwrap(),
            "2026-11-01T00:00:00.000Z"
        );
        assert_eq!(
            parse_time("until", "2026-11-30T13:00:00+01:00", now).unwrap(),
            "2026-11-30T12:00:00.000Z"
        );
        let e = parse_time("until", "yesterday", now).unwrap_err();
        assert!(e.to_string().starts_with("--until \"yesterday\""), "{e}");
    }

    #[test]
    fn rotated_files_outside_the_time_range_are_not_read() {
        let dir = std::env::temp_dir().join(format!("harnessd-q-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let line = |seq: u64, ts: &str| {
            format!(r#"{{"seq":{seq},"ts":"{ts}","type":"daemon_stopping","reason":"x"}}"#)
        };
        // A middle line that does not parse: reported only if the file is read.
        let old = format!(
            "{}\nnot json\n{}\n",
            line(1, "2026-01-01T00:00:00.000Z"),
            line(2, "2026-01-02T00:00:00.000Z")
        );
        std::fs::write(dir.join("events-1-2.jsonl"), old).unwrap();
        let mid = format!(
            "{}\n{}\n",
            line(3, "2026-06-01T00:00:00.000Z"),
            line(4, "2026-06-02T00:00:00.000Z")
        );
        std::fs::write(dir.join("events-3-4.jsonl"), mid).unwrap();
        std::fs::write(
            dir.join("events.jsonl"),
            format!("{}\n", line(5, "2026-11-01T00:00:00.000Z")),
        )
        .unwrap();
        let seqs = |since: &str, until: &str| -> Vec<String> {
            let q = Query::new(QueryParams {
                since: Some(since.into()),
                until: Some(until.into()),
                ..QueryParams::default()
            })
            .unwrap();
            run(&dir.join("events.jsonl"), q)
                .unwrap()
                .map(|f| match f {
                    Found::Line(_, ev) => ev["seq"].to_string(),
                    Found::Unreadable { line, .. } => format!("unreadable {line}"),
                })
                .collect()
        };
        assert_eq!(seqs("2026-05-01", "2026-12-01"), ["3", "4", "5"]);
        assert_eq!(seqs("2026-06-02", "2026-06-30"), ["4"]);
        // The old file is in range: read, and its bad line reported.
        assert_eq!(seqs("2025-12-01", "2026-01-01"), ["1", "unreadable 2"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_task_query_skips_files_that_end_before_the_task_existed() {
        let dir = std::env::temp_dir().join(format!("harnessd-qt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let id = "t-20260601T120000Z-abcdef";
        let line = |seq: u64, ts: &str, task: &str| {
            format!(r#"{{"seq":{seq},"ts":"{ts}","task_id":"{task}","type":"task_started"}}"#)
        };
        // An old file with a bad line: reported only if the file is read. It ends
        // before the task was created, less the slack.
        let old = format!("not json\n{}\n", line(2, "2026-06-01T10:59:00.000Z", "t-x"));
        std::fs::write(dir.join("events-1-2.jsonl"), old).unwrap();
        // Ends within the slack: read (a clock stepped back could stamp the task so).
        let near = format!("{}\n", line(3, "2026-06-01T11:30:00.000Z", id));
        std::fs::write(dir.join("events-3-3.jsonl"), near).unwrap();
        let live = dir.join("events.jsonl");
        std::fs::write(
            &live,
            format!("{}\n", line(4, "2026-06-01T12:00:01.000Z", id)),
        )
        .unwrap();
        let found = |task: &str| -> Vec<String> {
            let q = Query::new(QueryParams {
                task: Some(task.into()),
                ..QueryParams::default()
            })
            .unwrap();
            run(&live, q)
                .unwrap()
                .map(|f| match f {
                    Found::Line(_, ev) => ev["seq"].to_string(),
                    Found::Unreadable { line, .. } => format!("unreadable {line}"),
                })
                .collect()
        };
        assert_eq!(found(id), ["3", "4"]);
        // An id of another form gives no floor: every file is read.
        assert_eq!(found("custom"), ["unreadable 1"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unknown_type_lists_the_valid_ones() {
        let e = Query::new(QueryParams {
            kind: Some("tool_request".into()),
            ..QueryParams::default()
        })
        .unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("\"tool_request\"") && s.contains("tool_requested"),
            "{s}"
        );
    }
}
