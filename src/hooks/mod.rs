//! Hooks: the operator programs of `hooks` in settings.json, run confined (see
//! [`crate::exec::HookRequest`]) and their answers read — fail closed for
//! `pre_tool`. What an answer does to a call is the policy's
//! ([`crate::policy::apply_hook`], pure); this module runs the hooks in order and
//! reads their answers. It records nothing (the caller records each
//! [`HookRecord`] before the action).
//!
//! A pre_tool hook's answer: `deny` and `ask` tighten; `allow` counts only with
//! `may_allow` and only lifts an `ask` that came from a rule or the default (not a
//! raise harnessd made, not another hook's ask); `continue` keeps. A call the
//! policy already denies runs no hook: a hook could only tighten it.

mod answer;

pub use crate::policy::{Decided, PreAnswer};
pub use answer::{parse_post, parse_pre};

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::{Hook, HookNetwork, Loaded, resolve};
use crate::exec::{Ending, Executor, HookRequest, HookRun};
use crate::policy;
use crate::protocol::{HookPoint, HookVerdict, Tier};
use crate::sandbox::{Confinement, Network};

/// One hook run, as `hook_decision` records it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookRecord {
    /// The hook's name.
    pub hook: String,
    /// Where it ran.
    pub point: HookPoint,
    /// The call it was about, if any.
    pub tool_use_id: Option<String>,
    /// What it came to.
    pub decision: HookVerdict,
    /// Its reason, or why it failed.
    pub reason: Option<String>,
    /// Wall-clock time of the run.
    pub duration_ms: u64,
}

/// A tool call as hooks see it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The task.
    pub task_id: &'a str,
    /// The tool's name as the model wrote it.
    pub tool: &'a str,
    /// The call's id.
    pub tool_use_id: &'a str,
    /// Its input.
    pub input: &'a Value,
}

/// What the pre_tool hooks made of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct PreTool {
    /// The final decision; `rule` is `hook:<name>` when a hook changed it.
    pub decided: Decided,
    /// The deciding hook's reason, when a hook denied or asked.
    pub reason: Option<String>,
    /// Every hook that ran, in order.
    pub records: Vec<HookRecord>,
}

/// Runs the pre_tool hooks of `loaded` that apply to `call`, in order, until the
/// first deny (a hook that fails denies).
pub async fn pre_tool(
    executor: &Executor,
    loaded: &Arc<Loaded>,
    call: Call<'_>,
    decided: Decided,
    cancel: &CancellationToken,
) -> PreTool {
    let mut out = PreTool {
        decided,
        reason: None,
        records: Vec::new(),
    };
    if out.decided.tier == Tier::Deny {
        return out;
    }
    let hooks = &loaded.policy.settings.hooks.pre_tool;
    // Whether a hook answered `ask`: a later hook's `allow` does not lift that,
    // even when the call was already asked and the ask left the rule as it was.
    let mut asked = false;
    for hook in hooks.iter().filter(|h| h.applies_to(call.tool)) {
        let input = json!({
            "point": HookPoint::PreTool.as_str(),
            "task_id": call.task_id,
            "tool": call.tool,
            "tool_use_id": call.tool_use_id,
            "input": call.input,
            "decision": {"tier": out.decided.tier, "rule": out.decided.rule},
        });
        let run = run(executor, loaded, hook, &input, cancel).await;
        let (answer, reason) = match answer::object(&run, hook).and_then(|o| parse_pre(&o)) {
            Ok(a) => a,
            Err(why) => (PreAnswer::Deny, Some(format!("hook failed: {why}"))),
        };
        let (decision, note) = policy::apply_hook(
            &mut out.decided,
            &hook.name,
            hook.may_allow(),
            answer,
            asked,
        );
        asked |= answer == PreAnswer::Ask;
        let reason = match (reason, note) {
            (Some(r), Some(n)) => Some(format!("{r} ({n})")),
            (r, n) => r.or(n),
        };
        if matches!(answer, PreAnswer::Deny | PreAnswer::Ask) && out.decided.rule == hook_rule(hook)
        {
            out.reason = reason.clone();
        }
        out.records.push(record(
            hook,
            HookPoint::PreTool,
            &call,
            decision,
            reason,
            &run,
        ));
        if out.decided.tier == Tier::Deny {
            break;
        }
    }
    out
}

fn hook_rule(hook: &Hook) -> String {
    policy::hook_rule(&hook.name)
}

/// What the post_tool hooks made of a call's result: the text the model sees
/// instead, if a hook replaced it, and every hook that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct PostTool {
    /// The replacement of the model's text.
    pub result: Option<String>,
    /// Every hook that ran, in order.
    pub records: Vec<HookRecord>,
}

/// A call's result as post_tool hooks get it.
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    /// The text the model would see.
    pub text: &'a str,
    /// The exit code, when a process exited.
    pub exit_code: Option<i32>,
    /// Whether the call failed.
    pub is_error: bool,
}

