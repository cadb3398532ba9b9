//! One turn's tool calls: validate, decide, ask, run, record — and answer every
//! `tool_use` exactly once, in order, in one user message.
//!
//! Consecutive read-only calls run concurrently; everything else runs one by one
//! in the model's order, so a read that follows a write sees the write.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::TaskEnv;
use super::guard::{self, FaultPoint, Ledger};
use crate::approval::ApprovalAnswer;
use crate::config::Loaded;
use crate::events::{Event, EventError, SpoolCutReason, SpoolCutRecord};
use crate::knowledge::Knowledge;
use crate::llm::{Block, ToolUse};
use crate::policy;
use crate::protocol::{ApprovalRequest, Decision, Tier};
use crate::tools::{self, RunContext, ToolInput, ToolName, ToolResult};

/// A call that passed every check and will run.
struct Runnable {
    index: usize,
    call: ToolUse,
    kind: Kind,
    /// The snapshot that admitted it: its sandbox limits apply to the process.
    loaded: Arc<Loaded>,
}

/// What runs: a built-in tool in a tool process, or an MCP server's tool.
enum Kind {
    /// A built-in tool.
    Builtin {
        tool: ToolName,
        input: ToolInput,
        /// What it was judged on; a file tool opens exactly this path.
        judged: tools::Judged,
        /// What it may write: read-only when a pattern `allow` admitted it.
        profile: crate::protocol::Profile,
    },
    /// An MCP tool (run one by one: a server's tool may change anything).
    Mcp(super::mcp_calls::McpRunnable),
    /// A child task (`delegate`): the turn's consecutive ones run together, up to
    /// `loop.max_parallel_delegates` at once.
    Delegate(tools::DelegateInput),
}

impl Runnable {
    fn is_read_only(&self) -> bool {
        matches!(&self.kind, Kind::Builtin { tool, .. } if tool.is_read_only())
    }

    fn is_delegate(&self) -> bool {
        matches!(&self.kind, Kind::Delegate(_))
    }
}

/// Whether built-in `tool` is offered to task `task_id`: advertised under this
/// config and policy, within the task's narrowing, and for `delegate`, with a
/// level of nesting left.
pub(super) fn offered_to(env: &TaskEnv, task_id: &str, loaded: &Loaded, tool: ToolName) -> bool {
    advertised(loaded, tool)
        && env.tree.allows(tool.as_str())
        && super::delegate::offered(loaded, task_id, tool)
}

/// Whether `tool` is offered to the model under this config and policy.
pub fn advertised(loaded: &Loaded, tool: ToolName) -> bool {
    let enabled = loaded
        .config
        .tools
        .enabled
        .as_ref()
        .is_none_or(|list| list.iter().any(|n| n == tool.as_str()));
    enabled && !policy::denied_outright(&loaded.policy, tool)
}

/// Records a call's end.
pub(super) async fn finished(
    env: &TaskEnv,
    task_id: &str,
    id: &str,
    tool: &str,
    result: &ToolResult,
    duration: std::time::Duration,
    output_file: Option<String>,
) -> Result<(), EventError> {
    env.services
        .events
        .record(
            Some(task_id),
            Event::ToolFinished {
                tool_use_id: id.to_string(),
                tool: tool.to_string(),
                exit_code: result.exit_code,
                duration_ms: duration.as_millis() as u64,
                output_bytes: result.output_bytes,
                truncated: result.truncated,
                is_error: result.is_error,
                output_file,
                spool_cut: result.spool_cut.map(|c| SpoolCutRecord {
                    kept_bytes: c.kept_bytes,
                    not_kept_bytes: c.not_kept_bytes,
                    reason: match c.reason {
                        crate::exec::CutReason::Budget => SpoolCutReason::MaxSpoolMb,
                        crate::exec::CutReason::Reserve => SpoolCutReason::Reserve,
                    },
                }),
                sandbox: env
                    .services
                    .executor
                    .weakened()
                    .map(|w| format!("best_effort: {w}")),
                server: crate::protocol::mcp::McpToolName::parse(tool)
                    .map(|n| n.server.to_string()),
            },
        )
        .await
        .map(|_| ())
}

