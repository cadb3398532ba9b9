//! `harnessd submit --wait`: follows one task to its end like `run` does in-process.
//!
//! It reads the task's events as the daemon writes them (never polling), prints
//! each call with its decision in `run`'s words and, the moment the task asks for
//! an approval, what is asked (id, tool, rule, every character of the input,
//! escaped) and the exact commands that answer it, all on stderr. At the end: the
//! answer on stdout, the stop reason, the error and the count of calls on stderr,
//! and the exit code of `run` (docs/commands.md). It must not print the task as a success
//! unless the daemon lists it finished with a stop reason.

use super::error::{CliError, exit};
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::clients::{enc, print_json, warn_unreadable};
use super::listing::print_approval;
use super::tally::CallTally;
use crate::control::ClientError;
use crate::control::client::{self, request_empty};
use crate::events::{Event, Record};
use crate::protocol::{ApprovalList, Decision, Task};
use crate::protocol::{StopReason, TaskStatus};
use crate::text::{escape_line, escape_text};

/// How the commands that answer an approval are spelt: `harnessd`, and
/// `--root DIR` when the client was pointed at a root other than the current
/// directory, so the printed command works pasted into any shell.
#[derive(Debug, Clone)]
pub struct CommandPrefix(String);

impl CommandPrefix {
    /// The prefix for a client run with `--root root`.
    pub fn for_root(root: &Path) -> CommandPrefix {
        if root == Path::new(".") {
            return CommandPrefix("harnessd".into());
        }
        let shown = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        CommandPrefix(format!(
            "harnessd --root {}",
            shell_quote(&shown.display().to_string())
        ))
    }

    /// `harnessd [--root D] approve ID` and the deny command, on one line each.
    pub fn answers(&self, approval: &str) -> String {
        let id = shell_quote(approval);
        format!(
            "  approve: {p} approve {id}\n  always:  {p} approve {id} --remember\n  deny:    {p} deny {id} --reason \"…\"\n",
            p = self.0
        )
    }
}

/// `s` as one shell word: as is when it holds only characters no shell treats
/// specially, otherwise single-quoted. Control characters are escaped afterwards
/// by the printer, like any other text.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Follows task `id` to its end; returns the exit code of `run` (with `strict`,
/// of `run --strict`).
pub async fn wait_for(
    socket: &Path,
    id: &str,
    json_out: bool,
    strict: bool,
    prefix: &CommandPrefix,
) -> Result<ExitCode, CliError> {
    let mut calls = CallTally::default();
    let saw_finished = follow_until_finished(socket, id, prefix, &mut calls).await?;
    let Some(t) = finished_task(socket, id, saw_finished).await? else {
        eprintln!(
            "error: the daemon stopped before task {} finished",
            escape_line(id)
        );
        eprintln!("{}", calls.line());
        return Ok(exit(StopReason::Error.exit_code()));
    };
    if json_out {
        print_json(&t)?;
    } else if let Some(a) = t.answer.as_deref().filter(|a| !a.is_empty()) {
        writeln!(std::io::stdout().lock(), "{}", escape_text(a))?;
    }
    // A finished task without a stop reason is reported as an error, never as
    // success.
    let reason = t.stop_reason.unwrap_or(StopReason::Error);
    eprintln!(
        "[done] {reason} · {} tokens · task {}",
        t.usage.total(),
        escape_line(id)
    );
    if let Some(e) = &t.error {
        eprintln!("error: {}", escape_text(e));
    }
    // Last, so a cron job's log ends with what its agent was let do.
    eprintln!("{}", calls.line());
    Ok(exit(calls.exit_code(reason.exit_code(), strict)))
}

/// How long `submit --wait` lets the daemon's task list catch up with a
/// `task_finished` it has already streamed: the task records the event, and the
/// scheduler marks it finished only once the task has returned.
const SETTLE: Duration = Duration::from_secs(5);

