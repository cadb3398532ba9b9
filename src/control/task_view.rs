//! One task as a person reads it: its transcript's calls in order, each with what
//! the audit log says became of it (decision and rule, approver, exit, kept output
//! file), and the tasks it delegated to. `harnessd show` prints it; the web console
//! renders it. The log is read across its rotated files with only this task's
//! lines kept, so memory is bounded by the transcript, not the log.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::agent::Transcript;
use crate::events::query::{self, Found, Query, QueryError, QueryParams};
use crate::events::{Event, Record};
use crate::llm::Role;

/// What the log says about one tool call.
#[derive(Debug, Default, Serialize)]
pub struct Call {
    /// The call's id.
    pub tool_use_id: String,
    /// The tool's name, as the model wrote it.
    pub tool: String,
    /// The whole input, from the transcript.
    pub input: Value,
    /// `allow`, `ask` or `deny`, once decided.
    pub tier: Option<String>,
    /// The rule that decided, or `default`.
    pub rule: Option<String>,
    /// For `run_bash`: the simple commands policy saw.
    pub commands: Option<Value>,
    /// What the call could write when it ran: `read_only` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// `approved`, `denied` or `timeout`, for a call that asked.
    pub approval: Option<String>,
    /// Who answered the approval.
    pub approved_by: Option<String>,
    /// The process's exit code (null when it did not exit on its own).
    pub exit_code: Option<Value>,
    /// How long it ran.
    pub duration_ms: Option<u64>,
    /// Whether its result was an error.
    pub is_error: Option<bool>,
    /// The kept output file, as the log names it.
    pub output_file: Option<String>,
    /// For a `delegate` call: the child task it started.
    pub child: Option<String>,
}

/// One task below the shown one: a child, a grandchild, …
#[derive(Debug, Serialize)]
pub struct Descendant {
    /// Its id.
    pub task_id: String,
    /// 1 for a child, 2 for a grandchild, …
    pub depth: u32,
    /// Its status.
    pub status: String,
    /// Its stop reason, once it has one.
    pub stop_reason: Option<String>,
    /// Tokens it used, its own children's included.
    pub tokens: u64,
    /// US dollars, when the model has a price.
    pub usd: Option<f64>,
    /// The start of its prompt.
    pub prompt: Option<String>,
}

/// The whole view of a task.
#[derive(Debug, Serialize)]
pub struct TaskView {
    /// Its id.
    pub task_id: String,
    /// The first message's text.
    pub prompt: String,
    /// The model it started with.
    pub model: String,
    /// Its status.
    pub status: String,
    /// Its stop reason, once it has one.
    pub stop_reason: Option<String>,
    /// The error, when it stopped on one.
    pub error: Option<String>,
    /// Tokens used.
    pub usage: crate::protocol::Usage,
    /// US dollars, when the model has a price.
    pub usd: Option<f64>,
    /// When it was created (RFC 3339).
    pub created: String,
    /// How long it ran, once finished.
    pub duration_ms: Option<u64>,
    /// Who submitted it.
    pub submitted_by: Option<String>,
    /// For a child task: the task that delegated it.
    pub parent_task_id: Option<String>,
    /// Its tool calls in order.
    pub calls: Vec<Call>,
    /// The tasks it delegated to, and theirs, each under its parent.
    pub children: Vec<Descendant>,
    /// The answer, once finished.
    pub answer: Option<String>,
    /// Lines of the log the view could not use (unreadable, or of a later
    /// version), for the reader to be told.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// Why a task's view cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TaskViewError {
    /// The log's query could not be made.
    #[error(transparent)]
    Query(#[from] QueryError),
    /// The log's files could not be listed.
    #[error("cannot read the audit log: {0}")]
    Io(#[from] std::io::Error),
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

/// The view of the task whose transcript is `t`, with what the log `events` (its
/// live file) says of each call, and the task's descendants from their
/// transcripts' heads beside it. A line the view cannot use is named in
/// `warnings`, never skipped silently.
pub fn build(t: &Transcript, events: &Path) -> Result<TaskView, TaskViewError> {
    let mut calls = calls_of(t);
    let mut shown = TaskView {
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
        warnings: Vec::new(),
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
                        shown.warnings.push(at);
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
                shown.warnings.push(at);
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
    shown: &mut TaskView,
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
            profile,
            ..
        } => {
            calls[i].tier = Some(tier.as_str().to_string());
            calls[i].rule = Some(rule.clone());
            calls[i].profile = Some(profile.as_str().to_string());
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
