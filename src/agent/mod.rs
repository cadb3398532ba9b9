//! The turn loop: send system + tools + the whole history, run the tool calls the
//! model asks for, send every result back in one user message, repeat until the
//! model ends its turn or a limit stops the task (SPEC §6).
//!
//! The loop owns the history and its invariants (every `tool_use` answered exactly
//! once, in order; the assistant message appended exactly as received). It never
//! touches the filesystem for a tool: calls go through `calls` to the executor.
//! [`run_task`] runs the task behind `guard`: a panic ends that task with `error`,
//! never its caller or the process.

mod calls;
mod guard;
mod stop;
mod transcript;

pub use calls::advertised;
pub use guard::install_panic_hook;
pub use stop::{StopReason, TaskStatus};
pub use transcript::{Transcript, TurnRecord};

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::approval::Approver;
use crate::config::{ConfigSource, Loaded};
use crate::events::{Event, EventError, EventLog};
use crate::exec::Executor;
use crate::llm::{
    AnthropicClient, Block, FailedAttempt, LlmError, Message, Request, Role, SendError, ToolChoice,
    Usage,
};
use crate::tools::{ToolDefinition, ToolName};

/// Text appended to the last request when the turn limit is reached.
pub const SUMMARY_REQUEST: &str = "The turn limit for this task has been reached, so no more \
tools can run. Summarise what you found so far and what remains to be done.";

/// What a task runs with.
pub struct TaskEnv {
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
    /// Cancels the task.
    pub cancel: CancellationToken,
}

/// A task to run.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// Its id.
    pub task_id: String,
    /// The prompt.
    pub prompt: String,
    /// Overrides `loop.max_turns`.
    pub max_turns: Option<u32>,
    /// `cli` or `api`.
    pub source: String,
    /// Continue this transcript instead of starting from `prompt`.
    pub resume: Option<Transcript>,
}

/// How a task ended.
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// The answer (the last assistant message's text).
    pub answer: String,
    /// Model requests made.
    pub turns: u32,
    /// Tokens summed.
    pub usage: Usage,
    /// The error, when stop_reason is `error`.
    pub error: Option<String>,
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

fn build_request<'a>(loaded: &Loaded, messages: &'a [Message], summary: bool) -> Request<'a> {
    let api = &loaded.config.api;
    let tools = ToolName::ALL
        .into_iter()
        .filter(|t| advertised(loaded, *t))
        .map(ToolName::definition)
        .collect();
    Request {
        model: api.model.clone(),
        max_tokens: api.max_tokens,
        system: vec![json!({"type": "text", "text": loaded.system_prompt})],
        tools,
        messages,
        tool_choice: summary.then_some(ToolChoice::None),
        thinking: api
            .thinking_budget_tokens
            .map(|b| json!({"type": "enabled", "budget_tokens": b})),
    }
}

/// Mutable state of a running task. It lives outside the guarded future, so after a
/// panic the transcript and the ledger are still here to finish the task with.
struct Run<'a> {
    env: &'a TaskEnv,
    spec: &'a TaskSpec,
    transcript: Transcript,
    turn: u32,
    started: Instant,
    /// How far the current turn's calls got; read only after a panic.
    ledger: guard::Ledger,
}

