//! Reading the audit log back (read-only) from its last `checkpoint`: what it says
//! of each task since, for the start-up check that brings transcripts in line with
//! the log (docs/events.md, "The log is the truth").
//!
//! A `checkpoint` line says every transcript agreed with the log up to it, so only
//! the lines after the last one can hold what a transcript lacks. It is found by
//! reading the files backwards from the end, a window at a time; the lines after
//! it are streamed forward, and only those of task lifecycle and tool calls are
//! parsed.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::{CallTrail, Event, Record, TrailError};
use crate::protocol::{Decision, StopReason, Tier, Usage};

/// How much of a file is read at a time, backwards, looking for a checkpoint.
const WINDOW: u64 = 256 * 1024;

/// The bytes a `checkpoint` line holds (serde_json writes no spaces).
const CHECKPOINT: &[u8] = b"\"type\":\"checkpoint\"";
/// Longer than any `checkpoint` line: the backward search carries no more of a
/// line cut by a window, so one huge line costs linear time, not quadratic.
const CHECKPOINT_LINE_MAX: usize = 64 * 1024;

/// The `task_finished` the log holds for a task.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedLine {
    /// Its stop reason.
    pub stop_reason: StopReason,
    /// Its error, if any.
    pub error: Option<String>,
    /// The task's tokens.
    pub usage: Usage,
    /// Its cost, when known.
    pub usd: Option<f64>,
}

/// What the log says of one task since the checkpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskSince {
    /// Its last `task_finished`, unless a start or resume came after it.
    pub finished: Option<FinishedLine>,
    /// Its last lifecycle line is `task_started`: a run of it began, whatever
    /// its transcript says (a kill can land before the run saves it `running`).
    pub started: bool,
    /// How far each of its calls seen since the checkpoint got.
    pub calls: HashMap<String, CallTrail>,
    /// Of each call whose `tool_finished` is seen: its `output_bytes` and
    /// `is_error`.
    pub outputs: HashMap<String, (u64, bool)>,
    /// approval_id → tool_use_id, for `approval_resolved` lines that name only
    /// the approval.
    approvals: HashMap<String, String>,
}

/// The log since its last checkpoint: the checkpoint's seq (0: none, the whole log
/// was read) and what it says of each task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Since {
    /// The seq of the checkpoint read from (0: the log has none).
    pub from_seq: u64,
    /// By task id.
    pub tasks: HashMap<String, TaskSince>,
}

impl Since {
    /// How far call `id` of task `task` got, as far as the lines since the
    /// checkpoint show: a call they never mention is absent when the whole log was
    /// read, and may have run otherwise (it may have begun before the checkpoint).
    pub fn call(&self, task: &str, id: &str) -> CallTrail {
        let seen = self.tasks.get(task).and_then(|t| t.calls.get(id)).cloned();
        seen.unwrap_or(if self.from_seq == 0 {
            CallTrail::Absent
        } else {
            CallTrail::MayHaveRun
        })
    }
}

/// Reads the log whose live file is `log` from its last checkpoint on. A missing
/// log is an empty one; a line that does not parse says nothing.
pub fn since_checkpoint(log: &Path) -> Result<Since, TrailError> {
    let io = |source| TrailError::Io {
        path: log.to_path_buf(),
        source,
    };
    let from_seq = last_checkpoint(log).map_err(io)?;
    let mut since = Since {
        from_seq,
        tasks: HashMap::new(),
    };
    let lines = super::segments::SegmentLines::from_seq(log, from_seq).map_err(io)?;
    for line in lines {
        let buf = line
            .map_err(|(path, source)| TrailError::Io { path, source })?
            .bytes;
        let Some(record) = Record::parse(&buf) else {
            continue;
        };
        if record.seq <= from_seq {
            continue;
        }
        apply(&mut since, record);
    }
    Ok(since)
}

/// A line of type `kind` this version cannot read (a later version's value, a hand
/// edit): said, and a `task_finished` still ends its task — taken for nothing, it
/// would leave a finished task resumable.
fn unreadable(entry: &mut TaskSince, kind: &str, seq: u64) {
    tracing::warn!(
        seq,
        "events.jsonl: a {kind:?} line that this version cannot read"
    );
    if kind == "task_finished" {
        entry.finished = Some(FinishedLine {
            stop_reason: StopReason::Error,
            error: Some(format!(
                "its task_finished (seq {seq}) cannot be read by this version"
            )),
            usage: Usage::default(),
            usd: None,
        });
    }
}

