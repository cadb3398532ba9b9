//! The human-readable listings of the daemon's clients: `tasks` (a table with a
//! header, the prompt's start and the tokens so far), `show`/`cancel`/`resume`
//! (one task, field by field, with its error and answer) and `approvals` (a table,
//! then every character of each input). Every field is escaped before it is
//! measured or printed: ids, rules and prompts can hold model text.

use std::io::Write;

use super::table::print_aligned;
use crate::protocol::StopReason;
use crate::protocol::{Approval, Task};
use crate::text::{escape_line, escape_text};

/// How many characters of a prompt the `tasks` table shows.
const PROMPT_COLUMN: usize = 40;

/// `text` cut to `max` characters, with `…` when it was longer.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// A cost in US dollars, or `?` when the model has no price.
fn usd(cost: Option<f64>) -> String {
    cost.map_or_else(|| "?".to_string(), |d| format!("${d:.4}"))
}

/// `tasks` in the order the table shows them, each with its depth: newest first,
/// each child right under its parent (oldest child first) when both are listed.
fn nested(tasks: &[Task]) -> Vec<(usize, &Task)> {
    let listed: std::collections::HashSet<&str> =
        tasks.iter().map(|t| t.task_id.as_str()).collect();
    let parent_listed = |t: &Task| {
        t.parent_task_id
            .as_deref()
            .is_some_and(|p| listed.contains(p))
    };
    let mut out = Vec::with_capacity(tasks.len());
    let mut stack: Vec<(usize, &Task)> = tasks
        .iter()
        .rev()
        .filter(|t| !parent_listed(t))
        .map(|t| (0, t))
        .collect();
    while let Some((depth, t)) = stack.pop() {
        out.push((depth, t));
        // Pushed newest first, so the oldest child is popped (shown) first.
        stack.extend(
            tasks
                .iter()
                .filter(|c| c.parent_task_id.as_deref() == Some(t.task_id.as_str()))
                .map(|c| (depth + 1, c)),
        );
    }
    out
}

/// The `tasks` table: one row per task, newest first, children nested under
/// their parents.
pub fn print_tasks(out: &mut impl Write, tasks: &[Task]) -> std::io::Result<()> {
    let mut rows = vec![
        [
            "TASK", "STATUS", "STOP", "TOKENS", "COST", "UPDATED", "PROMPT",
        ]
        .map(String::from),
    ];
    for (depth, t) in nested(tasks) {
        let branch = match depth {
            0 => String::new(),
            d => format!("{}└ ", "  ".repeat(d - 1)),
        };
        // Escaped first, then cut: the cut never splits an escape sequence's
        // meaning, since what is shown is the escaped text.
        let prompt = t
            .prompt
            .as_deref()
            .map_or("-".into(), |p| cut(&escape_line(p), PROMPT_COLUMN));
        rows.push([
            format!("{branch}{}", escape_line(&t.task_id)),
            t.status.as_str().to_string(),
            t.stop_reason.map_or("-", StopReason::as_str).to_string(),
            t.usage.total().to_string(),
            usd(t.usd),
            escape_line(&t.updated).into_owned(),
            prompt,
        ]);
    }
    print_aligned(out, &rows, &[3, 4])
}

/// One task field by field, then its error and its answer.
pub fn print_task(out: &mut impl Write, t: &Task) -> std::io::Result<()> {
    let u = &t.usage;
    let stop = t.stop_reason.map_or(String::new(), |s| format!(" ({s})"));
    writeln!(out, "task     {}", escape_line(&t.task_id))?;
    if let Some(p) = &t.parent_task_id {
        writeln!(out, "parent   {}", escape_line(p))?;
    }
    writeln!(out, "status   {}{stop}", t.status.as_str())?;
    writeln!(
        out,
        "tokens   {} (in {} · out {} · cache read {} · cache write {})",
        u.total(),
        u.input_tokens,
        u.output_tokens,
        u.cache_read_input_tokens,
        u.cache_creation_input_tokens
    )?;
    writeln!(out, "cost     {}", usd(t.usd))?;
    writeln!(out, "created  {}", escape_line(&t.created))?;
    writeln!(out, "updated  {}", escape_line(&t.updated))?;
    if let Some(p) = &t.prompt {
        writeln!(out, "prompt   {}", escape_line(p))?;
    }
    if let Some(e) = &t.error {
        writeln!(out, "error    {}", escape_text(e))?;
    }
    if let Some(a) = t.answer.as_deref().filter(|a| !a.is_empty()) {
        writeln!(out, "\n{}", escape_text(a))?;
    }
    Ok(())
}

/// The `approvals` listing: a table of who asks for what, then each call's
/// input in full, wrapped at `width`, and how to answer.
pub fn print_approvals(
    out: &mut impl Write,
    approvals: &[Approval],
    width: usize,
) -> std::io::Result<()> {
    let mut rows =
        vec![["APPROVAL", "TASK", "PARENT", "TOOL", "RULE", "REQUESTED"].map(String::from)];
    for a in approvals {
        let r = &a.request;
        rows.push([
            escape_line(&r.approval_id).into_owned(),
            escape_line(&r.task_id).into_owned(),
            escape_line(r.parent_task_id.as_deref().unwrap_or("-")).into_owned(),
            escape_line(&r.tool).into_owned(),
            escape_line(&r.rule).into_owned(),
            escape_line(&a.requested_at).into_owned(),
        ]);
    }
    print_aligned(out, &rows, &[])?;
    for a in approvals {
        writeln!(out)?;
        print_approval(out, a, width)?;
    }
    if !approvals.is_empty() {
        writeln!(
            out,
            "\nanswer: harnessd approve ID [--remember]  |  harnessd deny ID [--reason R]"
        )?;
    }
    Ok(())
}

/// One pending approval: who asks for what under which rule, then every
/// character of the input, wrapped at `width`.
pub fn print_approval(out: &mut impl Write, a: &Approval, width: usize) -> std::io::Result<()> {
    let r = &a.request;
    let parent = r
        .parent_task_id
        .as_deref()
        .map(|p| format!(" (child of {})", escape_line(p)))
        .unwrap_or_default();
    writeln!(
        out,
        "{}  {}{parent}  {}  rule {}",
        escape_line(&r.approval_id),
        escape_line(&r.task_id),
        escape_line(&r.tool),
        escape_line(&r.rule)
    )?;
    write!(out, "{}", crate::text::render_input(&r.input, width))
}
