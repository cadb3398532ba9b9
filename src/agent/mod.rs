//! The turn loop: send system + tools + the whole history, run the tool calls the
//! model asks for, send every result back in one user message, repeat until the
//! model ends its turn or a limit stops the task (docs/guide.md).
//!
//! The loop owns the history and its invariants (every `tool_use` answered exactly
//! once, in order; the assistant message appended exactly as received). It never
//! touches the filesystem for a tool: calls go through `calls` to the executor.
//! [`run_task`] runs the task behind `guard`: a panic ends that task with `error`,
//! never its caller or the process.

mod calls;
mod compact;
mod guard;
pub mod reconcile;
mod stop;
mod transcript;

pub use calls::advertised;
pub use guard::install_panic_hook;
pub use stop::{StopReason, TaskStatus};
pub use transcript::{
    LockError, RunLock, Transcript, TranscriptHead, TurnRecord, Unsaved, prompt_head_of,
};

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::approval::Approver;
use crate::config::{ConfigSource, Loaded, LoopConfig};
use crate::events::{self, Event, EventError, EventLog};
use crate::exec::Executor;
use crate::llm::{
    AnthropicClient, Block, FailedAttempt, Hold, LlmError, Message, ProtocolError, Request,
    Response, Role, SendError, ToolChoice, Usage,
};
use crate::tools::{ToolDefinition, ToolName};

/// Text appended to the last request when the turn limit is reached.
pub const SUMMARY_REQUEST: &str = "The turn limit for this task has been reached, so no more \
tools can run. Summarise what you found so far and what remains to be done.";

/// The answer to a call in the response to a request sent with tools disabled.
const TOOLS_DISABLED: &str = "not executed: tools were disabled for this request (the \
task's turn limit was reached, so only a summary was asked for); the task stops here";

/// The services every task shares: `run` builds one for its task, the daemon's
/// scheduler keeps one and gives each task a [`TaskEnv`] of its own. Cheap to clone.
#[derive(Clone)]
pub struct TaskServices {
    /// Config and policy in force; read afresh every turn.
    pub config: Arc<dyn ConfigSource>,
    /// The model client.
    pub client: AnthropicClient,
    /// The audit log.
    pub events: EventLog,
    /// Spawns tool processes.
    pub executor: Executor,
    /// Answers `ask` calls.
    pub approver: Arc<dyn Approver>,
    /// Receives the model's text as it streams, as `{"type": "text_delta",
    /// "task_id", "turn", "text"}` values (not audit events); sent by the loop,
    /// received by `run`'s progress printer. `None`: nobody watches.
    pub live_text: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    /// Transcripts whose last save failed, kept whole until a save succeeds (see
    /// [`Unsaved`]).
    pub unsaved: Unsaved,
}

impl TaskServices {
    /// The environment of one task, stopped by `cancel`.
    pub fn for_task(&self, cancel: CancellationToken) -> TaskEnv {
        TaskEnv {
            services: self.clone(),
            cancel,
            stopping: CancellationToken::new(),
            spool_used: Arc::default(),
        }
    }
}

impl TaskEnv {
    /// The same environment, where a cancellation that comes with `stopping`
    /// cancelled (the daemon's shutdown, past its grace) leaves the task
    /// `interrupted`, to be resumed, instead of ending it `cancelled`.
    pub fn stopped_by(self, stopping: CancellationToken) -> TaskEnv {
        TaskEnv { stopping, ..self }
    }
}

/// What a task runs with: the shared services and its own cancellation.
pub struct TaskEnv {
    /// The services shared with every other task.
    pub services: TaskServices,
    /// Cancels this task: its model request and its tools' process trees.
    pub cancel: CancellationToken,
    /// Cancelled when the daemon stops ([`TaskEnv::stopped_by`]); never for `run`.
    pub stopping: CancellationToken,
    /// Bytes of tool output this task keeps on disk, against
    /// `output.max_spool_mb`: drawn by every call (concurrent ones too, through
    /// clones of the one counter), so the budget spans the task's turns. A resumed
    /// task starts from what its directory already holds.
    pub spool_used: Arc<std::sync::atomic::AtomicU64>,
}

/// A task to run.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// The task's id, from [`new_task_id`] or the resumed transcript.
    pub task_id: String,
    /// What the user asked; unused when resuming.
    pub prompt: String,
    /// Overrides `loop.max_turns`.
    pub max_turns: Option<u32>,
    /// `cli` or `api`.
    pub source: String,
    /// Who asked for this run (submit or resume): `uid:N (name)` or `cli`.
    pub by: String,
    /// Continue this transcript instead of starting from `prompt`; a transcript
    /// still `queued` (see [`queued_transcript`]) is started as a new task instead.
    pub resume: Option<Transcript>,
    /// A resume whose `task_resumed` is already on the record: the daemon writes
    /// (and syncs) it before answering 202, so the run does not write it again.
    pub resume_recorded: bool,
}