fn apply(since: &mut Since, record: Record) {
    let Some(task) = record.task_id else { return };
    let entry = since.tasks.entry(task).or_default();
    if let Some(kind) = &record.unread {
        unreadable(entry, kind, record.seq);
        return;
    }
    match record.event {
        Event::TaskFinished {
            stop_reason,
            error,
            usage,
            usd,
            ..
        } => {
            entry.finished = Some(FinishedLine {
                stop_reason,
                error,
                usage,
                usd,
            });
        }
        Event::TaskStarted { .. } => {
            entry.finished = None;
            entry.started = true;
        }
        Event::TaskResumed { .. } | Event::TaskRequeued { .. } => {
            entry.finished = None;
            entry.started = false;
        }
        Event::ToolRequested { tool_use_id, .. } => {
            entry.calls.insert(tool_use_id, CallTrail::Requested);
        }
        Event::PolicyDecision {
            tool_use_id,
            tier: Tier::Allow,
            ..
        } => {
            entry.calls.insert(tool_use_id, CallTrail::MayHaveRun);
        }
        Event::ToolFinished {
            tool_use_id: id,
            exit_code,
            output_bytes,
            is_error,
            ..
        } => {
            // Begun before the checkpoint (not seen since): it may have run.
            let ran = entry
                .calls
                .get(&id)
                .is_none_or(|t| *t == CallTrail::MayHaveRun);
            entry.outputs.insert(id.clone(), (output_bytes, is_error));
            entry
                .calls
                .insert(id, CallTrail::Finished { ran, exit_code });
        }
        Event::ApprovalRequested {
            approval_id,
            tool_use_id,
            ..
        } => {
            entry.approvals.insert(approval_id, tool_use_id);
        }
        Event::ApprovalResolved {
            approval_id,
            decision: Decision::Approved,
            ..
        } => {
            // Lines written before `tool_use_id` was recorded name only the
            // approval: the call is the one its request named.
            if let Some(id) = entry.approvals.get(&approval_id).cloned() {
                entry.calls.insert(id, CallTrail::MayHaveRun);
            }
        }
        _ => {}
    }
}

