//! What became of one task's tool calls, counted from its events as `run` and
//! `submit --wait` read them: the closing `calls:` line, and whether `--strict`
//! turns an `end_turn` into exit 5 (docs/commands.md). It only counts; printing the
//! calls is [`super::progress`]'s.

use std::collections::{HashMap, HashSet};

use crate::events::Event;
use crate::protocol::{Decision, Tier};

/// The exit code of `--strict` when the task ended its turn but a call was denied,
/// refused by the sandbox, or its approval timed out.
pub const EXIT_STRICT: i32 = 5;

/// The exit code the sandbox helper ends with when it refuses to run a call.
const SANDBOX_REFUSED: i32 = crate::sandbox::SETUP_FAILED;

/// The calls of one task so far. Memory is bounded by the calls in flight: a call's
/// entries go when its `tool_finished` comes.
#[derive(Debug, Default)]
pub struct CallTally {
    /// Calls allowed by the policy or approved, by tool_use_id, until they finish.
    admitted: HashSet<String>,
    /// Calls denied by the policy or not approved, by tool_use_id, until they finish.
    refused: HashSet<String>,
    /// Pending approvals: approval_id → the call's tool_use_id.
    asking: HashMap<String, String>,
    /// Calls that were admitted and ended.
    pub run: u64,
    /// Calls denied by the policy or not approved (denied, timed out, cancelled).
    pub denied: u64,
    /// Calls whose result was an error: a failed run, the sandbox refusing it, or a
    /// call refused before the policy (unknown tool, invalid input, the turn's limit).
    pub failed: u64,
    /// Calls the sandbox refused to start.
    pub sandbox_refused: u64,
}

impl CallTally {
    /// Counts what `ev` (one event of the task's audit log) says about a call.
    pub fn observe(&mut self, ev: &Event) {
        self.observe_in(None, ev);
    }

    /// [`CallTally::observe`] for a line of task `task` of a tree: ids are unique
    /// within one task only, so a child's call reusing its parent's id is a call
    /// of its own.
    pub fn observe_in(&mut self, task: Option<&str>, ev: &Event) {
        let call = |id: &String| match task {
            Some(t) => format!("{t}\u{0}{id}"),
            None => id.clone(),
        };
        match ev {
            Event::PolicyDecision {
                tool_use_id, tier, ..
            } => match tier {
                Tier::Allow => {
                    self.admitted.insert(call(tool_use_id));
                }
                Tier::Deny => {
                    self.refused.insert(call(tool_use_id));
                }
                Tier::Ask => {}
            },
            Event::ApprovalRequested {
                approval_id,
                tool_use_id,
                ..
            } => {
                self.asking.insert(approval_id.clone(), call(tool_use_id));
            }
            Event::ApprovalResolved {
                approval_id,
                decision,
                ..
            } => {
                if let Some(call) = self.asking.remove(approval_id) {
                    if *decision == Decision::Approved {
                        self.admitted.insert(call);
                    } else {
                        self.refused.insert(call);
                    }
                }
            }
            Event::ToolFinished {
                tool_use_id,
                exit_code,
                is_error,
                ..
            } => self.finished(&call(tool_use_id), *exit_code, *is_error),
            _ => {}
        }
    }

    /// Counts call `id`, which its `tool_finished` (`exit_code`, `is_error`) ends.
    fn finished(&mut self, id: &str, exit_code: Option<i32>, is_error: bool) {
        if self.refused.remove(id) {
            self.denied += 1;
        } else if self.admitted.remove(id) {
            self.run += 1;
            if is_error {
                self.failed += 1;
                if exit_code == Some(SANDBOX_REFUSED) {
                    self.sandbox_refused += 1;
                }
            }
        } else if is_error {
            self.failed += 1;
        }
    }

    /// The closing line: `calls: 3 run, 1 denied, 1 failed`.
    pub fn line(&self) -> String {
        format!(
            "calls: {} run, {} denied, {} failed",
            self.run, self.denied, self.failed
        )
    }

    /// The exit code with `--strict` applied to `code` (the stop reason's): an
    /// `end_turn` (0) with a call denied, not approved or refused by the sandbox
    /// becomes [`EXIT_STRICT`]; any other code stands.
    pub fn exit_code(&self, code: i32, strict: bool) -> i32 {
        if strict && code == 0 && self.denied + self.sandbox_refused > 0 {
            EXIT_STRICT
        } else {
            code
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Each line read back through the types, as the clients read them.
    fn tally(events: &[Value]) -> CallTally {
        let mut t = CallTally::default();
        for e in events {
            let ev: Event = serde_json::from_value(e.clone()).expect("a whole event");
            assert_ne!(ev, Event::Unknown, "{e}");
            t.observe(&ev);
        }
        t
    }

    fn decision(id: &str, tier: &str) -> Value {
        json!({"type": "policy_decision", "tool_use_id": id, "tool": "run_bash",
            "tier": tier, "rule": "r", "subject": null})
    }

    fn finished(id: &str, is_error: bool, exit: Option<i32>) -> Value {
        json!({"type": "tool_finished", "tool_use_id": id, "tool": "run_bash",
            "is_error": is_error, "exit_code": exit, "duration_ms": 1, "output_bytes": 0,
            "truncated": false, "output_file": null})
    }

    fn requested(approval: &str, id: &str) -> Value {
        json!({"type": "approval_requested", "approval_id": approval, "tool_use_id": id,
            "tool": "run_bash", "rule": "r"})
    }

    fn resolved(approval: &str, decision: &str) -> Value {
        json!({"type": "approval_resolved", "approval_id": approval, "decision": decision,
            "by": "tty", "reason": null})
    }

    #[test]
    fn each_call_is_counted_once_by_what_became_of_it() {
        let t = tally(&[
            decision("a", "allow"),
            finished("a", false, Some(0)),
            decision("b", "allow"),
            finished("b", true, Some(1)),
            decision("c", "deny"),
            finished("c", true, None),
            decision("d", "ask"),
            requested("ap-1", "d"),
            resolved("ap-1", "timeout"),
            finished("d", true, None),
            decision("e", "ask"),
            requested("ap-2", "e"),
            resolved("ap-2", "approved"),
            finished("e", false, Some(0)),
            // An unknown tool: answered before any policy decision.
            finished("f", true, None),
        ]);
        assert_eq!(t.line(), "calls: 3 run, 2 denied, 2 failed");
        assert_eq!(t.exit_code(0, false), 0);
        assert_eq!(t.exit_code(0, true), EXIT_STRICT);
        // A harness limit or an error keeps its own code.
        assert_eq!(t.exit_code(3, true), 3);
        assert!(t.admitted.is_empty() && t.refused.is_empty() && t.asking.is_empty());
    }

    #[test]
    fn strict_fails_on_a_sandbox_refusal_but_not_on_a_failed_run() {
        let failed = tally(&[decision("a", "allow"), finished("a", true, Some(1))]);
        assert_eq!(failed.exit_code(0, true), 0);
        let refused = tally(&[
            decision("a", "allow"),
            finished("a", true, Some(SANDBOX_REFUSED)),
        ]);
        assert_eq!(refused.line(), "calls: 1 run, 0 denied, 1 failed");
        assert_eq!(refused.exit_code(0, true), EXIT_STRICT);
    }
}
