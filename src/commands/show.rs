//! `harnessd show ID` (docs/commands.md): one task from its transcript and the audit log,
//! with no daemon needed: prompt, model, status, usage, duration, then each tool
//! call (tool, full input, decision and rule, approver, exit, duration, output
//! file), then the answer under its own `answer:` label, every line indented. The transcript holds the full inputs and the answer;
//! the log, read across its rotated files with only this task's lines kept, holds
//! what happened to each call. Everything printed is escaped.

use super::error::{CliError, exit};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use serde_json::Value;

use crate::agent::Transcript;
use crate::events::query::{self, Found, Query, QueryParams};
use crate::events::{Event, Record};
use crate::llm::Role;
use crate::text::{escape_json, escape_line, escape_text};

/// What the log says about one tool call.
#[derive(Debug, Default, Serialize)]
struct Call {
    tool_use_id: String,
    tool: String,
    input: Value,
    tier: Option<String>,
    rule: Option<String>,
    commands: Option<Value>,
    approval: Option<String>,
    approved_by: Option<String>,
    exit_code: Option<Value>,
    duration_ms: Option<u64>,
    is_error: Option<bool>,
    output_file: Option<String>,
    /// For a `delegate` call: the child task it started.
    child: Option<String>,
}

/// One task below the shown one: a child, a grandchild, …
#[derive(Debug, Serialize)]
struct Descendant {
    task_id: String,
    /// 1 for a child, 2 for a grandchild, …
    depth: u32,
    status: String,
    stop_reason: Option<String>,
    /// Tokens it used, its own children's included.
    tokens: u64,
    usd: Option<f64>,
    prompt: Option<String>,
}

/// The whole view of a task.
#[derive(Debug, Serialize)]
struct Shown {
    task_id: String,
    prompt: String,
    model: String,
    status: String,
    stop_reason: Option<String>,
    error: Option<String>,
    usage: crate::protocol::Usage,
    /// US dollars, when the model has a price.
    usd: Option<f64>,
    created: String,
    duration_ms: Option<u64>,
    submitted_by: Option<String>,
    /// For a child task: the task that delegated it.
    parent_task_id: Option<String>,
    calls: Vec<Call>,
    /// The tasks it delegated to, and theirs, each under its parent.
    children: Vec<Descendant>,
    answer: Option<String>,
}

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
    let shown = build(&transcript, &loaded.paths.events)?;
    let mut out = std::io::stdout().lock();
    if json_out {
        let text = serde_json::to_string_pretty(&shown)?;
        writeln!(out, "{}", escape_json(&text))?;
    } else {
        print(&mut out, &shown)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The transcript's calls in order, before the log fills in what became of them.
/// A `tool_use` reusing an earlier id never ran (the task stopped on it, see
/// docs/events.md): the call listed, with the log's records of that id, is the first.
fn calls_of(t: &Transcript) -> Vec<Call> {
    let mut calls = Vec::new();
    let mut listed = std::collections::HashSet::new();
    for m in t.messages.iter().filter(|m| m.role == Role::Assistant) {
        for crate::llm::ToolUse {
            id,
            name: tool,
            input,
        } in m.tool_uses()
        {
            if !listed.insert(id.clone()) {
                continue;
            }
            let child = (tool == crate::protocol::ToolName::Delegate.as_str())
                .then(|| crate::protocol::tree::child_task_id(&t.task_id, &id));
            calls.push(Call {
                tool_use_id: id,
                tool,
                input,
                child,
                ..Call::default()
            });
        }
    }
    calls
}

fn build(t: &Transcript, events: &Path) -> Result<Shown, CliError> {
    let mut calls = calls_of(t);
    let mut shown = Shown {
        task_id: t.task_id.clone(),
        prompt: t.messages.first().map(|m| m.text()).unwrap_or_default(),
        model: t.model.clone(),
        status: t.status.as_str().to_string(),
        stop_reason: t.stop_reason.map(|s| s.as_str().to_string()),
        error: t.error.clone(),
        usage: t.usage,
        usd: t.usd,
        created: t.created.clone(),
        duration_ms: None,
        // A `run` is the operator at the terminal (docs/events.md: `cli`).
        submitted_by: t.by.clone().or_else(|| {
            (t.source == Some(crate::protocol::Source::Cli)).then(|| "cli".to_string())
        }),
        parent_task_id: crate::protocol::tree::parent_task_id(&t.task_id).map(str::to_string),
        calls: Vec::new(),
        children: Vec::new(),
        answer: t.answer.clone(),
    };
    let index: HashMap<String, usize> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| (c.tool_use_id.clone(), i))
        .collect();
    let query = Query::new(QueryParams {
        task: Some(t.task_id.clone()),
        ..QueryParams::default()
    })?;
    let mut approvals: HashMap<String, usize> = HashMap::new();
    for found in query::run(events, query)? {
        match found {
            Found::Line(_, ev) => {
                // The query brings the children's lines too; theirs are shown as
                // theirs, under `children`.
                if let Some(record) =
                    Record::from_value(ev).filter(|r| r.task_id.as_deref() == Some(&t.task_id))
                {
                    if let Some(kind) = &record.unread {
                        let at = format!(
                            "seq {}: a {kind:?} line this version cannot read",
                            record.seq
                        );
                        eprintln!("warning: {}", escape_text(&at));
                    }
                    apply(
                        &record.event,
                        &index,
                        &mut approvals,
                        &mut calls,
                        &mut shown,
                    );
                }
            }
            Found::Unreadable { path, line, error } => {
                let at = format!("{}:{line}: unreadable line: {error}", path.display());
                eprintln!("warning: {}", escape_text(&at));
            }
        }
    }
    shown.calls = calls;
    if let Some(dir) = events.parent() {
        shown.children = descendants(dir, &t.task_id);
    }
    Ok(shown)
}