/// Answers every call with `message`, unexecuted (limits, cut responses).
pub async fn answer_unexecuted(
    env: &TaskEnv,
    task_id: &str,
    uses: &[ToolUse],
    message: &str,
) -> Result<Vec<Block>, EventError> {
    let mut blocks = Vec::with_capacity(uses.len());
    for ToolUse { id, name, input } in uses {
        let started = Instant::now();
        env.services
            .events
            .record(Some(task_id), Event::tool_requested(id, name, input))
            .await?;
        let result = ToolResult::error(message);
        finished(env, task_id, id, name, &result, started.elapsed(), None).await?;
        blocks.push(Block::tool_result(id, &result.content, true));
    }
    Ok(blocks)
}

/// Why a call does not run: its answer (refused by a check, denied or not
/// approved), or the audit log failed. One type, so `?` carries both out.
pub(super) enum NotRun {
    /// The call's (error) answer.
    Refused(ToolResult),
    /// The audit log failed: nothing more may happen unrecorded.
    Log(EventError),
}

impl From<EventError> for NotRun {
    fn from(e: EventError) -> NotRun {
        NotRun::Log(e)
    }
}

/// The per-turn call limit: the answer of a call past it.
fn over_limit(loaded: &Loaded, index: usize) -> Option<ToolResult> {
    let max_calls = loaded.config.loop_.max_tool_calls_per_turn as usize;
    (index >= max_calls).then(|| {
        ToolResult::error(format!(
            "not executed: at most {max_calls} tool calls run per turn; request this call \
             again in your next turn"
        ))
    })
}

/// The checks that need no policy: a known and offered tool, input matching its
/// schema, and for `delegate` what a child may be given. `Err` is the call's answer.
fn validate(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Loaded,
    name: &str,
    input: &Value,
) -> Result<(ToolName, ToolInput), ToolResult> {
    let offered = |t: &ToolName| offered_to(env, task_id, loaded, *t);
    let Some(tool) = ToolName::parse(name).filter(offered) else {
        let available: Vec<&str> = ToolName::ALL
            .into_iter()
            .filter(offered)
            .map(ToolName::as_str)
            .collect();
        return Err(ToolResult::error(format!(
            "unknown tool {name:?}; the tools available are: {}",
            available.join(", ")
        )));
    };
    let parsed = ToolInput::parse(tool, input).map_err(|e| {
        ToolResult::error(format!(
            "invalid input for {name}: {e}. Call {name} again with input matching its schema."
        ))
    })?;
    if let ToolInput::Delegate(d) = &parsed {
        // What this task is offered now, narrowing included: a child gets no more.
        let has = super::request::tools_offered(env, task_id, loaded)
            .iter()
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect();
        super::delegate::admissible(task_id, loaded, d, &has)?;
    }
    Ok((tool, parsed))
}

/// The answer of a call of a tool the task's `delegate` call did not give it.
fn outside_narrowing(env: &TaskEnv, call: &ToolUse) -> Option<ToolResult> {
    (!env.tree.allows(&call.name)).then(|| {
        ToolResult::error(format!(
            "unknown tool {:?}: this task was delegated a narrower set of tools, and it \
             is not one of them",
            call.name
        ))
    })
}

