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

use serde::Deserialize;

use super::{CallTrail, TrailError};
use crate::protocol::Usage;

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
    pub stop_reason: String,
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
    /// How far each of its calls seen since the checkpoint got.
    pub calls: HashMap<String, CallTrail>,
    /// Of each call whose `tool_finished` is seen: its `output_bytes` and
    /// `is_error`.
    pub outputs: HashMap<String, (u64, bool)>,
    /// approval_id → tool_use_id: `approval_resolved` names only the approval.
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

/// The fields of a line this reader looks at.
#[derive(Deserialize)]
struct Line {
    seq: Option<u64>,
    #[serde(rename = "type")]
    kind: String,
    task_id: Option<String>,
    tool_use_id: Option<String>,
    tier: Option<String>,
    exit_code: Option<i32>,
    stop_reason: Option<String>,
    error: Option<String>,
    usage: Option<Usage>,
    usd: Option<f64>,
    output_bytes: Option<u64>,
    is_error: Option<bool>,
    approval_id: Option<String>,
    decision: Option<String>,
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
        let Ok(line) = serde_json::from_slice::<Line>(&buf) else {
            continue;
        };
        if line.seq.is_none_or(|s| s <= from_seq) {
            continue;
        }
        apply(&mut since, line);
    }
    Ok(since)
}

fn apply(since: &mut Since, line: Line) {
    let Some(task) = line.task_id else { return };
    let entry = since.tasks.entry(task).or_default();
    match (line.kind.as_str(), line.tool_use_id) {
        ("task_finished", _) => {
            entry.finished = Some(FinishedLine {
                stop_reason: line.stop_reason.unwrap_or_else(|| "error".into()),
                error: line.error,
                usage: line.usage.unwrap_or_default(),
                usd: line.usd,
            });
        }
        ("task_started" | "task_resumed" | "task_requeued", _) => entry.finished = None,
        ("tool_requested", Some(id)) => {
            entry.calls.insert(id, CallTrail::Requested);
        }
        ("policy_decision", Some(id)) if line.tier.as_deref() == Some("allow") => {
            entry.calls.insert(id, CallTrail::MayHaveRun);
        }
        ("tool_finished", Some(id)) => {
            // Begun before the checkpoint (not seen since): it may have run.
            let ran = entry
                .calls
                .get(&id)
                .is_none_or(|t| *t == CallTrail::MayHaveRun);
            let exit_code = line.exit_code;
            let output = (line.output_bytes.unwrap_or(0), line.is_error == Some(true));
            entry.outputs.insert(id.clone(), output);
            entry
                .calls
                .insert(id, CallTrail::Finished { ran, exit_code });
        }
        ("approval_requested", Some(id)) => {
            if let Some(approval) = line.approval_id {
                entry.approvals.insert(approval, id);
            }
        }
        ("approval_resolved", None) if line.decision.as_deref() == Some("approved") => {
            let call = line
                .approval_id
                .and_then(|a| entry.approvals.get(&a).cloned());
            if let Some(id) = call {
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
            let seq = serde_json::from_slice::<Line>(line)
                .ok()
                .filter(|l| l.kind == "checkpoint")
                .and_then(|l| l.seq);
            if seq.is_some() {
                return Ok(seq);
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
    use serde_json::json;

    #[test]
    fn only_lines_after_the_last_checkpoint_count() {
        let dir = std::env::temp_dir().join(format!("harnessd-since-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("events.jsonl");
        let mut lines = vec![
            json!({"seq": 1, "type": "task_finished", "task_id": "old", "stop_reason": "end_turn"}),
            json!({"seq": 2, "type": "checkpoint", "reason": "periodic"}),
            json!({"seq": 3, "type": "tool_requested", "task_id": "t", "tool_use_id": "a"}),
            json!({"seq": 4, "type": "policy_decision", "task_id": "t", "tool_use_id": "a", "tier": "allow"}),
            json!({"seq": 5, "type": "tool_finished", "task_id": "t", "tool_use_id": "a", "exit_code": 0}),
            json!({"seq": 6, "type": "tool_finished", "task_id": "t", "tool_use_id": "b"}),
            json!({"seq": 7, "type": "task_finished", "task_id": "t", "stop_reason": "error", "error": "disk"}),
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

    #[test]
    fn a_checkpoint_before_a_line_of_many_windows_is_found() {
        let dir = std::env::temp_dir().join(format!("harnessd-since-long-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("events.jsonl");
        let checkpoint = json!({"seq": 7, "type": "checkpoint", "reason": "periodic"});
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
