//! `harnessd run`'s answers to `ask` calls, on the terminal: the prompt on stderr,
//! the answer read from stdin. A terminal dialogue, so it lives at the edge with
//! the other commands, not in [`crate::approval`], which only defines the seam.

use std::io::{BufRead, IsTerminal, Write};
use std::os::fd::AsFd;

use crate::approval::{AnswerFuture, ApprovalAnswer, Approver, Remember};
use crate::protocol::{ApprovalRequest, Decision};
use crate::text::escape_line;

/// Approvals for `harnessd run`: `--yes` approves everything; otherwise a terminal
/// on stdin is asked; with no terminal, the call is denied.
#[derive(Debug)]
pub struct TerminalApprover {
    yes: bool,
    /// Offers `[a]lways` when set.
    remember: Option<std::sync::Arc<dyn Remember>>,
    /// Serialises prompts; held across the blocking read only.
    lock: tokio::sync::Mutex<()>,
}

impl TerminalApprover {
    /// `yes`: approve every ask-tier call without asking.
    pub fn new(yes: bool) -> TerminalApprover {
        TerminalApprover {
            yes,
            remember: None,
            lock: tokio::sync::Mutex::new(()),
        }
    }
}

impl TerminalApprover {
    /// Offers `[a]lways` at the prompt, remembered through `remember`.
    pub fn with_remember(mut self, remember: std::sync::Arc<dyn Remember>) -> TerminalApprover {
        self.remember = Some(remember);
        self
    }
}

/// What the operator typed at the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Typed {
    Yes,
    No,
    Always,
}

/// Reads an answer: `y`/`yes`, `a`/`always` (only when offered), anything else
/// (an empty line included) is no.
fn typed(line: &str, always_offered: bool) -> Typed {
    match line.trim().to_lowercase().as_str() {
        "y" | "yes" => Typed::Yes,
        "a" | "always" if always_offered => Typed::Always,
        _ => Typed::No,
    }
}

impl Approver for TerminalApprover {
    fn ask<'a>(&'a self, req: &'a ApprovalRequest) -> AnswerFuture<'a> {
        Box::pin(async move {
            if self.yes {
                return ApprovalAnswer {
                    approved: true,
                    decision: Decision::Approved,
                    by: "flag".into(),
                    reason: None,
                    remembered: None,
                };
            }
            if !std::io::stdin().is_terminal() {
                return ApprovalAnswer {
                    approved: false,
                    decision: Decision::Denied,
                    by: "flag".into(),
                    reason: Some(
                        "no terminal to ask on and --yes not given; the operator must approve \
                         this tool in policy or rerun with --yes"
                            .into(),
                    ),
                    remembered: None,
                };
            }
            let _guard = self.lock.lock().await;
            let line = prompt(req, self.remember.is_some()).await;
            let answer = typed(&line, self.remember.is_some());
            let mut remembered = None;
            if let (Typed::Always, Some(remember)) = (answer, &self.remember) {
                match remember.remember(req, "tty").await {
                    Ok(rules) => {
                        let shown: Vec<_> = rules.iter().map(|r| escape_line(r)).collect();
                        let _ = writeln!(std::io::stderr(), "remembered: {}", shown.join(", "));
                        remembered = Some(rules);
                    }
                    // Approved all the same: the operator said yes to this call.
                    Err(e) => {
                        let _ = writeln!(
                            std::io::stderr(),
                            "not remembered ({}); approved this once",
                            crate::text::escape_text(&e)
                        );
                    }
                }
            }
            let approved = answer != Typed::No;
            ApprovalAnswer {
                approved,
                decision: if approved {
                    Decision::Approved
                } else {
                    Decision::Denied
                },
                by: "tty".into(),
                reason: None,
                remembered,
            }
        })
    }
}

/// Shows the call on the terminal and reads one line of answer.
async fn prompt(req: &ApprovalRequest, always: bool) -> String {
    // Every character of the input, escaped and wrapped: what is approved is
    // exactly what is shown (docs/commands.md).
    let width = crate::text::terminal_width(std::io::stderr().as_fd())
        .unwrap_or(crate::text::DEFAULT_WIDTH);
    let choices = if always {
        "[y]es / [n]o / [a]lways"
    } else {
        "[y]es / [n]o"
    };
    let prompt = format!(
        "\n? {} wants to run {} (rule {}):\n{}Approve? {choices} (default no): ",
        escape_line(&req.task_id),
        escape_line(&req.tool),
        escape_line(&req.rule),
        crate::text::render_input(&req.input, width)
    );
    tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(prompt.as_bytes());
        let _ = err.flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        line
    })
    .await
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_is_an_answer_only_where_it_was_offered() {
        assert_eq!(typed("a\n", true), Typed::Always);
        assert_eq!(typed("Always", true), Typed::Always);
        assert_eq!(typed("a\n", false), Typed::No);
        assert_eq!(typed("YES", false), Typed::Yes);
        assert_eq!(typed("\n", true), Typed::No);
    }
}