/// How a task ended.
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// The answer (the last assistant message's text).
    pub answer: String,
    /// Model requests made, resumed ones included.
    pub turns: u32,
    /// Tokens summed over the task's requests.
    pub usage: Usage,
    /// The task's cost in US dollars; `None` when unknown.
    pub usd: Option<f64>,
    /// The error, when stop_reason is `error`.
    pub error: Option<String>,
    /// Stopped by the daemon's shutdown (`stop_reason` is then `cancelled`): the
    /// transcript is saved `interrupted` and `task_interrupted` recorded instead of
    /// `task_finished`, so `resume` continues it.
    pub interrupted: bool,
}

/// A new task id: time-ordered and unique enough for one root.
pub fn new_task_id() -> String {
    let now = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    format!("t-{now}-{:06x}", fastrand::u32(..0x100_0000))
}

/// The `model_error` event of one failed attempt of request `turn`.
fn model_error(turn: u32, f: FailedAttempt) -> Event {
    Event::ModelError {
        turn,
        status: f.status,
        attempt: f.attempt,
        retry_in_ms: f.retry_in.map(|w| w.as_millis() as u64),
        message: f.message,
    }
}

/// Canonical signature of a turn's tool calls, order ignored.
fn call_signature(uses: &[calls::ToolUse]) -> String {
    let mut parts: Vec<String> = uses
        .iter()
        .map(|(_, name, input)| format!("{name}\u{0}{}", canonical(input)))
        .collect();
    parts.sort();
    parts.join("\u{1}")
}

/// JSON with object keys sorted, so equal inputs compare equal.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", json!(k), canonical(&map[*k])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            format!(
                "[{}]",
                items.iter().map(canonical).collect::<Vec<_>>().join(",")
            )
        }
        other => other.to_string(),
    }
}

/// The request of one turn. `model` is the task's own (its transcript's: the
/// `model` it was submitted with, else `api.model` when it started); empty falls
/// back to `api.model`.
fn build_request<'a>(
    loaded: &Loaded,
    model: &str,
    messages: &'a [Message],
    summary: bool,
) -> Request<'a> {
    let api = &loaded.config.api;
    let model = if model.is_empty() { &api.model } else { model };
    let tools = ToolName::ALL
        .into_iter()
        .filter(|t| advertised(loaded, *t))
        .map(ToolName::definition)
        .collect();
    Request {
        model: model.to_string(),
        max_tokens: api.max_tokens,
        system: vec![json!({"type": "text", "text": loaded.system_prompt})],
        tools,
        messages,
        tool_choice: summary.then_some(ToolChoice::None),
        thinking: api
            .thinking_budget_tokens
            .map(|b| json!({"type": "enabled", "budget_tokens": b})),
        // A compacted history's summary ends a prefix that stays the same from
        // turn to turn: its own breakpoint keeps it cached.
        cache_prefix: messages
            .first()
            .filter(|m| m.content.iter().any(compact::is_summary))
            .map(|_| 0),
        stream: api.stream,
    }
}

/// The repeat counter of the no-progress limit: the last turn's call signature and
/// how many turns in a row asked for exactly those calls.
#[derive(Default)]
struct Repeats {
    last_signature: Option<String>,
    count: u32,
}

impl Repeats {
    /// Counts this turn's calls; returns how many turns in a row made them.
    fn observe(&mut self, uses: &[calls::ToolUse]) -> u32 {
        let signature = call_signature(uses);
        self.count = if self.last_signature.as_ref() == Some(&signature) {
            self.count + 1
        } else {
            1
        };
        self.last_signature = Some(signature);
        self.count
    }
}

/// How a task ended: the stop reason and, for `error`, the error.
type Ended = (StopReason, Option<String>);

/// What the loop does after the model's stop reason is looked at.
enum AfterResponse {
    /// The task stops here.
    Stop(Ended),
    /// Send again without running anything (`pause_turn`).
    SendAgain,
    /// Run the calls, after the limit checks.
    RunCalls,
}

