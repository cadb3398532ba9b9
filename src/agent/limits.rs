//! The limits that stop a task before its calls run: the turn limit, the token
//! and USD budgets, and no progress (the same calls asked for turn after turn).
//! A limit that stops the task answers the calls it leaves unrun.

use serde_json::{Value, json};

use super::{Halt, StopReason, TaskRun};
use crate::config::{Loaded, LoopConfig};
use crate::llm::ToolUse;

/// The repeat counter of the no-progress limit: the last turn's call signature and
/// how many turns in a row asked for exactly those calls.
#[derive(Default)]
pub(super) struct Repeats {
    last_signature: Option<String>,
    count: u32,
}

impl Repeats {
    /// Counts this turn's calls; returns how many turns in a row made them.
    fn observe(&mut self, uses: &[ToolUse]) -> u32 {
        let signature = call_signature(uses);
        self.count = if self.last_signature.as_ref() == Some(&signature) {
            self.count + 1
        } else {
            1
        };
        self.last_signature = Some(signature);
        self.count
    }
}

/// Canonical signature of a turn's tool calls, order ignored.
fn call_signature(uses: &[ToolUse]) -> String {
    let mut parts: Vec<String> = uses
        .iter()
        .map(|u| format!("{}\u{0}{}", u.name, canonical(&u.input)))
        .collect();
    parts.sort();
    parts.join("\u{1}")
}

/// JSON with object keys sorted, so equal inputs compare equal.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", json!(k), canonical(&map[*k])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            format!(
                "[{}]",
                items.iter().map(canonical).collect::<Vec<_>>().join(",")
            )
        }
        other => other.to_string(),
    }
}

/// The budget (tokens, or US dollars) that `spent` has used up, with why, if
/// any; `model` names the task's model when its cost is unknown.
pub(super) fn budget_used_up(
    spent: super::Spent,
    limits: &LoopConfig,
    model: &str,
) -> Option<(StopReason, String)> {
    if spent.usage.total() >= limits.token_budget {
        let why = format!(
            "not executed: the task's token budget ({} tokens) is used up; the task \
             stops here",
            limits.token_budget
        );
        return Some((StopReason::TokenBudget, why));
    }
    let budget = limits.usd_budget?;
    // A cost that is not known (a model without a price, chosen per task)
    // cannot be held to a budget: the task stops rather than run unbounded.
    let why = match spent.usd {
        Some(spent) if spent >= budget => format!(
            "not executed: the task's USD budget (${budget}) is used up (${spent:.4} \
             spent); the task stops here"
        ),
        Some(_) => return None,
        None => format!(
            "not executed: the task's cost is unknown (no price for model {model:?}), so \
             its USD budget (${budget}) cannot be kept; the task stops here"
        ),
    };
    Some((StopReason::UsdBudget, why))
}

impl TaskRun<'_> {
    /// The task's turn limit: its own (submitted with the task, or kept in its
    /// transcript), else `loop.max_turns`.
    pub(super) fn max_turns(&self, loaded: &Loaded) -> u32 {
        self.spec
            .max_turns
            .or(self.transcript.max_turns)
            .unwrap_or(loaded.config.loop_.max_turns)
    }

    /// The budget (tokens, or US dollars) the task has used up, with why, if any.
    /// Checked before calls run, after them (a child's spending counts), and before
    /// a `pause_turn` is sent again. What counts is the whole tree's spending: the
    /// task at the top, its children and theirs, so no child outspends its parent.
    pub(super) fn budget_used_up(&self, limits: &LoopConfig) -> Option<(StopReason, String)> {
        budget_used_up(self.env.tree.total(), limits, &self.transcript.model)
    }

    /// The limits checked before calls run: token budget, no progress, turn limit
    /// (`last_turn`). A limit that stops the task answers the calls unexecuted.
    pub(super) async fn check_limits(
        &mut self,
        uses: &[ToolUse],
        limits: &LoopConfig,
        repeats: &mut Repeats,
        last_turn: bool,
    ) -> Result<(), Halt> {
        if let Some((reason, why)) = self.budget_used_up(limits) {
            self.unexecuted(uses, &why).await?;
            return Err(Halt::stop(reason));
        }
        let repeated = repeats.observe(uses);
        if repeated >= limits.no_progress_repeats {
            let why = format!(
                "not executed: the same tool calls were requested {repeated} turns in a row \
                 without progress; the task stops here"
            );
            self.unexecuted(uses, &why).await?;
            return Err(Halt::stop(StopReason::NoProgress));
        }
        if last_turn {
            self.unexecuted(uses, "not executed: the task's turn limit was reached")
                .await?;
            return Err(Halt::stop(StopReason::MaxTurns));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str, input: Value) -> ToolUse {
        ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        }
    }

    #[test]
    fn signature_ignores_order_and_key_order() {
        let a = vec![
            call("1", "read_file", json!({"path": "a", "limit": 2})),
            call("2", "list_dir", json!({})),
        ];
        let b = vec![
            call("9", "list_dir", json!({})),
            call("8", "read_file", json!({"limit": 2, "path": "a"})),
        ];
        assert_eq!(call_signature(&a), call_signature(&b));
        let c = vec![call("1", "read_file", json!({"path": "b"}))];
        assert_ne!(call_signature(&a), call_signature(&c));
    }
}