/// Checks one call against validation, limits, policy and approval: `Ok` means
/// it may run.
async fn admit(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Arc<Loaded>,
    index: usize,
    call: &ToolUse,
) -> Result<Kind, NotRun> {
    if let Some(refused) = over_limit(loaded, index).or_else(|| outside_narrowing(env, call)) {
        return Err(NotRun::Refused(refused));
    }
    if let Some(name) = crate::protocol::mcp::McpToolName::parse(&call.name) {
        return super::mcp_calls::admit(env, task_id, loaded, call, name)
            .await
            .map(Kind::Mcp);
    }
    let ToolUse { id, name, input } = call;
    let (tool, parsed) = validate(env, task_id, loaded, name, input).map_err(NotRun::Refused)?;
    let (
        parsed,
        tools::Verdict {
            judged,
            mut decision,
            mut refusal,
        },
    ) = decide_off_runtime(tool, parsed, loaded).await;
    if let Some(why) = super::hooks::pre_tool(env, task_id, loaded, call, &mut decision).await? {
        refusal = Some(why);
    }
    env.services
        .events
        .record(
            Some(task_id),
            Event::PolicyDecision {
                tool_use_id: id.clone(),
                tool: name.clone(),
                tier: decision.tier,
                rule: decision.rule_label(),
                subject: judged.subject.clone(),
                commands: decision.shell.as_ref().map(|s| s.commands.clone()),
                provable: decision.shell.as_ref().map(|s| s.provable),
                not_provable: decision.shell.as_ref().and_then(|s| s.not_provable.clone()),
                profile: decision.profile,
                programs: decision
                    .shell
                    .as_ref()
                    .map(|s| s.programs.clone())
                    .unwrap_or_default(),
                raised: decision.raised.clone(),
            },
        )
        .await?;
    let profile = match decision.tier {
        Tier::Allow => decision.profile,
        Tier::Deny => {
            let why = refusal.unwrap_or_else(|| {
                format!(
                    "denied by policy (rule `{}`): this call will not run. Do not retry it; \
                     use another approach within the policy, or tell the user what you need.",
                    decision.rule_label()
                )
            });
            return Err(NotRun::Refused(ToolResult::error(why)));
        }
        // What a human approved runs with the write set (docs/policy.md).
        Tier::Ask => {
            ask(env, task_id, call, decision.rule_label()).await?;
            crate::protocol::Profile::Write
        }
    };
    if let ToolInput::Delegate(d) = parsed {
        return Ok(Kind::Delegate(d));
    }
    Ok(Kind::Builtin {
        tool,
        input: parsed,
        judged,
        profile,
    })
}

/// Longest text decided on the runtime's own thread: a command's proof takes
/// microseconds at this size (`cargo bench --bench policy`), less than the trip
/// to a blocking thread and back. Small, because the proof's work grows with how
/// deeply a command nests programs that run their arguments (`find -exec …`)
/// times the words at each level: a few kilobytes can be built to cost
/// milliseconds, which must not be spent on one of the runtime's two workers.
const INLINE_DECISION_BYTES: usize = 256;

/// Whether `input` is decided where it is: no path to judge, and short.
fn decided_inline(input: &ToolInput) -> bool {
    let short = |t: &str| t.len() <= INLINE_DECISION_BYTES;
    match input {
        ToolInput::RunBash(i) => short(&i.command),
        ToolInput::RunPython(i) => short(&i.code),
        ToolInput::GetTime(_) => true,
        ToolInput::LoadSkill(i) => short(&i.name),
        ToolInput::Delegate(i) => short(&i.prompt),
        ToolInput::ReadFile(_)
        | ToolInput::WriteFile(_)
        | ToolInput::EditFile(_)
        | ToolInput::ListDir(_) => false,
    }
}