/// Mutable state of a running task. It lives outside the guarded future, so after a
/// panic the transcript and the ledger are still here to finish the task with.
struct TaskRun<'a> {
    env: &'a TaskEnv,
    spec: &'a TaskSpec,
    transcript: Transcript,
    turn: u32,
    started: Instant,
    /// How far the current turn's calls got; read only after a panic.
    ledger: guard::Ledger,
    /// Input tokens of the last response, when over
    /// `context.compress_threshold_tokens`: compact before the next request.
    compact_due: Option<u64>,
    /// Every `tool_use` id of the task so far: the history it started from and each
    /// response since. Kept apart from the messages so a compaction that summarises
    /// old turns away does not make their ids usable again.
    used_ids: std::collections::HashSet<String>,
    /// The last response's share of the memory budget (`daemon.memory_mb`), kept
    /// until the transcript holding it is saved (its copies are made by then), and
    /// never while another request waits for room: dropped before each send.
    hold: Hold,
}

impl TaskRun<'_> {
    /// Saves the transcript; `Err` is why it could not be saved (also logged).
    async fn save(&self) -> Result<(), String> {
        let dir = self.env.services.config.current().paths.transcripts.clone();
        let unsaved = &self.env.services.unsaved;
        match self.transcript.save_async(dir).await {
            Ok(()) => {
                unsaved.forget(&self.spec.task_id);
                Ok(())
            }
            Err(e) => {
                tracing::error!("cannot save transcript {}: {e}", self.spec.task_id);
                // The transcript disagrees with the log until a save succeeds: the
                // daemon saves this one again once the disk takes it.
                unsaved.keep(&self.transcript);
                Err(format!("cannot save the transcript: {e}"))
            }
        }
    }

    /// Saves the transcript where the task cannot go on without it: on failure the
    /// task stops with `error` (its pending calls, if any, answered unexecuted), since
    /// nothing may happen that a resume could not see.
    async fn save_or_stop(
        &mut self,
        pending: &[calls::ToolUse],
    ) -> Result<Option<Ended>, EventError> {
        let saved = self.save().await;
        self.hold = Hold::default();
        let Err(error) = saved else {
            return Ok(None);
        };
        if !pending.is_empty() {
            let why = "not executed: the task's transcript could not be saved, so the task \
                       stops here";
            self.unexecuted(pending, why).await?;
        }
        Ok(Some((StopReason::Error, Some(error))))
    }

    fn record(&self, event: Event) -> impl Future<Output = Result<u64, EventError>> + '_ {
        self.env
            .services
            .events
            .record(Some(&self.spec.task_id), event)
    }

    /// Appends a user message with the given blocks.
    fn push_user(&mut self, blocks: Vec<Block>) {
        self.transcript.messages.push(Message::user(blocks));
    }

    async fn unexecuted(&mut self, uses: &[calls::ToolUse], why: &str) -> Result<(), EventError> {
        let blocks = calls::answer_unexecuted(self.env, &self.spec.task_id, uses, why).await?;
        self.push_user(blocks);
        Ok(())
    }

    /// Makes a saved history ready to send again: dangling `tool_use` blocks (the
    /// process died before their results were saved) are answered first, each as
    /// far as the audit log shows it got; a history that ends with the model's
    /// answer gets a user turn asking it to go on.
    async fn prepare_resume(&mut self) -> Result<(), EventError> {
        let Some(last) = self.transcript.messages.last() else {
            return Ok(());
        };
        if last.role != Role::Assistant {
            return Ok(());
        }
        let uses = last.tool_uses();
        if uses.is_empty() {
            self.push_user(vec![Block::text(
                "Continue the task from where you stopped.",
            )]);
            return Ok(());
        }
        // How far each open call got is in the audit log, not the transcript: the
        // transcript is saved before the calls run, the log records each step.
        let log = self.env.services.config.current().paths.events.clone();
        let task_id = self.spec.task_id.clone();
        let ids: Vec<String> = uses.iter().map(|(id, _, _)| id.clone()).collect();
        let trails = tokio::task::spawn_blocking(move || events::call_trails(&log, &task_id, &ids))
            .await
            .unwrap_or_else(|e| {
                Err(events::TrailError::Io {
                    path: std::path::PathBuf::new(),
                    source: std::io::Error::other(e),
                })
            });
        let blocks =
            guard::answer_resumed_calls(self.env, &self.spec.task_id, &uses, trails).await?;
        self.push_user(blocks);
        Ok(())
    }

    /// The loop proper. `Err` is an internal error (the audit log failed).
    async fn turns(&mut self) -> Result<Ended, EventError> {
        let mut repeats = Repeats::default();
        loop {
            // A task cancelled between steps (or while queued) sends nothing more.
            if self.env.cancel.is_cancelled() {
                return Ok((StopReason::Cancelled, None));
            }
            self.ledger.clear();
            // A compaction's request may wait for room too.
            self.hold = Hold::default();
            let loaded = self.env.services.config.current();
            self.compact_if_due(&loaded).await?;
            let max_turns = self
                .spec
                .max_turns
                .or(self.transcript.max_turns)
                .unwrap_or(loaded.config.loop_.max_turns);
            self.turn += 1;
            let summary = self.begin_turn(max_turns);
            let (model_stop, uses) = match self.send(&loaded, summary).await? {
                Ok(response) => response,
                Err(ended) => return Ok(ended),
            };
            match self
                .after_response(&model_stop, &uses, summary, max_turns)
                .await?
            {
                AfterResponse::Stop(ended) => return Ok(ended),
                // No calls to run, but another paid request: the budgets hold here too.
                AfterResponse::SendAgain => match self.budget_used_up(&loaded.config.loop_) {
                    Some((reason, _)) => return Ok((reason, None)),
                    None => continue,
                },
                AfterResponse::RunCalls => {}
            }
            let limits = &loaded.config.loop_;
            if let Some(reason) = self
                .check_limits(
                    &uses,
                    limits,
                    &mut repeats,
                    summary || self.turn >= max_turns,
                )
                .await?
            {
                return Ok((reason, None));
            }
            // Saved before the tools run: a crash mid-tool leaves the model's request
            // on disk, so a resume can answer it; no tool runs unsaved.
            if let Some(ended) = self.save_or_stop(&uses).await? {
                return Ok(ended);
            }
            let blocks = calls::execute_calls(
                self.env,
                &self.spec.task_id,
                loaded.clone(),
                &uses,
                &self.ledger,
            )
            .await?;
            self.push_user(blocks);
            if let Some(ended) = self.save_or_stop(&[]).await? {
                return Ok(ended);
            }
        }
    }

    /// Whether this turn is the summary turn (the limit reached right after tool
    /// results); if so, the request for a summary joins the last user message.
    fn begin_turn(&mut self, max_turns: u32) -> bool {
        let after_tools = self.transcript.messages.last().is_some_and(|m| {
            m.role == Role::User && m.content.iter().any(|b| b.kind() == "tool_result")
        });
        let summary = self.turn >= max_turns && after_tools;
        if summary && let Some(last) = self.transcript.messages.last_mut() {
            last.content.push(Block::text(SUMMARY_REQUEST));
        }
        summary
    }

    /// Compacts the history if the last response asked for it. Never between a
    /// `pause_turn` answer and its continuation, which must be resent as is.
    async fn compact_if_due(&mut self, loaded: &Loaded) -> Result<(), EventError> {
        let last_is_user = self
            .transcript
            .messages
            .last()
            .is_some_and(|m| m.role == Role::User);
        if let Some(tokens) = self.compact_due.filter(|_| last_is_user) {
            self.compact_due = None;
            self.compact(loaded, compact::Trigger::Reported(tokens))
                .await?;
        }
        Ok(())
    }

    /// Sends the history and records the response. `Ok(Ok(_))` is the model's stop
    /// reason and the calls it asks for, its message already in the history;
    /// `Ok(Err(_))` ends the task (cancelled, or the model failed for good). A 400
    /// saying the request exceeds the context compacts the history and sends it
    /// once more.
    async fn send(
        &mut self,
        loaded: &Loaded,
        summary: bool,
    ) -> Result<Result<(String, Vec<calls::ToolUse>), Ended>, EventError> {
        let mut compacted = false;
        loop {
            let error = match self.send_once(loaded, summary).await? {
                Ok((response, latency_ms, usd)) => {
                    return self
                        .record_response(response, latency_ms, usd)
                        .await
                        .map(Ok);
                }
                Err(LlmError::Cancelled) => return Ok(Err((StopReason::Cancelled, None))),
                Err(e) => e,
            };
            if !compacted && error.exceeds_context() {
                compacted = true;
                if self.compact(loaded, compact::Trigger::TooLong).await? {
                    continue;
                }
            }
            return Ok(Err((StopReason::Error, Some(error.to_string()))));
        }
    }

    /// One request with its retries: the response, its latency and its cost, or
    /// why there is none.
    async fn send_once(
        &mut self,
        loaded: &Loaded,
        summary: bool,
    ) -> Result<Result<(Response, u64, Option<f64>), LlmError>, EventError> {
        let request = build_request(
            loaded,
            &self.transcript.model,
            &self.transcript.messages,
            summary,
        );
        self.record(Event::ModelRequest {
            turn: self.turn,
            messages: request.messages.len(),
            tools_disabled: summary,
        })
        .await?;
        // Holding a share while waiting for another could deadlock the budget.
        self.hold = Hold::default();
        let sent = Instant::now();
        // Each failed attempt becomes a `model_error` event, recorded before the
        // client waits for the next one: llm reports, the loop records.
        let services = &self.env.services;
        let (events, task_id, turn) = (&services.events, self.spec.task_id.as_str(), self.turn);
        let on_failure = move |f: FailedAttempt| async move {
            events
                .record(Some(task_id), model_error(turn, f))
                .await
                .map(|_| ())
        };
        let live = services.live_text.as_ref();
        let on_text = move |text: &str| {
            if let Some(tx) = live {
                // `after_seq` (the last line written before this text) lets a
                // follower put the text between the same events as it came.
                let after_seq = events.head().0;
                let delta = json!({"type": "text_delta", "task_id": task_id, "turn": turn,
                    "text": text, "after_seq": after_seq});
                let _ = tx.send(delta);
            }
        };
        let response = match services
            .client
            .send_live(&request, &self.env.cancel, on_failure, &on_text)
            .await
        {
            Ok(r) => r,
            Err(SendError::Callback(e)) => return Err(e),
            Err(SendError::Model(e)) => return Ok(Err(e)),
        };
        let latency_ms = sent.elapsed().as_millis() as u64;
        let price = crate::usage::price_of(&request.model, &loaded.config.pricing);
        let usd = price.map(|p| p.cost(&response.usage));
        Ok(Ok((response, latency_ms, usd)))
    }

    /// Records a response (`model_response`, the usage, the turn record) and appends
    /// the assistant message exactly as received; returns its stop reason and calls.
    /// `usd` is the response's cost, `None` when the model has no price.
    async fn record_response(
        &mut self,
        mut response: Response,
        latency_ms: u64,
        usd: Option<f64>,
    ) -> Result<(String, Vec<calls::ToolUse>), EventError> {
        let model_stop = response.stop_reason.clone().unwrap_or_default();
        self.hold = std::mem::take(&mut response.hold);
        self.record(Event::ModelResponse {
            turn: self.turn,
            stop_reason: model_stop.clone(),
            usage: response.usage,
            usd,
            latency_ms,
        })
        .await?;
        let u = &response.usage;
        let input = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
        let threshold = self
            .env
            .services
            .config
            .current()
            .config
            .context
            .compress_threshold_tokens;
        self.compact_due = (input > threshold).then_some(input);
        self.transcript.usage.add(&response.usage);
        // One unpriced request makes the task's cost unknown for good.
        self.transcript.usd = self.transcript.usd.zip(usd).map(|(a, b)| a + b);
        self.transcript.turns.push(TurnRecord {
            turn: self.turn,
            stop_reason: model_stop.clone(),
            usage: response.usage,
            usd,
            latency_ms,
        });
        let message = Message {
            role: Role::Assistant,
            content: response.content,
        };
        let uses = message.tool_uses();
        self.transcript.messages.push(message);
        Ok((model_stop, uses))
    }

    /// What the model's stop reason means for the loop.
    async fn after_response(
        &mut self,
        model_stop: &str,
        uses: &[calls::ToolUse],
        summary: bool,
        max_turns: u32,
    ) -> Result<AfterResponse, EventError> {
        let checked = match self.transcript.messages.last() {
            Some(last) => crate::llm::check_protocol(model_stop, &last.content)
                .and_then(|()| crate::llm::check_fresh_ids(&last.content, &self.used_ids)),
            None => Ok(()),
        };
        if let Err(violation) = checked {
            return self.protocol_broken(&violation).await;
        }
        self.used_ids
            .extend(uses.iter().map(|(id, _, _)| id.clone()));
        // The summary turn was sent with `tool_choice: none`; a server that drops
        // it (llama.cpp, Ollama) may still answer with calls. None of them runs,
        // whatever else the response says: the turn limit stands.
        if summary && !uses.is_empty() {
            self.unexecuted(uses, TOOLS_DISABLED).await?;
            return Ok(AfterResponse::Stop((StopReason::MaxTurns, None)));
        }
        Ok(match model_stop {
            "max_tokens" => {
                if !uses.is_empty() {
                    let why = "not executed: the response was cut off by max_tokens, so this \
                               call may be incomplete";
                    self.unexecuted(uses, why).await?;
                }
                AfterResponse::Stop((StopReason::MaxTokens, None))
            }
            "refusal" => AfterResponse::Stop((StopReason::Refusal, None)),
            "pause_turn" if self.turn >= max_turns => {
                AfterResponse::Stop((StopReason::MaxTurns, None))
            }
            "pause_turn" => AfterResponse::SendAgain,
            _ if uses.is_empty() => {
                let reason = if summary {
                    StopReason::MaxTurns
                } else {
                    StopReason::EndTurn
                };
                AfterResponse::Stop((reason, None))
            }
            _ => AfterResponse::RunCalls,
        })
    }

    /// The response just appended breaks the protocol: none of its calls run, each
    /// one that has an id is answered so the transcript stays valid, and the task
    /// stops with `error`. A `tool_use` without an id stays in the history as
    /// received (it is the evidence of why the task stopped); it cannot be answered,
    /// and no further request is sent that would carry it.
    async fn protocol_broken(
        &mut self,
        violation: &ProtocolError,
    ) -> Result<AfterResponse, EventError> {
        let error = format!("the model's response breaks the Messages API protocol: {violation}");
        let uses = self
            .transcript
            .messages
            .last()
            .map(Message::answerable_tool_uses)
            .unwrap_or_default();
        if !uses.is_empty() {
            let why = format!("not executed: {error}; the task stops here");
            // A call reusing an earlier id is answered in the transcript only: the
            // log's records of that id belong to the call that ran, and a second
            // `tool_requested` under it would make the two indistinguishable.
            let mut blocks = Vec::with_capacity(uses.len());
            for call in &uses {
                if self.used_ids.contains(&call.0) {
                    blocks.push(Block::tool_result(&call.0, &why, true));
                } else {
                    let one = std::slice::from_ref(call);
                    blocks.extend(
                        calls::answer_unexecuted(self.env, &self.spec.task_id, one, &why).await?,
                    );
                }
            }
            self.push_user(blocks);
        }
        Ok(AfterResponse::Stop((StopReason::Error, Some(error))))
    }

    /// The budget (tokens, or US dollars) the task has used up, with why, if any.
    /// Checked before calls run and before a `pause_turn` is sent again.
    fn budget_used_up(&self, limits: &LoopConfig) -> Option<(StopReason, String)> {
        if self.transcript.usage.total() >= limits.token_budget {
            let why = format!(
                "not executed: the task's token budget ({} tokens) is used up; the task \
                 stops here",
                limits.token_budget
            );
            return Some((StopReason::TokenBudget, why));
        }
        let budget = limits.usd_budget?;
        // A cost that is not known (a model without a price, chosen per task)
        // cannot be held to a budget: the task stops rather than run unbounded.
        let why = match self.transcript.usd {
            Some(spent) if spent >= budget => format!(
                "not executed: the task's USD budget (${budget}) is used up (${spent:.4} \
                 spent); the task stops here"
            ),
            Some(_) => return None,
            None => format!(
                "not executed: the task's cost is unknown (no price for model {:?}), so \
                 its USD budget (${budget}) cannot be kept; the task stops here",
                self.transcript.model
            ),
        };
        Some((StopReason::UsdBudget, why))
    }

    /// The limits checked before calls run: token budget, no progress, turn limit
    /// (`last_turn`). A limit that stops the task answers the calls unexecuted.
    async fn check_limits(
        &mut self,
        uses: &[calls::ToolUse],
        limits: &LoopConfig,
        repeats: &mut Repeats,
        last_turn: bool,
    ) -> Result<Option<StopReason>, EventError> {
        if let Some((reason, why)) = self.budget_used_up(limits) {
            self.unexecuted(uses, &why).await?;
            return Ok(Some(reason));
        }
        let repeated = repeats.observe(uses);
        if repeated >= limits.no_progress_repeats {
            let why = format!(
                "not executed: the same tool calls were requested {repeated} turns in a row \
                 without progress; the task stops here"
            );
            self.unexecuted(uses, &why).await?;
            return Ok(Some(StopReason::NoProgress));
        }
        if last_turn {
            self.unexecuted(uses, "not executed: the task's turn limit was reached")
                .await?;
            return Ok(Some(StopReason::MaxTurns));
        }
        Ok(None)
    }
}

