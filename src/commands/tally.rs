//! What became of one task's tool calls, counted from its events as `run` and
//! `submit --wait` read them: the closing `calls:` line, and whether `--strict`
//! turns an `end_turn` into exit 5 (docs/commands.md). It only counts; printing the
//! calls is [`super::progress`]'s.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// The exit code of `--strict` when the task ended its turn but a call was denied,
/// refused by the sandbox, or its approval timed out.
pub const EXIT_STRICT: i32 = 5;

/// The exit code the sandbox helper ends with when it refuses to run a call.
const SANDBOX_REFUSED: i64 = crate::sandbox::SETUP_FAILED as i64;

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
    /// Counts what `ev` (one line of the task's audit log) says about a call.
    pub fn observe(&mut self, ev: &Value) {
        let id = |k: &str| ev[k].as_str().unwrap_or_default().to_string();
        match ev["type"].as_str() {
            Some("policy_decision") => match ev["tier"].as_str() {
                Some("allow") => {
                    self.admitted.insert(id("tool_use_id"));
                }
                Some("deny") => {
                    self.refused.insert(id("tool_use_id"));
                }
                _ => {}
            },
            Some("approval_requested") => {
                self.asking.insert(id("approval_id"), id("tool_use_id"));
            }
            Some("approval_resolved") => {
                if let Some(call) = self.asking.remove(&id("approval_id")) {
                    if ev["decision"] == "approved" {
                        self.admitted.insert(call);
                    } else {
                        self.refused.insert(call);
                    }
                }
            }
            Some("tool_finished") => self.finished(ev, &id("tool_use_id")),
            _ => {}
        }
    }

    /// Counts call `id`, which `ev` (its `tool_finished`) ends.
    fn finished(&mut self, ev: &Value, id: &str) {
        let is_error = ev["is_error"] == true;
        if self.refused.remove(id) {
            self.denied += 1;
        } else if self.admitted.remove(id) {
            self.run += 1;
            if is_error {
                self.failed += 1;
                if ev["exit_code"].as_i64() == Some(SANDBOX_REFUSED) {
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
    use serde_json::json;

    use super::*;

    fn tally(events: &[Value]) -> CallTally {
        let mut t = CallTally::default();
        events.iter().for_each(|e| t.observe(e));
        t
    }

    fn decision(id: &str, tier: &str) -> Value {
        json!({"type": "policy_decision", "tool_use_id": id, "tier": tier})
    }

    fn finished(id: &str, is_error: bool, exit: Option<i64>) -> Value {
        json!({"type": "tool_finished", "tool_use_id": id, "is_error": is_error, "exit_code": exit})
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
            json!({"type": "approval_requested", "approval_id": "ap-1", "tool_use_id": "d"}),
            json!({"type": "approval_resolved", "approval_id": "ap-1", "decision": "timeout"}),
            finished("d", true, None),
            decision("e", "ask"),
            json!({"type": "approval_requested", "approval_id": "ap-2", "tool_use_id": "e"}),
            json!({"type": "approval_resolved", "approval_id": "ap-2", "decision": "approved"}),
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
