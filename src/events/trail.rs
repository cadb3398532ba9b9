//! Reading the audit log back (read-only), across its rotated files: how far given
//! tool calls of one task got, for a resume that must answer calls the transcript
//! left open (docs/operating.md, Resume).
//!
//! The log is streamed one line at a time and only the task's lines about the asked
//! calls are kept, so memory stays bounded by the longest line, not the file.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::{Event, Record};
use crate::protocol::{Decision, Tier};

/// How far one tool call got, as far as the log shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallTrail {
    /// No `tool_requested` for it: nothing was done for it.
    Absent,
    /// Requested, but never allowed to run (no decision yet, awaiting approval,
    /// denied or refused) and never finished.
    Requested,
    /// Allowed (by policy or an approval) and not finished: it may have run in part.
    MayHaveRun,
    /// `tool_finished` is recorded; `ran` says whether it had been allowed to run.
    Finished {
        /// Whether the call was allowed to run before it finished.
        ran: bool,
        /// The process's exit code, when it exited.
        exit_code: Option<i32>,
    },
}

/// Errors reading the log back.
#[derive(Debug, thiserror::Error)]
pub enum TrailError {
    /// The log could not be opened or read.
    #[error("cannot read the audit log {path}: {source}", path = path.display())]
    Io {
        /// The log.
        path: std::path::PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
}

/// What the log says about each of `calls` (tool_use ids) of task `task_id`. A call
/// the log never mentions is [`CallTrail::Absent`]. A missing log is an empty one.
/// When an id occurs more than once, its last `tool_requested` starts it afresh.
pub fn call_trails(
    log: &Path,
    task_id: &str,
    calls: &[String],
) -> Result<HashMap<String, CallTrail>, TrailError> {
    let io = |source| TrailError::Io {
        path: log.to_path_buf(),
        source,
    };
    let wanted: HashSet<&str> = calls.iter().map(String::as_str).collect();
    let mut trails: HashMap<String, CallTrail> = calls
        .iter()
        .map(|c| (c.clone(), CallTrail::Absent))
        .collect();
    // Every file of the log: a task's calls may straddle a rotation.
    let lines = super::segments::SegmentLines::from_seq(log, 0).map_err(io)?;
    // approval_id → tool_use_id: `approval_resolved` names only the approval.
    let mut approvals: HashMap<String, String> = HashMap::new();
    for line in lines {
        let buf = line
            .map_err(|(path, source)| TrailError::Io { path, source })?
            .bytes;
        // Cheap filter before parsing: the task id appears verbatim in its lines.
        if !contains(&buf, task_id.as_bytes()) {
            continue;
        }
        // A line that does not parse (a torn write) says nothing about any call.
        let Some(record) = Record::parse(&buf) else {
            continue;
        };
        if record.task_id.as_deref() != Some(task_id) {
            continue;
        }
        apply(&record.event, &wanted, &mut approvals, &mut trails);
    }
    Ok(trails)
}

/// Moves a call's trail on by one line of its task.
fn apply(
    event: &Event,
    wanted: &HashSet<&str>,
    approvals: &mut HashMap<String, String>,
    trails: &mut HashMap<String, CallTrail>,
) {
    let call = match event {
        Event::ToolRequested { tool_use_id, .. }
        | Event::PolicyDecision { tool_use_id, .. }
        | Event::ApprovalRequested { tool_use_id, .. }
        | Event::ToolFinished { tool_use_id, .. } => tool_use_id.clone(),
        // Lines written before `tool_use_id` was recorded name only the approval.
        Event::ApprovalResolved {
            tool_use_id,
            approval_id,
            ..
        } => {
            if !tool_use_id.is_empty() {
                tool_use_id.clone()
            } else if let Some(call) = approvals.get(approval_id) {
                call.clone()
            } else {
                return;
            }
        }
        _ => return,
    };
    if !wanted.contains(call.as_str()) {
        return;
    }
    let Some(trail) = trails.get_mut(&call) else {
        return;
    };
    let allowed = matches!(
        trail,
        CallTrail::MayHaveRun | CallTrail::Finished { ran: true, .. }
    );
    match event {
        Event::ToolRequested { .. } => *trail = CallTrail::Requested,
        Event::PolicyDecision {
            tier: Tier::Allow, ..
        } => {
            *trail = CallTrail::MayHaveRun;
        }
        Event::ApprovalRequested { approval_id, .. } => {
            approvals.insert(approval_id.clone(), call);
        }
        Event::ApprovalResolved {
            decision: Decision::Approved,
            ..
        } => {
            *trail = CallTrail::MayHaveRun;
        }
        Event::ToolFinished { exit_code, .. } => {
            *trail = CallTrail::Finished {
                ran: allowed,
                exit_code: *exit_code,
            };
        }
        _ => {}
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `line` with every field its type requires, a seq and a ts: the fixtures
    /// name only what the reader looks at.
    pub(super) fn full(line: serde_json::Value) -> serde_json::Value {
        use serde_json::json;
        let base = match line["type"].as_str().unwrap_or("") {
            "tool_requested" => json!({"tool": "run_bash", "input": {}, "input_sha256": "h"}),
            "policy_decision" => {
                json!({"tool": "run_bash", "rule": "r", "subject": null, "profile": "write"})
            }
            "approval_requested" => json!({"tool": "run_bash", "rule": "r"}),
            "approval_resolved" => json!({"by": "tty", "reason": null}),
            "tool_finished" => json!({"tool": "run_bash", "exit_code": null, "duration_ms": 1,
                                      "output_bytes": 0, "truncated": false,
                                      "is_error": false, "output_file": null}),
            _ => json!({}),
        };
        let mut out = json!({"seq": 1, "ts": "t"});
        let map = out.as_object_mut().unwrap();
        map.extend(base.as_object().unwrap().clone());
        map.extend(line.as_object().unwrap().clone());
        out
    }

    fn trails_of(lines: &[serde_json::Value], calls: &[&str]) -> HashMap<String, CallTrail> {
        let path = std::env::temp_dir().join(format!(
            "harnessd-trail-{}-{}.jsonl",
            std::process::id(),
            fastrand::u64(..)
        ));
        let text: String = lines
            .iter()
            .map(|l| format!("{}\n", full(l.clone())))
            .collect();
        std::fs::write(&path, format!("{text}{{\"torn\": ")).unwrap();
        let calls: Vec<String> = calls.iter().map(|c| c.to_string()).collect();
        let out = call_trails(&path, "t1", &calls).unwrap();
        std::fs::remove_file(&path).unwrap();
        out
    }

    #[test]
    fn each_call_gets_how_far_it_got() {
        use serde_json::json;
        let lines = [
            json!({"type": "tool_requested", "task_id": "t1", "tool_use_id": "run"}),
            json!({"type": "policy_decision", "task_id": "t1", "tool_use_id": "run", "tier": "allow"}),
            json!({"type": "tool_requested", "task_id": "t1", "tool_use_id": "ask"}),
            json!({"type": "policy_decision", "task_id": "t1", "tool_use_id": "ask", "tier": "ask"}),
            json!({"type": "approval_requested", "task_id": "t1", "tool_use_id": "ask", "approval_id": "a1"}),
            json!({"type": "tool_requested", "task_id": "t1", "tool_use_id": "ok"}),
            json!({"type": "tool_requested", "task_id": "t1", "tool_use_id": "yes"}),
            json!({"type": "approval_requested", "task_id": "t1", "tool_use_id": "yes", "approval_id": "a2"}),
            json!({"type": "approval_resolved", "task_id": "t1", "approval_id": "a2", "decision": "approved"}),
            json!({"type": "policy_decision", "task_id": "t1", "tool_use_id": "ok", "tier": "allow"}),
            json!({"type": "tool_finished", "task_id": "t1", "tool_use_id": "ok", "exit_code": 3}),
            json!({"type": "tool_requested", "task_id": "t1", "tool_use_id": "no"}),
            json!({"type": "tool_finished", "task_id": "t1", "tool_use_id": "no"}),
            // Another task's line about the same id changes nothing here.
            json!({"type": "policy_decision", "task_id": "t2", "tool_use_id": "ask", "tier": "allow"}),
        ];
        let got = trails_of(&lines, &["run", "ask", "ok", "yes", "no", "never"]);
        assert_eq!(got["run"], CallTrail::MayHaveRun);
        assert_eq!(got["ask"], CallTrail::Requested);
        assert_eq!(got["yes"], CallTrail::MayHaveRun);
        assert_eq!(
            got["ok"],
            CallTrail::Finished {
                ran: true,
                exit_code: Some(3)
            }
        );
        assert_eq!(
            got["no"],
            CallTrail::Finished {
                ran: false,
                exit_code: None
            }
        );
        assert_eq!(got["never"], CallTrail::Absent);
    }

    #[test]
    fn a_call_straddling_a_rotation_is_followed_across_the_files() {
        use serde_json::json;
        let dir = std::env::temp_dir().join(format!(
            "harnessd-trail-rot-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let old = [
            json!({"seq": 1, "type": "tool_requested", "task_id": "t1", "tool_use_id": "c"}),
            json!({"seq": 2, "type": "policy_decision", "task_id": "t1", "tool_use_id": "c", "tier": "allow"}),
        ];
        let text: String = old
            .iter()
            .map(|l| format!("{}\n", full(l.clone())))
            .collect();
        std::fs::write(dir.join("events-1-2.jsonl"), text).unwrap();
        let live = full(
            json!({"seq": 4, "type": "tool_finished", "task_id": "t1", "tool_use_id": "c", "exit_code": 0}),
        );
        std::fs::write(dir.join("events.jsonl"), format!("{live}\n")).unwrap();
        let got = call_trails(&dir.join("events.jsonl"), "t1", &["c".into()]).unwrap();
        assert_eq!(
            got["c"],
            CallTrail::Finished {
                ran: true,
                exit_code: Some(0)
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_log_shows_nothing() {
        let got = call_trails(Path::new("/nonexistent/events.jsonl"), "t1", &["x".into()]);
        assert_eq!(got.unwrap()["x"], CallTrail::Absent);
    }
}