impl TaskRun<'_> {
    /// Everything from the task's first event to its stop. `Err` is an internal error
    /// (the audit log failed).
    async fn drive(&mut self) -> Result<Ended, EventError> {
        if !starts_fresh(self.spec) {
            if !self.spec.resume_recorded {
                self.record(Event::TaskResumed {
                    turns_so_far: self.turn,
                    source: self.spec.source.clone(),
                    by: self.spec.by.clone(),
                })
                .await?;
            }
            self.prepare_resume().await?;
        } else {
            let loaded = self.env.services.config.current();
            let model = if self.transcript.model.is_empty() {
                loaded.config.api.model.clone()
            } else {
                self.transcript.model.clone()
            };
            self.record(Event::TaskStarted {
                prompt: self.spec.prompt.clone(),
                model,
                source: self.spec.source.clone(),
            })
            .await?;
        }
        if let Some(ended) = self.save_or_stop(&[]).await? {
            return Ok(ended);
        }
        self.turns().await
    }

    /// After a panic: stops whatever the task left running and answers the calls the
    /// panic left open, so the transcript stays valid and resumable.
    async fn recover(&mut self) -> Result<(), EventError> {
        // A call of a concurrent batch may still run on a blocking thread after its
        // future was dropped; the task's token is what kills its process tree.
        self.env.cancel.cancel();
        let uses = match self.transcript.messages.last() {
            Some(last) if last.role == Role::Assistant => last.tool_uses(),
            _ => return Ok(()),
        };
        if uses.is_empty() {
            return Ok(());
        }
        let blocks =
            guard::answer_open_calls(self.env, &self.spec.task_id, &uses, &self.ledger).await?;
        self.push_user(blocks);
        Ok(())
    }

    /// Saves the final transcript and records `task_finished`; a task cancelled by
    /// the daemon's shutdown is left `interrupted` instead ([`TaskRun::interrupt`]).
    async fn finish(
        &mut self,
        stop_reason: StopReason,
        error: Option<String>,
    ) -> Result<TaskOutcome, EventError> {
        if stop_reason == StopReason::Cancelled && self.env.stopping.is_cancelled() {
            return self.interrupt().await;
        }
        let answer = self
            .transcript
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .map(Message::text)
            .unwrap_or_default();
        self.transcript.status = TaskStatus::Finished;
        self.transcript.stop_reason = Some(stop_reason);
        self.transcript.answer = Some(answer);
        self.transcript.error = error.clone();
        // The task ends either way; a failure is logged and `task_finished` says why
        // the task stopped.
        let _ = self.save().await;
        self.hold = Hold::default();
        // Saved: the outcome takes the answer over rather than holding a second copy
        // of what may be megabytes.
        let answer = self.transcript.answer.take().unwrap_or_default();
        self.record(Event::TaskFinished {
            stop_reason: stop_reason.as_str().into(),
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            duration_ms: self.started.elapsed().as_millis() as u64,
            error: error.clone(),
        })
        .await?;
        Ok(TaskOutcome {
            stop_reason,
            answer,
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            error,
            interrupted: false,
        })
    }

    /// Stopped by the daemon's shutdown: the task has not ended, so its transcript
    /// is saved `interrupted` (the calls it had open are answered, as for any
    /// cancellation) and `task_interrupted` recorded, with no `task_finished`; the
    /// next start shows it `interrupted`, as after a crash.
    async fn interrupt(&mut self) -> Result<TaskOutcome, EventError> {
        self.transcript.status = TaskStatus::Interrupted;
        self.transcript.stop_reason = None;
        self.transcript.answer = None;
        self.transcript.error = None;
        let _ = self.save().await;
        self.record(Event::TaskInterrupted {
            was: "running".into(),
        })
        .await?;
        Ok(TaskOutcome {
            stop_reason: StopReason::Cancelled,
            answer: String::new(),
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            error: None,
            interrupted: true,
        })
    }

    /// Ends the task after the loop stopped, or after it panicked (`panicked`).
    async fn conclude(&mut self, ended: Ended, panicked: bool) -> Result<TaskOutcome, EventError> {
        if panicked {
            // The hook already logged the message and where; this ties it to the task.
            tracing::error!(
                task_id = %self.spec.task_id,
                "the task ended by a panic; its open calls are answered, its \
                 task_finished holds the error"
            );
            self.recover().await?;
        }
        self.finish(ended.0, ended.1).await
    }
}