/// Runs the post_tool hooks that apply to `call`, in order; each sees the text as
/// the previous one left it. A failing hook is recorded and changes nothing.
pub async fn post_tool(
    executor: &Executor,
    loaded: &Arc<Loaded>,
    call: Call<'_>,
    outcome: Outcome<'_>,
    cancel: &CancellationToken,
) -> PostTool {
    let mut out = PostTool {
        result: None,
        records: Vec::new(),
    };
    let hooks = &loaded.policy.settings.hooks.post_tool;
    for hook in hooks.iter().filter(|h| h.applies_to(call.tool)) {
        let text = out.result.as_deref().unwrap_or(outcome.text);
        let input = json!({
            "point": HookPoint::PostTool.as_str(),
            "task_id": call.task_id,
            "tool": call.tool,
            "tool_use_id": call.tool_use_id,
            "input": call.input,
            "result": text,
            "exit_code": outcome.exit_code,
            "is_error": outcome.is_error,
        });
        let run = run(executor, loaded, hook, &input, cancel).await;
        let (decision, reason) = match answer::object(&run, hook).and_then(|o| parse_post(&o)) {
            Ok(Some(text)) => {
                out.result = Some(text);
                (HookVerdict::Replace, None)
            }
            Ok(None) => (HookVerdict::Continue, None),
            Err(why) => (HookVerdict::Failed, Some(why)),
        };
        out.records.push(record(
            hook,
            HookPoint::PostTool,
            &call,
            decision,
            reason,
            &run,
        ));
    }
    out
}

/// Runs every task_finished hook with `input` (the task's end; `point` is added),
/// in order; answers change nothing, failures are recorded.
pub async fn task_finished(
    executor: &Executor,
    loaded: &Arc<Loaded>,
    mut input: Value,
    cancel: &CancellationToken,
) -> Vec<HookRecord> {
    if let Some(o) = input.as_object_mut() {
        o.insert("point".into(), json!(HookPoint::TaskFinished.as_str()));
    }
    let mut records = Vec::new();
    for hook in &loaded.policy.settings.hooks.task_finished {
        let run = run(executor, loaded, hook, &input, cancel).await;
        let (decision, reason) = match answer::object(&run, hook) {
            Ok(o) => (HookVerdict::Continue, answer::reason(&o).ok().flatten()),
            Err(why) => (HookVerdict::Failed, Some(why)),
        };
        records.push(HookRecord {
            hook: hook.name.clone(),
            point: HookPoint::TaskFinished,
            tool_use_id: None,
            decision,
            reason,
            duration_ms: run.duration.as_millis() as u64,
        });
    }
    records
}

fn record(
    hook: &Hook,
    point: HookPoint,
    call: &Call<'_>,
    decision: HookVerdict,
    reason: Option<String>,
    run: &HookRun,
) -> HookRecord {
    HookRecord {
        hook: hook.name.clone(),
        point,
        tool_use_id: Some(call.tool_use_id.to_string()),
        decision,
        reason,
        duration_ms: run.duration.as_millis() as u64,
    }
}

/// The helper's network of a hook.
pub fn network(hook: &Hook) -> Network {
    match hook.network() {
        HookNetwork::All(on) => Network::from_bool(on),
        HookNetwork::Ports(ports) => Network::TcpPorts(ports),
    }
}

/// Runs `hook` with `input` on stdin, confined, on a blocking thread.
pub async fn run(
    executor: &Executor,
    loaded: &Arc<Loaded>,
    hook: &Hook,
    input: &Value,
    cancel: &CancellationToken,
) -> HookRun {
    let root = &loaded.paths.root;
    let read: Vec<_> = hook.read().iter().map(|p| resolve(root, p)).collect();
    let confine = Confinement::for_hook(loaded, &read, network(hook));
    // A variable missing from the daemon's environment is left out, as for a
    // server: the hook sees it unset.
    let env: Vec<(String, String)> = hook
        .env()
        .filter_map(|(inner, outer)| std::env::var(outer).ok().map(|v| (inner.to_string(), v)))
        .collect();
    let (executor, loaded, hook, cancel) = (
        executor.clone(),
        loaded.clone(),
        hook.clone(),
        cancel.clone(),
    );
    let mut input = serde_json::to_vec(input).unwrap_or_default();
    input.push(b'\n');
    let ran = tokio::task::spawn_blocking(move || {
        executor.run_hook(&HookRequest {
            name: &hook.name,
            argv: &hook.command,
            env: &env,
            workdir: &loaded.paths.root,
            confine: &confine,
            input,
            timeout: Duration::from_secs(hook.timeout_secs()),
            cancel: &cancel,
        })
    })
    .await;
    ran.unwrap_or_else(|e| HookRun {
        ending: Ending::SpawnFailed(format!("the hook's thread failed: {e}")),
        stdout: None,
        duration: Duration::ZERO,
    })
}