/// The seq of the last `checkpoint` line of the log, looked for from the end of
/// the live file, then of each rotated file, newest first; 0 when there is none.
pub fn last_checkpoint(log: &Path) -> std::io::Result<u64> {
    let mut files = super::segments::segments(log)?;
    files.reverse();
    for file in files {
        let mut f = match super::segments::open_regular(&file.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if let Some(seq) = last_checkpoint_in(&mut f)? {
            return Ok(seq);
        }
    }
    Ok(0)
}

/// The seq of the last checkpoint line in `file`, read backwards a window at a
/// time (a line cut by a window's start is read whole with the next window).
fn last_checkpoint_in(file: &mut std::fs::File) -> std::io::Result<Option<u64>> {
    let mut end = file.metadata()?.len();
    let mut carry: Vec<u8> = Vec::new();
    while end > 0 {
        let start = end.saturating_sub(WINDOW);
        file.seek(SeekFrom::Start(start))?;
        let mut buf = vec![0; (end - start) as usize];
        file.read_exact(&mut buf)?;
        let window = buf.len();
        buf.extend_from_slice(&carry);
        // The first piece may be the end of a line that began earlier: kept for
        // the next window, unless this is the file's start. Only the window is
        // searched (the carry holds no newline), so a long line costs linear time.
        let first_nl = if start == 0 {
            0
        } else {
            buf[..window]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(buf.len(), |i| i + 1)
        };
        for line in buf[first_nl..].rsplit(|&b| b == b'\n') {
            if !contains(line, CHECKPOINT) {
                continue;
            }
            if let Some(Record {
                seq,
                event: Event::Checkpoint { .. },
                ..
            }) = Record::parse(line)
            {
                return Ok(Some(seq));
            }
        }
        carry = buf[..first_nl].to_vec();
        // A line this long is no checkpoint (one is a few hundred bytes): what is
        // left of it is never whole again, so it cannot parse as one either.
        if carry.len() > CHECKPOINT_LINE_MAX {
            carry.clear();
        }
        end = start;
    }
    Ok(None)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn only_lines_after_the_last_checkpoint_count() {
        let dir = std::env::temp_dir().join(format!("harnessd-since-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("events.jsonl");
        let usage = json!({"input_tokens": 0, "output_tokens": 0,
                           "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
        let finished = |seq: u64, task: &str, reason: &str, error: Value| {
            json!({"seq": seq, "ts": "t", "type": "task_finished", "task_id": task,
                   "stop_reason": reason, "turns": 1, "usage": usage, "usd": null,
                   "duration_ms": 1, "error": error})
        };
        let tool_finished = |seq: u64, id: &str, exit_code: Value| {
            json!({"seq": seq, "ts": "t", "type": "tool_finished", "task_id": "t",
                   "tool_use_id": id, "tool": "run_bash", "exit_code": exit_code,
                   "duration_ms": 1, "output_bytes": 0, "truncated": false,
                   "is_error": false, "output_file": null})
        };
        let mut lines = vec![
            finished(1, "old", "end_turn", Value::Null),
            json!({"seq": 2, "ts": "t", "type": "checkpoint", "reason": "periodic"}),
            json!({"seq": 3, "ts": "t", "type": "tool_requested", "task_id": "t",
                   "tool_use_id": "a", "tool": "run_bash", "input": {}, "input_sha256": "h"}),
            json!({"seq": 4, "ts": "t", "type": "policy_decision", "task_id": "t",
                   "tool_use_id": "a", "tool": "run_bash", "tier": "allow", "rule": "r",
                   "subject": null, "profile": "write"}),
            tool_finished(5, "a", json!(0)),
            tool_finished(6, "b", Value::Null),
            finished(7, "t", "error", json!("disk")),
        ];
        // Enough filler that the checkpoint is several windows back.
        for i in 0..3000 {
            lines.insert(
                2,
                json!({"seq": 0, "type": "filler", "pad": "x".repeat(200 + i % 7)}),
            );
        }
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&log, text).unwrap();
        let since = since_checkpoint(&log).unwrap();
        assert_eq!(since.from_seq, 2);
        assert!(!since.tasks.contains_key("old"));
        let t = &since.tasks["t"];
        assert_eq!(t.finished.as_ref().unwrap().error.as_deref(), Some("disk"));
        let ran = |exit_code| CallTrail::Finished {
            ran: true,
            exit_code,
        };
        assert_eq!(since.call("t", "a"), ran(Some(0)));
        // Requested before the checkpoint: it may have run.
        assert_eq!(since.call("t", "b"), ran(None));
        assert_eq!(since.call("t", "c"), CallTrail::MayHaveRun);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A later version's stop reason (or a value this version cannot read) in a
    /// `task_finished` still ends the task: read as nothing, it would leave a
    /// finished task resumable at the next start.
    #[test]
    fn an_unreadable_task_finished_still_ends_its_task() {
        let dir = std::env::temp_dir().join(format!("harnessd-since-later-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("events.jsonl");
        let lines = [
            json!({"seq": 1, "ts": "t", "type": "task_started", "task_id": "t",
                   "prompt": "p", "model": "m", "source": "cli"}),
            json!({"seq": 2, "ts": "t", "type": "task_finished", "task_id": "t",
                   "stop_reason": "stopped_by_a_later_version", "turns": 1, "usage": {},
                   "usd": null, "duration_ms": 1, "error": null}),
            json!({"seq": 3, "ts": "t", "type": "event_of_a_later_version", "task_id": "u"}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&log, text).unwrap();
        let since = since_checkpoint(&log).unwrap();
        let finished = since.tasks["t"].finished.as_ref().expect("t ended");
        assert_eq!(finished.stop_reason, StopReason::Error);
        assert!(
            finished.error.as_deref().unwrap().contains("seq 2"),
            "{finished:?}"
        );
        assert!(since.tasks["u"].finished.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_checkpoint_before_a_line_of_many_windows_is_found() {
        let dir = std::env::temp_dir().join(format!("harnessd-since-long-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("events.jsonl");
        let checkpoint = json!({"seq": 7, "ts": "t", "type": "checkpoint", "reason": "periodic"});
        // A 20 MiB line after it, ending with text that looks like a checkpoint
        // once cut, and a torn 3 MiB tail without a newline.
        let long = json!({"seq": 8, "type": "model_response", "text": "y".repeat(20 << 20)});
        let text = format!(
            "{checkpoint}\n{long}\n{}\"type\":\"checkpoint\",\"seq\":99",
            "z".repeat(3 << 20)
        );
        std::fs::write(&log, text).unwrap();
        assert_eq!(last_checkpoint(&log).unwrap(), 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
