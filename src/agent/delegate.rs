//! `delegate`: a child task with its own history, run through this same loop
//! inside its parent's slot, confined by the parent's policy and narrowed by the
//! call's `tools`; it can only ever have less than its parent.
//!
//! A child's id is its parent's and the call's (`protocol::tree`), so every line
//! it writes names its parent. Its spending goes to the [`Tree`] the whole family
//! shares and is held to the budgets of the task at the top; a cancelled parent
//! records the child's cancellation (`by: parent:<id>`) before it stops it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::{Spent, StopReason, TaskEnv, TaskSpec, TaskStatus, Transcript};
use crate::config::Loaded;
use crate::events::{Event, EventError};
use crate::llm::ToolUse;
use crate::protocol::tree::{child_task_id, delegation_depth};
use crate::protocol::{Source, ToolName};
use crate::tools::{DelegateInput, ToolResult};

/// A task's place in its tree. Cheap to clone; clones share the counters.
#[derive(Clone, Debug)]
pub struct Tree {
    /// What the whole tree spent: the task at the top, every child, every
    /// grandchild. Every response of any of them adds to it as it comes, and each
    /// task's budget check reads it.
    spent: Arc<Mutex<Spent>>,
    /// What this task's children spent, not yet added to its transcript: the loop
    /// takes it after each turn's calls.
    children: Arc<Mutex<Spent>>,
    /// The only tools this task may use, when its `delegate` call narrowed it.
    tools: Option<Arc<[String]>>,
}

impl Tree {
    /// The tree of a task that nobody delegated: it spent nothing yet.
    pub fn root() -> Tree {
        Tree {
            spent: Arc::new(Mutex::new(Spent::zero())),
            children: Arc::new(Mutex::new(Spent::zero())),
            tools: None,
        }
    }

    /// A child's place: the same spending, counters of its own, `tools`.
    fn child(&self, tools: Option<Vec<String>>) -> Tree {
        Tree {
            spent: self.spent.clone(),
            children: Arc::new(Mutex::new(Spent::zero())),
            tools: tools.map(Into::into),
        }
    }

    /// Adds spending to the tree's total.
    pub(super) fn spend(&self, usage: &crate::llm::Usage, usd: Option<f64>) {
        if let Ok(mut s) = self.spent.lock() {
            s.add(usage, usd);
        }
    }

    /// What the whole tree has spent so far.
    pub(super) fn total(&self) -> Spent {
        self.spent.lock().map(|s| *s).unwrap_or_default()
    }

    /// Takes what this task's children spent since the last take.
    pub(super) fn take_children(&self) -> Spent {
        self.children
            .lock()
            .map(|mut s| std::mem::replace(&mut *s, Spent::zero()))
            .unwrap_or_else(|_| Spent::zero())
    }

    /// Whether the task may use the tool called `name` (before policy and config,
    /// which judge every task alike).
    pub(super) fn allows(&self, name: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|t| t.iter().any(|n| n == name))
    }
}

/// The children running now, by id, with the token that stops each: the daemon
/// cancels one on its own through this. Cheap to clone.
#[derive(Clone, Default)]
pub struct Delegates {
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
}

impl Delegates {
    /// Cancels the running child `id`; false when no such child runs.
    pub fn cancel(&self, id: &str) -> bool {
        let token = self.running.lock().ok().and_then(|m| m.get(id).cloned());
        token.map(|t| t.cancel()).is_some()
    }

    /// Takes `id` for a child's run, with a new token; `None` while a child of that
    /// id runs already (two calls whose ids collide never share a transcript).
    fn claim(&self, id: &str) -> Option<Running<'_>> {
        let mut m = self.running.lock().ok()?;
        if m.contains_key(id) {
            return None;
        }
        let token = CancellationToken::new();
        m.insert(id.to_string(), token.clone());
        Some(Running {
            delegates: self,
            id: id.to_string(),
            token,
        })
    }
}

/// A child's place among the running ones, held for its run: its token, given up
/// when the run ends, however it ends.
struct Running<'a> {
    delegates: &'a Delegates,
    id: String,
    token: CancellationToken,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.delegates.running.lock() {
            m.remove(&self.id);
        }
    }
}

/// What a child inherits from its parent's transcript.
#[derive(Debug, Clone)]
pub(super) struct Parent {
    /// The parent's model: a child never runs on another.
    pub model: String,
    /// The parent's own turn limit, if it was given one.
    pub max_turns: Option<u32>,
    /// Where the parent came from.
    pub source: Source,
    /// The caller's trace, if the parent came with one.
    pub traceparent: Option<String>,
}

