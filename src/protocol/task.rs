//! Where a task stands and why it stopped (docs/commands.md, docs/api.md), and the exit code
//! `harnessd run` (and `submit --wait`) gives for it. One typed value travels through
//! the transcript, the control API, the clients and the exit code; nothing re-parses
//! a string.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The task's stop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without tools.
    EndTurn,
    /// The turn limit was reached.
    MaxTurns,
    /// The token budget was used up.
    TokenBudget,
    /// The USD budget was used up.
    UsdBudget,
    /// The same tool calls repeated.
    NoProgress,
    /// The model's output was cut.
    MaxTokens,
    /// The model refused.
    Refusal,
    /// Cancelled by the user or a shutdown.
    Cancelled,
    /// API failure after retries, or an internal error.
    Error,
}

impl StopReason {
    /// The name used in events and transcripts.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTurns => "max_turns",
            StopReason::TokenBudget => "token_budget",
            StopReason::UsdBudget => "usd_budget",
            StopReason::NoProgress => "no_progress",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Refusal => "refusal",
            StopReason::Cancelled => "cancelled",
            StopReason::Error => "error",
        }
    }

    /// Exit code of `harnessd run` (docs/commands.md).
    pub fn exit_code(self) -> i32 {
        match self {
            StopReason::EndTurn => 0,
            StopReason::Error => 1,
            StopReason::MaxTurns
            | StopReason::TokenBudget
            | StopReason::UsdBudget
            | StopReason::NoProgress => 3,
            StopReason::MaxTokens | StopReason::Refusal => 4,
            StopReason::Cancelled => 130,
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a task stands (docs/api.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Accepted, waiting for a slot.
    Queued,
    /// Holding a slot: a model request or a tool call is under way.
    Running,
    /// Waiting for a human to answer an `ask` call.
    AwaitingApproval,
    /// Stopped, with a stop reason.
    Finished,
    /// Was running when the daemon died; `resume` continues it.
    Interrupted,
}

impl TaskStatus {
    /// Every status, for metrics that list each one.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::AwaitingApproval,
        TaskStatus::Finished,
        TaskStatus::Interrupted,
    ];

    /// The name used in the API, transcripts and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::AwaitingApproval => "awaiting_approval",
            TaskStatus::Finished => "finished",
            TaskStatus::Interrupted => "interrupted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serde names are the names docs/commands.md, docs/api.md use, and `as_str` agrees.
    #[test]
    fn wire_names_match_as_str() {
        for s in TaskStatus::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for r in [
            StopReason::EndTurn,
            StopReason::MaxTurns,
            StopReason::TokenBudget,
            StopReason::NoProgress,
            StopReason::MaxTokens,
            StopReason::Refusal,
            StopReason::Cancelled,
            StopReason::Error,
        ] {
            let v = serde_json::to_value(r).unwrap();
            assert_eq!(v, r.as_str());
            assert_eq!(serde_json::from_value::<StopReason>(v).unwrap(), r);
        }
    }
}