/// Runs one task to its end, recording everything. The transcript is saved after
/// every turn and at the end, whatever the ending.
///
/// This is the task guard, for `run` and the daemon alike: a panic anywhere in the task
/// ends it with `error`, its open calls answered and `task_finished` recorded, and is
/// never passed on to the caller. `Err` means only that the audit log failed.
pub async fn run_task(env: &TaskEnv, spec: &TaskSpec) -> Result<TaskOutcome, EventError> {
    let transcript = initial_transcript(env, spec);
    // The budget counts what the task keeps on disk: a resumed task's earlier
    // output files count too.
    let output_dir = env
        .services
        .config
        .current()
        .paths
        .transcripts
        .join(&spec.task_id);
    env.spool_used.store(
        crate::tools::kept_output_bytes(&output_dir),
        std::sync::atomic::Ordering::SeqCst,
    );
    // A resumed task's history counts: its ids were used too.
    let used_ids = transcript
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(Message::answerable_tool_uses)
        .map(|(id, _, _)| id)
        .collect();
    let mut run = TaskRun {
        env,
        spec,
        turn: transcript.turns.len() as u32,
        transcript,
        started: Instant::now(),
        ledger: guard::Ledger::default(),
        compact_due: None,
        used_ids,
        hold: Hold::default(),
    };
    let (ended, panic) = match guard::catch(run.drive()).await {
        Ok(Ok(ended)) => (ended, None),
        Ok(Err(e)) => {
            // The audit log failed: nothing more may happen unrecorded, but the
            // end itself is still worth a try: a full disk gives up its reserve for
            // exactly this line (docs/events.md). If it fails too, the caller owes it.
            let error = e.to_string();
            return match run.finish(StopReason::Error, Some(error)).await {
                Ok(outcome) => Ok(outcome),
                Err(_) => Err(e),
            };
        }
        Err(panic) => ((StopReason::Error, Some(panic.to_string())), Some(panic)),
    };
    match guard::catch(run.conclude(ended, panic.is_some())).await {
        Ok(outcome) => outcome,
        Err(late) => {
            let error = match &panic {
                Some(first) => format!("{first}; then, ending the task: {late}"),
                None => late.to_string(),
            };
            run.finish_after_late_panic(error).await
        }
    }
}