impl Run<'_> {
    async fn save(&self) {
        let dir = self.env.config.current().paths.transcripts.clone();
        if let Err(e) = self.transcript.save_async(dir).await {
            tracing::error!("cannot save transcript {}: {e}", self.spec.task_id);
        }
    }

    fn record(&self, event: Event) -> impl Future<Output = Result<u64, EventError>> + '_ {
        self.env.events.record(Some(&self.spec.task_id), event)
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
    /// daemon died before running them) are answered first; a history that ends
    /// with the model's answer gets a user turn asking it to go on.
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
        } else {
            let why = "not executed: the task was interrupted before this call ran; \
                       request it again if it is still needed";
            self.unexecuted(&uses, why).await?;
        }
        Ok(())
    }

    /// The loop proper. `Err` is an internal error (the audit log failed).
    async fn turns(&mut self) -> Result<(StopReason, Option<String>), EventError> {
        let mut last_signature: Option<String> = None;
        let mut repeats = 0u32;
        loop {
            // A task cancelled between steps (or while queued) sends nothing more.
            if self.env.cancel.is_cancelled() {
                return Ok((StopReason::Cancelled, None));
            }
            self.ledger.clear();
            let loaded = self.env.config.current();
            let limits = &loaded.config.loop_;
            let max_turns = self.spec.max_turns.unwrap_or(limits.max_turns);
            self.turn += 1;
            let after_tools = self.transcript.messages.last().is_some_and(|m| {
                m.role == Role::User && m.content.iter().any(|b| b.kind() == "tool_result")
            });
            let summary = self.turn >= max_turns && after_tools;
            if summary && let Some(last) = self.transcript.messages.last_mut() {
                last.content.push(Block::text(SUMMARY_REQUEST));
            }
            let request = build_request(&loaded, &self.transcript.messages, summary);
            self.record(Event::ModelRequest {
                turn: self.turn,
                messages: request.messages.len(),
                tools_disabled: summary,
            })
            .await?;
            let sent = Instant::now();
            // Each failed attempt becomes a `model_error` event, recorded before the
            // client waits for the next one: llm reports, the loop records.
            let (events, task_id, turn) = (&self.env.events, self.spec.task_id.as_str(), self.turn);
            let on_failure = move |f: FailedAttempt| async move {
                events
                    .record(Some(task_id), model_error(turn, f))
                    .await
                    .map(|_| ())
            };
            let sent_request = self.env.client.send(&request, &self.env.cancel, on_failure);
            let response = match sent_request.await {
                Ok(r) => r,
                Err(SendError::Model(LlmError::Cancelled)) => {
                    return Ok((StopReason::Cancelled, None));
                }
                Err(SendError::Callback(e)) => return Err(e),
                Err(SendError::Model(e)) => return Ok((StopReason::Error, Some(e.to_string()))),
            };
            let latency_ms = sent.elapsed().as_millis() as u64;
            let model_stop = response.stop_reason.clone().unwrap_or_default();
            self.record(Event::ModelResponse {
                turn: self.turn,
                stop_reason: model_stop.clone(),
                usage: response.usage,
                latency_ms,
            })
            .await?;
            self.transcript.usage.add(&response.usage);
            self.transcript.turns.push(TurnRecord {
                turn: self.turn,
                stop_reason: model_stop.clone(),
                usage: response.usage,
                latency_ms,
            });
            let message = Message {
                role: Role::Assistant,
                content: response.content,
            };
            let uses = message.tool_uses();
            self.transcript.messages.push(message);
            match model_stop.as_str() {
                "max_tokens" => {
                    if !uses.is_empty() {
                        let why = "not executed: the response was cut off by max_tokens, so this \
                                   call may be incomplete";
                        self.unexecuted(&uses, why).await?;
                    }
                    return Ok((StopReason::MaxTokens, None));
                }
                "refusal" => return Ok((StopReason::Refusal, None)),
                "pause_turn" => {
                    if self.turn >= max_turns {
                        return Ok((StopReason::MaxTurns, None));
                    }
                    continue;
                }
                _ if uses.is_empty() => {
                    let reason = if summary {
                        StopReason::MaxTurns
                    } else {
                        StopReason::EndTurn
                    };
                    return Ok((reason, None));
                }
                _ => {}
            }
            if self.transcript.usage.total() >= limits.token_budget {
                let why = format!(
                    "not executed: the task's token budget ({} tokens) is used up; the task \
                     stops here",
                    limits.token_budget
                );
                self.unexecuted(&uses, &why).await?;
                return Ok((StopReason::TokenBudget, None));
            }
            let signature = call_signature(&uses);
            repeats = if last_signature.as_ref() == Some(&signature) {
                repeats + 1
            } else {
                1
            };
            last_signature = Some(signature);
            if repeats >= limits.no_progress_repeats {
                let why = format!(
                    "not executed: the same tool calls were requested {repeats} turns in a row \
                     without progress; the task stops here"
                );
                self.unexecuted(&uses, &why).await?;
                return Ok((StopReason::NoProgress, None));
            }
            if summary || self.turn >= max_turns {
                self.unexecuted(&uses, "not executed: the task's turn limit was reached")
                    .await?;
                return Ok((StopReason::MaxTurns, None));
            }
            // Saved before the tools run: a crash mid-tool leaves the model's request
            // on disk, so a resume can answer it.
            self.save().await;
            let blocks = calls::execute_calls(
                self.env,
                &self.spec.task_id,
                loaded.clone(),
                &uses,
                &self.ledger,
            )
            .await?;
            self.push_user(blocks);
            self.save().await;
        }
    }
}

