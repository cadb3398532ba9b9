//! `harnessd show ID` (docs/commands.md): one task from its transcript and the audit log,
//! with no daemon needed: prompt, model, status, usage, duration, then each tool
//! call (tool, full input, decision and rule, approver, exit, duration, output
//! file), then the answer under its own `answer:` label, every line indented. The transcript holds the full inputs and the answer;
//! the log, read across its rotated files with only this task's lines kept, holds
//! what happened to each call. Everything printed is escaped.

use super::error::{CliError, exit};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;

use crate::agent::Transcript;
use crate::control::task_view::{self, Call, Descendant, TaskView};
use crate::text::{escape_json, escape_line, escape_text};

/// Runs `show`: exit 0, or 1 when the task has no readable transcript.
pub fn run(root: &Path, id: &str, json_out: bool) -> Result<ExitCode, CliError> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(exit(code)),
    };
    let dir = &loaded.paths.transcripts;
    let valid_id = crate::protocol::tree::is_task_id(id);
    let transcript = match valid_id.then(|| Transcript::read(&Transcript::path(dir, id))) {
        Some(Ok(t)) => t,
        Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => {
            eprintln!(
                "error: cannot read the transcript of {}: {e}",
                escape_line(id)
            );
            return Ok(ExitCode::FAILURE);
        }
        _ => {
            eprintln!("error: no task {:?}", escape_line(id).as_ref());
            return Ok(ExitCode::FAILURE);
        }
    };
    let shown = task_view::build(&transcript, &loaded.paths.events)?;
    for w in &shown.warnings {
        eprintln!("warning: {}", escape_text(w));
    }
    let mut out = std::io::stdout().lock();
    if json_out {
        let text = serde_json::to_string_pretty(&shown)?;
        writeln!(out, "{}", escape_json(&text))?;
    } else {
        print(&mut out, &shown)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn or_dash(v: Option<&str>) -> std::borrow::Cow<'_, str> {
    escape_line(v.unwrap_or("-"))
}

fn print(out: &mut impl Write, s: &TaskView) -> std::io::Result<()> {
    writeln!(out, "task     {}", escape_line(&s.task_id))?;
    writeln!(out, "prompt   {}", escape_line(&s.prompt))?;
    writeln!(out, "model    {}", escape_line(&s.model))?;
    writeln!(
        out,
        "status   {} ({})",
        escape_line(&s.status),
        or_dash(s.stop_reason.as_deref())
    )?;
    if let Some(e) = &s.error {
        writeln!(out, "error    {}", escape_line(e))?;
    }
    writeln!(
        out,
        "usage    {} in, {} out, {} cache write, {} cache read tokens",
        s.usage.input_tokens,
        s.usage.output_tokens,
        s.usage.cache_creation_input_tokens,
        s.usage.cache_read_input_tokens
    )?;
    let cost = s.usd.map_or_else(
        || "unknown (no price for this model)".to_string(),
        |d| format!("${d:.4}"),
    );
    writeln!(out, "cost     {cost}")?;
    let duration = s.duration_ms.map_or("-".to_string(), |d| format!("{d} ms"));
    writeln!(
        out,
        "created  {}, duration {duration}",
        escape_line(&s.created)
    )?;
    writeln!(out, "by       {}", or_dash(s.submitted_by.as_deref()))?;
    if let Some(p) = &s.parent_task_id {
        writeln!(out, "parent   {}", escape_line(p))?;
    }
    for (n, c) in s.calls.iter().enumerate() {
        print_call(out, n + 1, c)?;
    }
    print_children(out, &s.children)?;
    if let Some(a) = s.answer.as_deref().filter(|a| !a.is_empty()) {
        print_answer(out, a)?;
    }
    Ok(())
}

/// The tree of the task's children, each with what it cost (its own children
/// included: a task's cost is its whole subtree's).
fn print_children(out: &mut impl Write, children: &[Descendant]) -> std::io::Result<()> {
    if children.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "
children:"
    )?;
    for c in children {
        let indent = "  ".repeat(c.depth as usize);
        let cost = c
            .usd
            .map_or_else(|| "?".to_string(), |d| format!("${d:.4}"));
        writeln!(
            out,
            "{indent}{}  {} ({})  {} tokens  {cost}  {}",
            escape_line(&c.task_id),
            c.status,
            or_dash(c.stop_reason.as_deref()),
            c.tokens,
            escape_line(c.prompt.as_deref().unwrap_or("-"))
        )?;
    }
    Ok(())
}

/// What starts every line of the answer. Record lines start at column 0 (a call's
/// head, a task field) or with exactly two spaces (a call's fields), so a line
/// starting with four is never one of them, whatever the model wrote.
const ANSWER_INDENT: &str = "    ";

/// The model's answer under its own label, every line indented (docs/commands.md), so model
/// text that imitates a call record can never pass for one.
fn print_answer(out: &mut impl Write, answer: &str) -> std::io::Result<()> {
    writeln!(out, "\nanswer:")?;
    // Escaped first: a carriage return or a line separator is then shown as an
    // escape, and only real newlines start new (indented) lines.
    for line in escape_text(answer).lines() {
        writeln!(out, "{ANSWER_INDENT}{line}")?;
    }
    Ok(())
}

fn print_call(out: &mut impl Write, n: usize, c: &Call) -> std::io::Result<()> {
    writeln!(
        out,
        "\ncall {n}  {}  {}",
        escape_line(&c.tool),
        escape_line(&c.tool_use_id)
    )?;
    // The input is shown whole (docs/commands.md), as JSON with every control escaped.
    writeln!(out, "  input     {}", escape_json(&c.input.to_string()))?;
    writeln!(
        out,
        "  decision  {} (rule {})",
        or_dash(c.tier.as_deref()),
        or_dash(c.rule.as_deref())
    )?;
    if let Some(cmds) = &c.commands {
        writeln!(out, "  commands  {}", escape_json(&cmds.to_string()))?;
    }
    if c.approval.is_some() {
        writeln!(
            out,
            "  approval  {} by {}",
            or_dash(c.approval.as_deref()),
            or_dash(c.approved_by.as_deref())
        )?;
    }
    let exit = c
        .exit_code
        .as_ref()
        .map_or("-".to_string(), Value::to_string);
    let took = c.duration_ms.map_or("-".to_string(), |d| format!("{d} ms"));
    writeln!(
        out,
        "  exit      {exit}{}, {took}",
        if c.is_error == Some(true) {
            " (error)"
        } else {
            ""
        }
    )?;
    if let Some(child) = &c.child {
        writeln!(out, "  child     {}", escape_line(child))?;
    }
    writeln!(out, "  output    {}", or_dash(c.output_file.as_deref()))
}