/// Whether `spec` starts a task from its first request (`task_started`): a new
/// task, or one whose transcript was saved `queued` and never ran. Anything else
/// continues a run (`task_resumed`).
fn starts_fresh(spec: &TaskSpec) -> bool {
    spec.resume
        .as_ref()
        .is_none_or(|t| t.status == TaskStatus::Queued && !t.resume_queued)
}

/// The transcript of a task accepted but not yet started: status `queued`, the
/// prompt as its first user message, and what it needs to be started later
/// (`max_turns`, `source`, `by`). The daemon saves it before answering 202, so an
/// accepted task survives a crash; [`run_task`] starts it as a new task.
pub fn queued_transcript(spec: &TaskSpec, model: String, by: String) -> Transcript {
    Transcript {
        status: TaskStatus::Queued,
        model,
        by: Some(by),
        ..fresh_transcript(spec)
    }
}

/// A new running transcript holding the prompt; the model is left empty for the
/// caller to set.
fn fresh_transcript(spec: &TaskSpec) -> Transcript {
    Transcript {
        task_id: spec.task_id.clone(),
        model: String::new(),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        status: TaskStatus::Running,
        stop_reason: None,
        answer: None,
        error: None,
        usage: Usage::default(),
        usd: Some(0.0),
        messages: vec![Message::user(vec![Block::text(spec.prompt.clone())])],
        turns: Vec::new(),
        max_turns: spec.max_turns,
        source: Some(spec.source.clone()),
        by: None,
        resume_queued: false,
    }
}