impl Run<'_> {
    /// Everything from the task's first event to its stop. `Err` is an internal error
    /// (the audit log failed).
    async fn drive(&mut self) -> Result<(StopReason, Option<String>), EventError> {
        if self.spec.resume.is_some() {
            self.record(Event::TaskResumed {
                turns_so_far: self.turn,
                source: self.spec.source.clone(),
            })
            .await?;
            self.prepare_resume().await?;
        } else {
            let loaded = self.env.config.current();
            self.record(Event::TaskStarted {
                prompt: self.spec.prompt.clone(),
                model: loaded.config.api.model.clone(),
                source: self.spec.source.clone(),
            })
            .await?;
        }
        self.save().await;
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

    /// Saves the final transcript and records `task_finished`.
    async fn finish(
        &mut self,
        stop_reason: StopReason,
        error: Option<String>,
    ) -> Result<TaskOutcome, EventError> {
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
        self.transcript.answer = Some(answer.clone());
        self.transcript.error = error.clone();
        self.save().await;
        self.record(Event::TaskFinished {
            stop_reason: stop_reason.as_str().into(),
            turns: self.turn,
            usage: self.transcript.usage,
            duration_ms: self.started.elapsed().as_millis() as u64,
            error: error.clone(),
        })
        .await?;
        Ok(TaskOutcome {
            stop_reason,
            answer,
            turns: self.turn,
            usage: self.transcript.usage,
            error,
        })
    }

    /// Ends the task after the loop stopped, or after it panicked (`panicked`).
    async fn conclude(
        &mut self,
        ended: (StopReason, Option<String>),
        panicked: bool,
    ) -> Result<TaskOutcome, EventError> {
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
    let loaded = env.config.current();
    let created = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let transcript = match &spec.resume {
        Some(t) => Transcript {
            status: TaskStatus::Running,
            stop_reason: None,
            answer: None,
            error: None,
            ..t.clone()
        },
        None => Transcript {
            task_id: spec.task_id.clone(),
            model: loaded.config.api.model.clone(),
            created,
            status: TaskStatus::Running,
            stop_reason: None,
            answer: None,
            error: None,
            usage: Usage::default(),
            messages: vec![Message::user(vec![Block::text(spec.prompt.clone())])],
            turns: Vec::new(),
        },
    };
    let mut run = Run {
        env,
        spec,
        turn: transcript.turns.len() as u32,
        transcript,
        started: Instant::now(),
        ledger: guard::Ledger::default(),
    };
    let (ended, panic) = match guard::catch(run.drive()).await {
        Ok(Ok(ended)) => (ended, None),
        Ok(Err(e)) => {
            // The audit log failed: nothing more may happen unrecorded.
            run.transcript.status = TaskStatus::Finished;
            run.transcript.stop_reason = Some(StopReason::Error);
            run.transcript.error = Some(e.to_string());
            run.save().await;
            return Err(e);
        }
        Err(panic) => ((StopReason::Error, Some(panic.to_string())), Some(panic)),
    };
    match guard::catch(run.conclude(ended, panic.is_some())).await {
        Ok(outcome) => outcome,
        Err(late) => {
            // Ending the task panicked (saving or recording it): the transcript keeps
            // its last saved state, but the log still gets the task's end.
            let error = match &panic {
                Some(first) => format!("{first}; then, ending the task: {late}"),
                None => late.to_string(),
            };
            env.cancel.cancel();
            env.events
                .record(
                    Some(&spec.task_id),
                    Event::TaskFinished {
                        stop_reason: StopReason::Error.as_str().into(),
                        turns: run.turn,
                        usage: run.transcript.usage,
                        duration_ms: run.started.elapsed().as_millis() as u64,
                        error: Some(error.clone()),
                    },
                )
                .await?;
            Ok(TaskOutcome {
                stop_reason: StopReason::Error,
                answer: String::new(),
                turns: run.turn,
                usage: run.transcript.usage,
                error: Some(error),
            })
        }
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