/// [`tools::decide`] on a blocking thread: judging a file tool's path walks the
/// workspace (`symlink_metadata`, `read_link`), and a long command's proof takes
/// time, neither of which may stall the runtime's workers. The input travels
/// there and back rather than being copied. A short call without a path is
/// decided here ([`decided_inline`]): the decision is pure.
async fn decide_off_runtime(
    tool: ToolName,
    input: ToolInput,
    loaded: &Arc<Loaded>,
) -> (ToolInput, tools::Verdict) {
    if decided_inline(&input) {
        let verdict = tools::decide(tool, &input, loaded);
        return (input, verdict);
    }
    let loaded = loaded.clone();
    let decided = tokio::task::spawn_blocking(move || {
        let verdict = tools::decide(tool, &input, &loaded);
        (input, verdict)
    })
    .await;
    match decided {
        Ok(decided) => decided,
        // A panic while deciding reaches the task guard as it did on this thread;
        // a blocking task is only cancelled when the runtime shuts down, and then
        // `into_panic` panics too, which the guard turns into the task's `error`.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Asks the approver about a call the policy sends to `ask`, recording the request
/// and the answer; a cancelled task denies it. `Ok` means approved.
pub(super) async fn ask(
    env: &TaskEnv,
    task_id: &str,
    call: &ToolUse,
    rule: String,
) -> Result<(), NotRun> {
    let ToolUse { id, name, input } = call;
    let events = &env.services.events;
    let req = ApprovalRequest {
        approval_id: format!("ap-{:012x}", fastrand::u64(..) >> 16),
        task_id: task_id.to_string(),
        parent_task_id: crate::protocol::tree::parent_task_id(task_id).map(str::to_string),
        tool_use_id: id.clone(),
        tool: name.clone(),
        input: input.clone(),
        rule,
    };
    events
        .record(
            Some(task_id),
            Event::ApprovalRequested {
                approval_id: req.approval_id.clone(),
                tool_use_id: id.clone(),
                tool: name.clone(),
                input: input.clone(),
                input_sha256: crate::events::input_sha256(input),
                rule: req.rule.clone(),
                expires_at: env.services.approver.expires_in().map(|wait| {
                    (chrono::Utc::now() + wait).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                }),
            },
        )
        .await?;
    let answer = tokio::select! {
        a = env.services.approver.ask(&req) => a,
        () = env.cancel.cancelled() => ApprovalAnswer {
            approved: false,
            decision: Decision::Denied,
            by: "cancel".into(),
            reason: Some("the task was cancelled".into()),
            remembered: None,
        },
    };
    events
        .record(
            Some(task_id),
            Event::ApprovalResolved {
                approval_id: req.approval_id.clone(),
                tool_use_id: req.tool_use_id.clone(),
                decision: answer.decision,
                by: answer.by.clone(),
                reason: answer.reason.clone(),
                remembered: answer.remembered.clone(),
            },
        )
        .await?;
    if answer.approved {
        return Ok(());
    }
    let why = answer.reason.map(|r| format!(": {r}")).unwrap_or_default();
    Err(NotRun::Refused(ToolResult::error(format!(
        "the call was not approved ({} by {}){why}. Do not retry it unchanged; \
         continue without it or explain what you need.",
        answer.decision, answer.by
    ))))
}

/// Each call's answer, by the call's index: the result and its full-output file.
type Answers = Vec<Option<(ToolResult, Option<String>)>>;

/// Validates, decides and runs every call of one turn; returns the `tool_result`
/// blocks in the calls' order. `ledger` follows each call's progress, for the answers
/// a panic would leave owed; `knowledge` is what `load_skill` answers from.
pub(super) async fn execute_calls(
    env: &TaskEnv,
    task_id: &str,
    loaded: Arc<Loaded>,
    uses: &[ToolUse],
    ledger: &Ledger,
    (parent, knowledge): (&super::delegate::Parent, &Arc<Knowledge>),
) -> Result<Vec<Block>, EventError> {
    let mut answers: Answers = vec![None; uses.len()];
    let runnable = admit_all(env, task_id, uses, ledger, &mut answers).await?;
    let turn = Turn {
        env,
        task_id,
        loaded: &loaded,
        parent,
        knowledge,
    };
    run_admitted(&turn, &runnable, ledger, &mut answers).await?;
    Ok(uses
        .iter()
        .zip(answers)
        .map(|(call, r)| {
            let (result, _) =
                r.unwrap_or_else(|| (ToolResult::error("internal error: no result"), None));
            Block::tool_result(&call.id, &result.content, result.is_error)
        })
        .collect())
}

/// Records every call as requested and admits it or answers it (refused, denied,
/// not approved) in `answers`; returns the calls that will run, in order.
async fn admit_all(
    env: &TaskEnv,
    task_id: &str,
    uses: &[ToolUse],
    ledger: &Ledger,
    answers: &mut Answers,
) -> Result<Vec<Runnable>, EventError> {
    let mut runnable = Vec::new();
    for (index, call) in uses.iter().enumerate() {
        let started = Instant::now();
        env.services
            .events
            .record(
                Some(task_id),
                Event::tool_requested(&call.id, &call.name, &call.input),
            )
            .await?;
        ledger.requested(&call.id);
        // Each call is judged by the policy in force when it is reached.
        let now = env.services.config.current();
        guard::fault_point(&call.name, FaultPoint::Policy);
        match admit(env, task_id, &now, index, call).await {
            Ok(kind) => runnable.push(Runnable {
                index,
                call: call.clone(),
                kind,
                loaded: now,
            }),
            Err(NotRun::Refused(result)) => {
                let took = started.elapsed();
                finished(env, task_id, &call.id, &call.name, &result, took, None).await?;
                ledger.answered(&call.id, &result);
                answers[index] = Some((result, None));
            }
            Err(NotRun::Log(e)) => return Err(e),
        }
    }
    Ok(runnable)
}

/// What the calls of one turn share: the task, its snapshot, what a child
/// inherits, what the task read at its start.
struct Turn<'a> {
    env: &'a TaskEnv,
    task_id: &'a str,
    loaded: &'a Arc<Loaded>,
    parent: &'a super::delegate::Parent,
    knowledge: &'a Arc<Knowledge>,
}

/// The end of the batch that starts at `i`: a run of consecutive read-only calls,
/// or of `delegate` calls, goes together; any other call alone.
fn batch_end(runnable: &[Runnable], i: usize) -> usize {
    let same: fn(&Runnable) -> bool = if runnable[i].is_read_only() {
        Runnable::is_read_only
    } else if runnable[i].is_delegate() {
        Runnable::is_delegate
    } else {
        return i + 1;
    };
    let mut end = i + 1;
    while end < runnable.len() && same(&runnable[end]) {
        end += 1;
    }
    end
}

/// Runs the admitted calls in batches ([`batch_end`]), recording each end and
/// filling `answers`.
async fn run_admitted(
    turn: &Turn<'_>,
    runnable: &[Runnable],
    ledger: &Ledger,
    answers: &mut Answers,
) -> Result<(), EventError> {
    let (env, task_id, loaded) = (turn.env, turn.task_id, turn.loaded);
    let ctx = RunContext {
        knowledge: turn.knowledge.clone(),
        executor: env.services.executor.clone(),
        loaded: loaded.clone(),
        output_dir: Some(loaded.paths.transcripts.join(task_id)),
        cancel: env.cancel.clone(),
        spool: crate::exec::SpoolBudget::new(
            loaded.policy.settings.output.max_spool_mb,
            env.spool_used.clone(),
            loaded.paths.transcripts.clone(),
            loaded.config.audit.reserve_mb,
        ),
    };
    // Children of one batch beyond the limit wait for one to end.
    let parallel = loaded.config.loop_.max_parallel_delegates.max(1) as usize;
    let children = tokio::sync::Semaphore::new(parallel);
    let mut i = 0;
    while i < runnable.len() {
        let end = batch_end(runnable, i);
        let batch = &runnable[i..end];
        batch.iter().for_each(|r| ledger.started(&r.call.id));
        // A run call's duration is its execution, not the wait for approval.
        let outputs = futures::future::join_all(batch.iter().map(|r| async {
            let _slot = match r.kind {
                Kind::Delegate(_) => children.acquire().await.ok(),
                _ => None,
            };
            let started = Instant::now();
            guard::fault_point(&r.call.name, FaultPoint::Dispatch);
            let ran = match &r.kind {
                Kind::Builtin {
                    input,
                    judged,
                    profile,
                    ..
                } => {
                    let ctx = RunContext {
                        loaded: r.loaded.clone(),
                        ..ctx.clone()
                    };
                    Ok(tools::run(&r.call.id, input, judged, *profile, &ctx).await)
                }
                Kind::Mcp(m) => {
                    super::mcp_calls::run(env, task_id, &r.loaded, m, &r.call, &ctx.spool).await
                }
                Kind::Delegate(d) => {
                    super::delegate::run(env, task_id, &r.loaded, turn.parent, &r.call, d)
                        .await
                        .map(|result| (result, None))
                }
            };
            (ran, started.elapsed())
        }))
        .await;
        for (r, (ran, duration)) in batch.iter().zip(outputs) {
            let (mut result, file) = ran?;
            super::hooks::post_tool(env, task_id, &r.loaded, &r.call, &mut result).await?;
            let file = file.map(|f| loaded.paths.display(&f));
            let (id, tool) = (&r.call.id, &r.call.name);
            finished(env, task_id, id, tool, &result, duration, file.clone()).await?;
            ledger.answered(id, &result);
            answers[r.index] = Some((result, file));
        }
        i = end;
    }
    Ok(())
}