/// The checks a `delegate` call must pass before policy judges it: `Err` is its
/// answer, and no child starts. The depth limit, and `tools` a subset of the
/// parent's own (built-in or MCP) tools.
pub(super) fn admissible(
    task_id: &str,
    loaded: &Loaded,
    input: &DelegateInput,
    parent_has: &std::collections::HashSet<String>,
) -> Result<(), ToolResult> {
    let max = loaded.config.loop_.max_delegation_depth;
    if delegation_depth(task_id) >= max {
        return Err(ToolResult::error(format!(
            "not executed: tasks may nest at most {max} deep (loop.max_delegation_depth), \
             and this task is at that depth; do the work yourself"
        )));
    }
    let lacking: Vec<&str> = input
        .tools
        .iter()
        .flatten()
        .map(String::as_str)
        .filter(|t| !parent_has.contains(*t))
        .collect();
    if !lacking.is_empty() {
        // Named as JSON strings, the first few: the names are the model's text.
        let named: Vec<String> = lacking.iter().take(5).map(|t| format!("{t:?}")).collect();
        let more = lacking.len().saturating_sub(named.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        return Err(ToolResult::error(format!(
            "not executed: a child can only have tools this task has, and it lacks {}{more}; \
             no child was started. Call delegate again with tools from your own list \
             (or without tools, for all of yours).",
            named.join(", ")
        )));
    }
    Ok(())
}

/// Runs the child of `call` to its end and makes its outcome the call's result.
/// `Err` only when the audit log failed.
pub(super) async fn run(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Loaded,
    parent: &Parent,
    call: &ToolUse,
    input: &DelegateInput,
) -> Result<ToolResult, EventError> {
    let child_id = child_task_id(task_id, &call.id);
    // Without `tools`, the child has all of this task's: its narrowing, if any.
    // Each name once: a list the model repeated a name in is no longer than the
    // parent's own.
    let tools = input
        .tools
        .clone()
        .map(unique)
        .or_else(|| env.tree.tools.as_deref().map(<[String]>::to_vec));
    let Some(running) = env.services.delegates.claim(&child_id) else {
        return Ok(ToolResult::error(format!(
            "not executed: a child task {child_id} runs already (two calls named one \
             child), so no child was started for this call"
        )));
    };
    let spent = env.tree.total();
    if let Some((_, why)) =
        super::limits::budget_used_up(spent, &loaded.config.loop_, &parent.model)
    {
        return Ok(ToolResult::error(format!("{why} (no child was started)")));
    }
    let path = Transcript::path(&loaded.paths.transcripts, &child_id);
    if path.exists() {
        return Ok(ToolResult::error(format!(
            "not executed: a task {child_id} already exists, so no child was started for \
             this call; call delegate again (a new call gets a new child)"
        )));
    }
    let spec = TaskSpec {
        task_id: child_id.clone(),
        prompt: input.prompt.clone(),
        max_turns: parent.max_turns,
        source: parent.source,
        by: format!("parent:{task_id}"),
        resume: None,
        resume_recorded: false,
    };
    let transcript = Transcript {
        parent_tool_use_id: Some(call.id.clone()),
        tools: tools.clone(),
        traceparent: parent.traceparent.clone(),
        ..super::queued_transcript(&spec, parent.model.clone(), spec.by.clone())
    };
    let spec = TaskSpec {
        resume: Some(transcript),
        ..spec
    };
    let outcome = run_child(env, task_id, spec, (tools, running)).await?;
    Ok(result_of(&child_id, &outcome, loaded))
}

/// `names` with each name once, in the order they first came.
fn unique(names: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

/// Continues the child that call `tool_use_id` of `task_id` started, when the
/// parent is resumed with that call open and the child had not ended (the daemon
/// died under both); its outcome is the call's answer. A child that had ended is
/// answered from its transcript, its spending counted ([`ended`]). `Ok(None)`: the
/// call is not a `delegate` call, or it never started a child, and the call is
/// answered as any other open call.
pub(super) async fn continue_open(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Loaded,
    tool: &str,
    tool_use_id: &str,
) -> Result<Option<ToolResult>, EventError> {
    let Some((child_id, child)) = child_of(task_id, loaded, tool, tool_use_id).await else {
        return Ok(None);
    };
    if !open_child(&child) {
        return Ok(Some(ended(env, &child_id, &child, loaded)));
    }
    let tools = child.tools.clone();
    let Some(running) = env.services.delegates.claim(&child_id) else {
        return Ok(None);
    };
    let spec = TaskSpec {
        task_id: child_id.clone(),
        prompt: String::new(),
        max_turns: child.max_turns,
        source: child.source.unwrap_or(Source::Cli),
        by: format!("parent:{task_id}"),
        resume: Some(child),
        resume_recorded: false,
    };
    let outcome = run_child(env, task_id, spec, (tools, running)).await?;
    Ok(Some(result_of(&child_id, &outcome, loaded)))
}

/// The transcript of the child that `delegate` call `tool_use_id` of `task_id`
/// started, if it started one.
async fn child_of(
    task_id: &str,
    loaded: &Loaded,
    tool: &str,
    tool_use_id: &str,
) -> Option<(String, Transcript)> {
    if tool != ToolName::Delegate.as_str() {
        return None;
    }
    let child_id = child_task_id(task_id, tool_use_id);
    let path = Transcript::path(&loaded.paths.transcripts, &child_id);
    let child = Transcript::read_async(path).await.ok()?;
    (child.parent_tool_use_id.as_deref() == Some(tool_use_id)).then_some((child_id, child))
}

/// The answer, from its transcript, of a child that ended before the daemon died
/// under its parent, whose spending the parent had not taken yet: it counts now,
/// for the tree's budgets and the parent's usage.
fn ended(env: &TaskEnv, child_id: &str, child: &Transcript, loaded: &Loaded) -> ToolResult {
    env.tree.spend(&child.usage, child.usd);
    if let Ok(mut c) = env.tree.children.lock() {
        c.add(&child.usage, child.usd);
    }
    let outcome = super::TaskOutcome {
        stop_reason: child.stop_reason.unwrap_or(StopReason::Error),
        answer: child.answer.clone().unwrap_or_default(),
        turns: child.turns.len() as u32,
        usage: child.usage,
        usd: child.usd,
        error: child.error.clone(),
        interrupted: false,
    };
    result_of(child_id, &outcome, loaded)
}

/// The answer of a `delegate` call the log shows finished but the parent's
/// transcript lost, when its child ended: the child's, its spending counted as in
/// [`continue_open`]. `None` for any other call.
pub(super) async fn ended_child(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Loaded,
    tool: &str,
    tool_use_id: &str,
) -> Option<ToolResult> {
    let (child_id, child) = child_of(task_id, loaded, tool, tool_use_id).await?;
    (!open_child(&child)).then(|| ended(env, &child_id, &child, loaded))
}

/// The child task's own run, inside the parent's: its own token (cancelled with
/// the parent's, once that is on the record), its own output budget and MCP
/// servers, the tree's spending. What it spent is left for the parent to take.
async fn run_child(
    env: &TaskEnv,
    task_id: &str,
    spec: TaskSpec,
    (tools, running): (Option<Vec<String>>, Running<'_>),
) -> Result<super::TaskOutcome, EventError> {
    let services = super::TaskServices {
        // A child's text is not the parent's stream.
        live_text: None,
        ..env.services.clone()
    };
    let cancel = running.token.clone();
    let child_env = TaskEnv {
        tree: env.tree.child(tools),
        cancel: cancel.clone(),
        stopping: env.stopping.clone(),
        ..services.for_task(cancel.clone())
    };
    let child_id = spec.task_id.clone();
    // Boxed: the child's run is this very loop, one level down.
    let mut child = Box::pin(super::run_task(&child_env, &spec));
    let outcome = tokio::select! {
        out = &mut child => out,
        () = env.cancel.cancelled() => {
            // A daemon stopping interrupts the child as it does the parent; the
            // user's cancel of the parent is the child's too, and said so first.
            if !env.stopping.is_cancelled() {
                let by = format!("parent:{task_id}");
                env.services
                    .events
                    .record(Some(&child_id), Event::TaskCancelled { by })
                    .await?;
            }
            cancel.cancel();
            child.await
        }
    }?;
    if let Ok(mut c) = env.tree.children.lock() {
        c.add(&outcome.usage, outcome.usd);
    }
    Ok(outcome)
}

/// The parent's result for a child's outcome: the answer itself when the child
/// ended its turn, else an error saying how it stopped (and what it had said).
fn result_of(child_id: &str, outcome: &super::TaskOutcome, loaded: &Loaded) -> ToolResult {
    let max = loaded.policy.settings.output.max_chars;
    let see = format!("`harnessd show {child_id}` shows the child's whole transcript");
    let (answer, cut) = crate::text::truncate_middle(&outcome.answer, max, 0);
    let note = if cut {
        format!("\n({see})")
    } else {
        String::new()
    };
    if outcome.stop_reason == StopReason::EndTurn {
        return ToolResult::ok(format!("{answer}{note}"));
    }
    let how = if outcome.interrupted {
        "was interrupted (the daemon stopped)".to_string()
    } else {
        format!("stopped with {}", outcome.stop_reason.as_str())
    };
    let error = outcome
        .error
        .as_deref()
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    let said = if outcome.answer.is_empty() {
        String::new()
    } else {
        format!("\nIts last text:\n{answer}")
    };
    ToolResult::error(format!(
        "the child task {child_id} {how}{error}; {see}.{said}"
    ))
}

/// Whether `t` is a child the parent's resume should continue: one that had not
/// ended when the daemon died.
fn open_child(t: &Transcript) -> bool {
    matches!(
        t.status,
        TaskStatus::Running | TaskStatus::Interrupted | TaskStatus::AwaitingApproval
    )
}

/// Whether `tool` is `delegate` and offered to task `task_id` (its depth allows
/// another level).
pub(super) fn offered(loaded: &Loaded, task_id: &str, tool: ToolName) -> bool {
    tool != ToolName::Delegate
        || delegation_depth(task_id) < loaded.config.loop_.max_delegation_depth
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_child_id_runs_once_at_a_time() {
        let delegates = Delegates::default();
        let first = delegates.claim("t-1.00").expect("free");
        assert!(delegates.claim("t-1.00").is_none(), "claimed twice");
        assert!(delegates.cancel("t-1.00"));
        assert!(first.token.is_cancelled());
        drop(first);
        assert!(!delegates.cancel("t-1.00"), "released at the run's end");
        assert!(delegates.claim("t-1.00").is_some());
    }
}