/// The transcript a task starts from: the resumed (or queued) one, running now, or
/// a new one holding the prompt.
fn initial_transcript(env: &TaskEnv, spec: &TaskSpec) -> Transcript {
    let loaded = env.services.config.current();
    if let Some(t) = &spec.resume {
        // A transcript from before cost accounting: its cost follows from its usage
        // (prices are linear in each kind of token), so a budget still applies.
        let usd = t.usd.or_else(|| {
            crate::usage::price_of(&t.model, &loaded.config.pricing).map(|p| p.cost(&t.usage))
        });
        return Transcript {
            status: TaskStatus::Running,
            stop_reason: None,
            answer: None,
            error: None,
            usd,
            resume_queued: false,
            ..t.clone()
        };
    }
    Transcript {
        model: loaded.config.api.model.clone(),
        ..fresh_transcript(spec)
    }
}

impl TaskRun<'_> {
    /// Ending the task panicked (saving or recording it): the transcript keeps its
    /// last saved state, but the log still gets the task's end, with `error`.
    async fn finish_after_late_panic(&mut self, error: String) -> Result<TaskOutcome, EventError> {
        self.env.cancel.cancel();
        self.record(Event::TaskFinished {
            stop_reason: StopReason::Error.as_str().into(),
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            duration_ms: self.started.elapsed().as_millis() as u64,
            error: Some(error.clone()),
        })
        .await?;
        Ok(TaskOutcome {
            stop_reason: StopReason::Error,
            answer: String::new(),
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            error: Some(error),
            interrupted: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_ignores_order_and_key_order() {
        let a = vec![
            (
                "1".into(),
                "read_file".into(),
                json!({"path": "a", "limit": 2}),
            ),
            ("2".into(), "list_dir".into(), json!({})),
        ];
        let b = vec![
            ("9".into(), "list_dir".into(), json!({})),
            (
                "8".into(),
                "read_file".into(),
                json!({"limit": 2, "path": "a"}),
            ),
        ];
        assert_eq!(call_signature(&a), call_signature(&b));
        let c = vec![("1".into(), "read_file".into(), json!({"path": "b"}))];
        assert_ne!(call_signature(&a), call_signature(&c));
    }
}
