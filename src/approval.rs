//! Approvals of `ask`-tier calls: who is asked and how the answer comes back.
//!
//! [`Approver`] is the seam: `harnessd run` answers on the terminal (or by the
//! `--yes` flag; `crate::commands::terminal_approver`, at the edge, where the
//! terminal is); the daemon answers through its control API. The loop records
//! `approval_requested` before asking and `approval_resolved` after.

use std::future::Future;
use std::pin::Pin;

use crate::protocol::{ApprovalRequest, Decision};

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalAnswer {
    /// Whether the call may run.
    pub approved: bool,
    /// `approved`, `denied` or `timeout`.
    pub decision: Decision,
    /// Who answered: `tty`, `flag`, `uid:N`, `timeout`.
    pub by: String,
    /// A reason for the model, if any.
    pub reason: Option<String>,
    /// The allow rules written to settings.json so that the same call runs
    /// without asking next time (`approve --remember`, the `a` answer).
    pub remembered: Option<Vec<String>>,
}

/// A boxed future, so approvers can be trait objects.
pub type AnswerFuture<'a> = Pin<Box<dyn Future<Output = ApprovalAnswer> + Send + 'a>>;

/// What writes "always allow this call" into the policy: the narrowest allow
/// rules for the call, validated and written atomically, then reloaded. The error
/// says, for the operator, why it could not.
pub type RememberFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + Send + 'a>>;

/// Remembers approved calls as allow rules.
pub trait Remember: Send + Sync {
    /// Adds the rules for `req`'s call; returns them.
    fn remember<'a>(&'a self, req: &'a ApprovalRequest, by: &'a str) -> RememberFuture<'a>;
}

/// Something that can answer approvals.
pub trait Approver: Send + Sync {
    /// Asks about one call and waits for the answer.
    fn ask<'a>(&'a self, req: &'a ApprovalRequest) -> AnswerFuture<'a>;

    /// How long a request asked now may wait before it becomes a denial; `None`
    /// when nothing times it out (a terminal waits for its human).
    fn expires_in(&self) -> Option<std::time::Duration> {
        None
    }
}

impl std::fmt::Debug for dyn Remember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Remember")
    }
}
