//! Approvals of `ask`-tier calls: who is asked and how the answer comes back.
//!
//! [`Approver`] is the seam: `harnessd run` answers on the terminal (or by the
//! `--yes` flag); the daemon will answer through its control API. The loop records
//! `approval_requested` before asking and `approval_resolved` after.

use std::future::Future;
use std::io::{BufRead, IsTerminal, Write};
use std::os::fd::AsFd;
use std::pin::Pin;

use serde_json::Value;

use crate::text::escape_line;

/// One call waiting for a human.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ApprovalRequest {
    /// Approval id.
    pub approval_id: String,
    /// The task that made the call.
    pub task_id: String,
    /// The call.
    pub tool_use_id: String,
    /// Tool name.
    pub tool: String,
    /// The call's input.
    pub input: Value,
    /// The rule that asked.
    pub rule: String,
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalAnswer {
    /// Whether the call may run.
    pub approved: bool,
    /// `approved`, `denied` or `timeout`.
    pub decision: &'static str,
    /// Who answered: `tty`, `flag`, `uid:N`, `timeout`.
    pub by: String,
    /// A reason for the model, if any.
    pub reason: Option<String>,
}

/// A boxed future, so approvers can be trait objects.
pub type AnswerFuture<'a> = Pin<Box<dyn Future<Output = ApprovalAnswer> + Send + 'a>>;

/// Something that can answer approvals.
pub trait Approver: Send + Sync {
    /// Asks about one call and waits for the answer.
    fn ask<'a>(&'a self, req: &'a ApprovalRequest) -> AnswerFuture<'a>;
}

/// Approvals for `harnessd run`: `--yes` approves everything; otherwise a terminal
/// on stdin is asked; with no terminal, the call is denied.
#[derive(Debug)]
pub struct TerminalApprover {
    yes: bool,
    /// Serialises prompts; held across the blocking read only.
    lock: tokio::sync::Mutex<()>,
}

impl TerminalApprover {
    /// `yes`: approve every ask-tier call without asking.
    pub fn new(yes: bool) -> TerminalApprover {
        TerminalApprover {
            yes,
            lock: tokio::sync::Mutex::new(()),
        }
    }
}

impl Approver for TerminalApprover {
    fn ask<'a>(&'a self, req: &'a ApprovalRequest) -> AnswerFuture<'a> {
        Box::pin(async move {
            if self.yes {
                return ApprovalAnswer {
                    approved: true,
                    decision: "approved",
                    by: "flag".into(),
                    reason: None,
                };
            }
            if !std::io::stdin().is_terminal() {
                return ApprovalAnswer {
                    approved: false,
                    decision: "denied",
                    by: "flag".into(),
                    reason: Some(
                        "no terminal to ask on and --yes not given; the operator must approve \
                         this tool in policy or rerun with --yes"
                            .into(),
                    ),
                };
            }
            let _guard = self.lock.lock().await;
            // Every character of the input, escaped and wrapped: what is approved is
            // exactly what is shown (SPEC §8).
            let width = crate::text::terminal_width(std::io::stderr().as_fd())
                .unwrap_or(crate::text::DEFAULT_WIDTH);
            let prompt = format!(
                "\n? {} wants to run {} (rule {}):\n{}Approve? [y/N] ",
                escape_line(&req.task_id),
                escape_line(&req.tool),
                escape_line(&req.rule),
                crate::text::render_input(&req.input, width)
            );
            let answer = tokio::task::spawn_blocking(move || {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(prompt.as_bytes());
                let _ = err.flush();
                let mut line = String::new();
                let _ = std::io::stdin().lock().read_line(&mut line);
                line
            })
            .await
            .unwrap_or_default();
            let approved = matches!(answer.trim().to_lowercase().as_str(), "y" | "yes");
            ApprovalAnswer {
                approved,
                decision: if approved { "approved" } else { "denied" },
                by: "tty".into(),
                reason: None,
            }
        })
    }
}
