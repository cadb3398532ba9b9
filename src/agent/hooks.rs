//! The loop's side of hooks: runs them through [`crate::hooks`] at the three
//! points and records each run (`hook_decision`) before what it decided takes
//! effect — the call's `policy_decision`, the model's view of a result.

use std::sync::Arc;

use serde_json::json;

use super::TaskEnv;
use crate::config::Loaded;
use crate::events::{Event, EventError};
use crate::hooks::{self, Call, Decided, HookRecord, Outcome};
use crate::llm::ToolUse;
use crate::policy;
use crate::protocol::{Profile, Tier};
use crate::tools::ToolResult;

/// Records every run of `records`, in order.
async fn record_all(
    env: &TaskEnv,
    task_id: &str,
    records: Vec<HookRecord>,
) -> Result<(), EventError> {
    for r in records {
        env.services
            .events
            .record(
                Some(task_id),
                Event::HookDecision {
                    hook: r.hook,
                    point: r.point,
                    tool_use_id: r.tool_use_id,
                    decision: r.decision,
                    reason: r.reason,
                    duration_ms: r.duration_ms,
                },
            )
            .await?;
    }
    Ok(())
}

fn call<'a>(task_id: &'a str, c: &'a ToolUse) -> Call<'a> {
    Call {
        task_id,
        tool: &c.name,
        tool_use_id: &c.id,
        input: &c.input,
    }
}

/// Runs the pre_tool hooks on a call `decision` judged, records them, and
/// changes `decision` to what they decided (`rule: hook:<name>`; what a hook lets
/// through an ask runs, as an approved call does, with the write set). Returns
/// the model's answer when a hook denied.
pub(super) async fn pre_tool(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Arc<Loaded>,
    c: &ToolUse,
    decision: &mut policy::Decision,
) -> Result<Option<String>, EventError> {
    if loaded.policy.settings.hooks.pre_tool.is_empty() || decision.tier == Tier::Deny {
        return Ok(None);
    }
    let decided = Decided {
        tier: decision.tier,
        rule: decision.rule_label(),
        raised: decision.raised.is_some() || decision.unseen.is_some(),
    };
    let out = hooks::pre_tool(
        &env.services.executor,
        loaded,
        call(task_id, c),
        decided,
        &env.cancel,
    )
    .await;
    record_all(env, task_id, out.records).await?;
    if out.decided.tier == decision.tier {
        return Ok(None);
    }
    decision.tier = out.decided.tier;
    decision.rule = Some(out.decided.rule.clone());
    decision.profile = Profile::Write;
    if decision.tier != Tier::Deny {
        return Ok(None);
    }
    let why = out.reason.map(|r| format!(": {r}")).unwrap_or_default();
    Ok(Some(format!(
        "denied by the operator's hook (`{}`){why}. This call will not run. Do not retry \
         it; use another approach, or tell the user what you need.",
        out.decided.rule
    )))
}

/// Runs the post_tool hooks on a call's `result`, records them, and puts a
/// hook's replacement into the text the model sees (the `.out` file keeps the
/// call's real output).
pub(super) async fn post_tool(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Arc<Loaded>,
    c: &ToolUse,
    result: &mut ToolResult,
) -> Result<(), EventError> {
    if loaded.policy.settings.hooks.post_tool.is_empty() {
        return Ok(());
    }
    let outcome = Outcome {
        text: &result.content,
        exit_code: result.exit_code,
        is_error: result.is_error,
    };
    let out = hooks::post_tool(
        &env.services.executor,
        loaded,
        call(task_id, c),
        outcome,
        &env.cancel,
    )
    .await;
    record_all(env, task_id, out.records).await?;
    if let Some(text) = out.result {
        // What a hook gives the model is capped as a tool's output is: a hook
        // must not be a way past `output.max_chars` into the context.
        let cap = loaded.policy.settings.output.max_chars;
        result.content = crate::text::truncate_middle(&text, cap, 0).0;
    }
    Ok(())
}

/// The task's end as task_finished hooks get it.
pub(super) struct Ended<'a> {
    pub task_id: &'a str,
    pub stop_reason: crate::protocol::StopReason,
    pub turns: u32,
    pub usage: crate::protocol::Usage,
    pub usd: Option<f64>,
    pub answer: &'a str,
}

/// Runs the task_finished hooks of `loaded` (the task's last snapshot) after
/// `task_finished` was recorded, and records them. Each is bounded by its timeout
/// and killed when the daemon stops, so the task's slot is held no longer than
/// that.
pub(super) async fn task_finished(
    env: &TaskEnv,
    loaded: &Arc<Loaded>,
    ended: Ended<'_>,
) -> Result<(), EventError> {
    if loaded.policy.settings.hooks.task_finished.is_empty() {
        return Ok(());
    }
    let input = json!({
        "task_id": ended.task_id,
        "stop_reason": ended.stop_reason,
        "turns": ended.turns,
        "usage": ended.usage,
        "usd": ended.usd,
        "answer": ended.answer,
    });
    let records = hooks::task_finished(&env.services.executor, loaded, input, &env.stopping).await;
    record_all(env, ended.task_id, records).await
}
