//! Why a task stopped (SPEC §6) and the exit code `harnessd run` gives for it.

/// The task's stop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model answered without tools.
    EndTurn,
    /// The turn limit was reached.
    MaxTurns,
    /// The token budget was used up.
    TokenBudget,
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
            StopReason::NoProgress => "no_progress",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Refusal => "refusal",
            StopReason::Cancelled => "cancelled",
            StopReason::Error => "error",
        }
    }

    /// Exit code of `harnessd run` (SPEC §8).
    pub fn exit_code(self) -> i32 {
        match self {
            StopReason::EndTurn => 0,
            StopReason::Error => 1,
            StopReason::MaxTurns | StopReason::TokenBudget | StopReason::NoProgress => 3,
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