/// The tasks below `id` whose transcripts are in `dir`, each right after its
/// parent, oldest first; read by their heads only (the messages are skipped).
fn descendants(dir: &Path, id: &str) -> Vec<Descendant> {
    let prefix = format!("{id}.");
    let mut found: Vec<(String, crate::agent::TranscriptHead)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let task = name.strip_suffix(".json")?;
            if !task.starts_with(&prefix) || !crate::protocol::tree::is_task_id(task) {
                return None;
            }
            let text = Transcript::read_text(&e.path()).ok()?;
            Some((task.to_string(), serde_json::from_str(&text).ok()?))
        })
        .collect();
    // A child's id extends its parent's: sorted by (created, id) within each
    // parent, the depth-first order is the ids' own order once each level is.
    found.sort_by(|(a, ha), (b, hb)| tree_order(a, &ha.created, b, &hb.created));
    let base = crate::protocol::tree::delegation_depth(id);
    found
        .into_iter()
        .map(|(task_id, h)| Descendant {
            depth: crate::protocol::tree::delegation_depth(&task_id) - base,
            status: h.status.as_str().to_string(),
            stop_reason: h.stop_reason.map(|s| s.as_str().to_string()),
            tokens: h.usage.total(),
            usd: h.usd,
            prompt: h.prompt,
            task_id,
        })
        .collect()
}

/// Depth-first order of two tasks of one tree: an ancestor before its
/// descendants, siblings by creation time.
fn tree_order(a: &str, created_a: &str, b: &str, created_b: &str) -> std::cmp::Ordering {
    if crate::protocol::tree::within_tree(b, a) {
        return std::cmp::Ordering::Less;
    }
    if crate::protocol::tree::within_tree(a, b) {
        return std::cmp::Ordering::Greater;
    }
    (created_a, a).cmp(&(created_b, b))
}

/// The call a line is about: by its `tool_use_id`, or for an approval's lines
/// written before they carried one, by its approval id.
fn call_of(
    event: &Event,
    index: &HashMap<String, usize>,
    approvals: &HashMap<String, usize>,
) -> Option<usize> {
    let (call, approval) = match event {
        Event::PolicyDecision { tool_use_id, .. } | Event::ToolFinished { tool_use_id, .. } => {
            (Some(tool_use_id), None)
        }
        Event::ApprovalRequested {
            tool_use_id,
            approval_id,
            ..
        }
        | Event::ApprovalResolved {
            tool_use_id,
            approval_id,
            ..
        } => (Some(tool_use_id), Some(approval_id)),
        _ => (None, None),
    };
    call.and_then(|id| index.get(id).copied())
        .or_else(|| approval.and_then(|id| approvals.get(id).copied()))
}

/// Adds one of the task's log lines to the view.
fn apply(
    event: &Event,
    index: &HashMap<String, usize>,
    approvals: &mut HashMap<String, usize>,
    calls: &mut [Call],
    shown: &mut Shown,
) {
    if let Event::TaskFinished { duration_ms, .. } = event {
        shown.duration_ms = Some(*duration_ms);
        return;
    }
    let Some(i) = call_of(event, index, approvals) else {
        return;
    };
    match event {
        Event::PolicyDecision {
            tier,
            rule,
            commands,
            ..
        } => {
            calls[i].tier = Some(tier.as_str().to_string());
            calls[i].rule = Some(rule.clone());
            calls[i].commands = commands.as_ref().map(|c| Value::from(c.clone()));
        }
        Event::ApprovalRequested { approval_id, .. } => {
            approvals.insert(approval_id.clone(), i);
        }
        Event::ApprovalResolved { decision, by, .. } => {
            calls[i].approval = Some(decision.as_str().to_string());
            calls[i].approved_by = Some(by.clone());
        }
        Event::ToolFinished {
            exit_code,
            duration_ms,
            is_error,
            output_file,
            ..
        } => {
            calls[i].exit_code = Some(Value::from(*exit_code));
            calls[i].duration_ms = Some(*duration_ms);
            calls[i].is_error = Some(*is_error);
            calls[i].output_file = output_file.clone();
        }
        _ => {}
    }
}

fn or_dash(v: Option<&str>) -> std::borrow::Cow<'_, str> {
    escape_line(v.unwrap_or("-"))
}

fn print(out: &mut impl Write, s: &Shown) -> std::io::Result<()> {
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