/// Task `id` once the daemon lists it as finished; `None` when it does not (it
/// stopped, forgot the task, or answered with something else), which the caller
/// reports as an error, never as success. After `task_finished` was seen, a task
/// still listed as running is asked again until [`SETTLE`] passes.
pub async fn finished_task(
    socket: &Path,
    id: &str,
    saw_finished: bool,
) -> Result<Option<Task>, ClientError> {
    let path = format!("/v1/tasks/{}", enc(id));
    let deadline = Instant::now() + SETTLE;
    loop {
        match request_empty::<Task>(socket, "GET", &path).await {
            Ok(t) if t.status == TaskStatus::Finished => return Ok(Some(t)),
            Ok(t) if saw_finished && t.status != TaskStatus::Interrupted => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(_) | Err(ClientError::Api { .. } | ClientError::Decode { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// Reads task `id`'s events until `task_finished` (or the end of the stream),
/// showing each call with its decision as `run` does, and each approval it waits
/// for as it is requested and what became of it; counts the calls in `calls`.
/// Returns whether `task_finished` came.
async fn follow_until_finished(
    socket: &Path,
    id: &str,
    prefix: &CommandPrefix,
    calls: &mut CallTally,
) -> Result<bool, CliError> {
    // Only this task's events come, and its children's (their approvals are
    // waited for too): the stream is filtered by task; `text=1` adds the model's
    // text as it streams.
    let path = format!("/v1/events?task={}&follow=1&text=1", enc(id));
    let mut events = client::LineStream::open(socket, &path).await?;
    let mut shown: HashSet<String> = HashSet::new();
    let mut mid_text = false;
    while let Some(line) = events.next_line().await? {
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if event["type"] == "text_delta" {
            super::progress::stream_text(&event, &mut mid_text);
            continue;
        }
        // Every other line starts on a line of its own.
        if std::mem::take(&mut mid_text) {
            eprintln!();
        }
        // Not an event: the stream's own notice of a line it could not read.
        if event["type"] == "unreadable_line" {
            warn_unreadable(&event);
            continue;
        }
        let Some(record) = Record::from_value(event) else {
            continue;
        };
        calls.observe_in(record.task_id.as_deref(), &record.event);
        match &record.event {
            Event::ApprovalRequested { approval_id, .. } if !shown.contains(approval_id) => {
                show_approval(socket, &record, prefix).await?;
                shown.insert(approval_id.clone());
            }
            Event::ApprovalResolved {
                approval_id,
                decision,
                by,
                remembered,
                ..
            } => show_resolved(approval_id, *decision, by, remembered.as_deref()),
            // The stream holds the children's lines too: only the task's own end
            // ends the wait.
            Event::TaskFinished { .. } if record.task_id.as_deref() == Some(id) => {
                return Ok(true);
            }
            // Each call and its decision, in `run`'s words.
            Event::ToolRequested { .. }
            | Event::PolicyDecision { .. }
            | Event::ToolFinished { .. } => {
                if let Some(l) = super::progress::line(&record.event, &mut 0) {
                    let l = super::progress::of_task(&record, &l);
                    let _ = writeln!(std::io::stderr().lock(), "{l}");
                }
            }
            _ => {}
        }
    }
    Ok(false)
}

/// One line saying how an approval was answered, and by whom.
fn show_resolved(approval_id: &str, decision: Decision, by: &str, remembered: Option<&[String]>) {
    let remembered = remembered
        .map(|rules| {
            let rules: Vec<String> = rules.iter().map(|r| escape_line(r).into_owned()).collect();
            format!("; remembered: {}", rules.join(", "))
        })
        .unwrap_or_default();
    let _ = writeln!(
        std::io::stderr().lock(),
        "approval {} {decision} by {}{remembered}",
        escape_line(approval_id),
        escape_line(by)
    );
}

/// How long the approval named by an `approval_requested` event may take to be
/// listed: the event is recorded (and streamed) just before the approval is put
/// where `GET /v1/approvals` finds it.
const LISTED_WITHIN: Duration = Duration::from_secs(3);

/// Prints on stderr the approval that `event` (an `approval_requested`) names:
/// every character of its input, from the daemon's list, and the commands that
/// answer it. If the list never shows it (answered already, or the daemon
/// refuses the list), what the event says is printed instead, commands included.
async fn show_approval(
    socket: &Path,
    record: &Record,
    prefix: &CommandPrefix,
) -> Result<(), CliError> {
    let Event::ApprovalRequested {
        approval_id: approval,
        tool,
        rule,
        ..
    } = &record.event
    else {
        return Ok(());
    };
    let deadline = Instant::now() + LISTED_WITHIN;
    let listed = loop {
        let list = match request_empty::<ApprovalList>(socket, "GET", "/v1/approvals").await {
            Ok(list) => list,
            Err(ClientError::Api { .. } | ClientError::Decode { .. }) => break None,
            Err(e) => return Err(e.into()),
        };
        if let Some(a) = list
            .approvals
            .into_iter()
            .find(|a| &a.request.approval_id == approval)
        {
            break Some(a);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let width = crate::text::terminal_width(std::os::fd::AsFd::as_fd(&std::io::stderr()))
        .unwrap_or(crate::text::DEFAULT_WIDTH);
    let mut err = std::io::stderr().lock();
    writeln!(err, "waiting for approval:")?;
    match &listed {
        Some(a) => print_approval(&mut err, a, width)?,
        None => {
            writeln!(
                err,
                "{}  {}  {}  rule {}  (input: see `harnessd approvals`)",
                escape_line(approval),
                escape_line(record.task_id.as_deref().unwrap_or("?")),
                escape_line(tool),
                escape_line(rule)
            )?;
        }
    }
    write!(err, "{}", escape_text(&prefix.answers(approval)))?;
    err.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_commands_name_the_root_only_when_one_was_given() {
        let here = CommandPrefix::for_root(Path::new("."));
        assert!(
            here.answers("ap-1")
                .contains("  approve: harnessd approve ap-1\n")
        );
        let there = CommandPrefix::for_root(Path::new("/nonexistent/a b"));
        assert!(
            there
                .answers("ap-1")
                .contains("harnessd --root '/nonexistent/a b' approve ap-1 --remember"),
            "{}",
            there.answers("ap-1")
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
