//! One turn: the request (the history compacted first when due), its response
//! recorded and appended as received, what the model's stop reason means, the
//! limits, and the calls run and answered in one user message.

use std::time::Instant;

use serde_json::json;

use super::request::{ModelErrors, build_request, tools_offered};
use super::{Halt, StopReason, TaskRun, TurnRecord, calls, compact, limits::Repeats};
use crate::config::Loaded;
use crate::events::{Event, EventError};
use crate::llm::{Block, Hold, LlmError, Message, Response, Role, SendError, ToolUse};

/// Text appended to the last request when the turn limit is reached.
pub const SUMMARY_REQUEST: &str = "The turn limit for this task has been reached, so no more \
tools can run. Summarise what you found so far and what remains to be done.";

/// The answer to a call in the response to a request sent with tools disabled.
const TOOLS_DISABLED: &str = "not executed: tools were disabled for this request (the \
task's turn limit was reached, so only a summary was asked for); the task stops here";

/// What the loop does after the model's stop reason is looked at, when the task
/// goes on.
enum Next {
    /// Send again without running anything (`pause_turn`).
    SendAgain,
    /// Run the calls, after the limit checks.
    RunCalls,
}

impl TaskRun<'_> {
    /// One turn: a request, its response and the calls it asks for, each answered
    /// and the transcript saved. `Err` stops the task.
    pub(super) async fn turn(&mut self, repeats: &mut Repeats) -> Result<(), Halt> {
        // A task cancelled between steps (or while queued) sends nothing more.
        if self.env.cancel.is_cancelled() {
            return Err(Halt::stop(StopReason::Cancelled));
        }
        self.ledger.clear();
        // A compaction's request may wait for room too.
        self.hold = Hold::default();
        // One snapshot for the whole turn: a reload applies from the next turn. Only
        // the policy is read again, by each call (`calls`), so that a new policy
        // decides from the very next call.
        self.loaded = self.env.services.config.current();
        let loaded = self.loaded.clone();
        super::mcp_calls::pin_new(self.env, &self.spec.task_id, &loaded).await?;
        self.compact_if_due(&loaded).await?;
        let max_turns = self.max_turns(&loaded);
        self.turn += 1;
        let summary = self.begin_turn(max_turns);
        let (model_stop, uses) = self.send(&loaded, summary).await?;
        self.settle_or_stop(&uses).await?;
        let limits = &loaded.config.loop_;
        match self
            .after_response(&model_stop, &uses, summary, max_turns)
            .await?
        {
            // No calls to run, but another paid request: the budgets hold here too.
            Next::SendAgain => {
                return match self.budget_used_up(limits) {
                    Some((reason, _)) => Err(Halt::stop(reason)),
                    None => Ok(()),
                };
            }
            Next::RunCalls => {}
        }
        let last_turn = summary || self.turn >= max_turns;
        self.check_limits(&uses, limits, repeats, last_turn).await?;
        // Saved before the tools run: a crash mid-tool leaves the model's request
        // on disk, so a resume can answer it; no tool runs unsaved.
        self.save_or_stop(&uses).await?;
        let task_id = &self.spec.task_id;
        let parent = self.as_parent();
        let (ledger, at) = (&self.ledger, (&parent, &self.knowledge));
        let blocks =
            calls::execute_calls(self.env, task_id, loaded.clone(), &uses, ledger, at).await?;
        self.push_user(blocks);
        self.absorb_children();
        self.save_soon().await?;
        // Children spend too: once they have used the budget up, the parent sends
        // nothing more.
        match self.budget_used_up(&loaded.config.loop_) {
            Some((reason, _)) => Err(Halt::stop(reason)),
            None => Ok(()),
        }
    }

    /// What a child of this task inherits.
    fn as_parent(&self) -> super::delegate::Parent {
        super::delegate::Parent {
            model: self.transcript.model.clone(),
            max_turns: self.spec.max_turns.or(self.transcript.max_turns),
            source: self.spec.source,
            traceparent: self.transcript.traceparent.clone(),
        }
    }

    /// Adds what this task's children spent since the last time to its own
    /// `usage` and `usd`, which are the task's whole spending.
    pub(super) fn absorb_children(&mut self) {
        let spent = self.env.tree.take_children();
        if spent.usage.total() == 0 && spent.usd == Some(0.0) {
            return;
        }
        self.transcript.usage.add(&spent.usage);
        self.transcript.usd = self.transcript.usd.zip(spent.usd).map(|(a, b)| a + b);
        let delegated = self
            .transcript
            .delegated
            .get_or_insert_with(super::Spent::zero);
        delegated.add(&spent.usage, spent.usd);
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

    /// Sends the history and records the response: the model's stop reason and the
    /// calls it asks for, its message already in the history. `Err` ends the task
    /// (cancelled, the model failed for good, or the log failed). A 400 saying the
    /// request exceeds the context compacts the history and sends it once more.
    async fn send(
        &mut self,
        loaded: &Loaded,
        summary: bool,
    ) -> Result<(String, Vec<ToolUse>), Halt> {
        let mut compacted = false;
        loop {
            let error = match self.send_once(loaded, summary).await {
                Ok((response, latency_ms, usd)) => {
                    let recorded = self.record_response(loaded, response, latency_ms, usd);
                    return Ok(recorded.await?);
                }
                Err(SendError::Callback(e)) => return Err(Halt::Log(e)),
                Err(SendError::Model(LlmError::Cancelled)) => {
                    return Err(Halt::stop(StopReason::Cancelled));
                }
                Err(SendError::Model(e)) => e,
            };
            if !compacted && error.exceeds_context() {
                compacted = true;
                if self.compact(loaded, compact::Trigger::TooLong).await? {
                    continue;
                }
            }
            return Err(Halt::Stop(StopReason::Error, Some(error.to_string())));
        }
    }

    /// One request with its retries: the response, its latency and its cost, or
    /// why there is none (the model's error, or the log's).
    async fn send_once(
        &mut self,
        loaded: &Loaded,
        summary: bool,
    ) -> Result<(Response, u64, Option<f64>), SendError<EventError>> {
        let request = build_request(
            loaded,
            &self.transcript.model,
            &self.transcript.messages,
            summary,
            tools_offered(self.env, &self.spec.task_id, loaded),
            &self.knowledge,
        );
        self.record(Event::ModelRequest {
            turn: self.turn,
            messages: request.messages.len(),
            tools_disabled: summary,
        })
        .await
        .map_err(SendError::Callback)?;
        // Holding a share while waiting for another could deadlock the budget.
        self.hold = Hold::default();
        let sent = Instant::now();
        let services = &self.env.services;
        let (events, task_id, turn) = (&services.events, self.spec.task_id.as_str(), self.turn);
        let errors = ModelErrors {
            events,
            task_id,
            turn,
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
        let response = services
            .client
            .send_live(&request, &self.env.cancel, |f| errors.record(f), &on_text)
            .await?;
        let latency_ms = sent.elapsed().as_millis() as u64;
        let price = crate::protocol::price_of(&request.model, &loaded.config.pricing);
        let usd = price.map(|p| p.cost(&response.usage));
        Ok((response, latency_ms, usd))
    }

    /// Records a response (`model_response`, the usage, the turn record) and appends
    /// the assistant message exactly as received; returns its stop reason and calls.
    /// `usd` is the response's cost, `None` when the model has no price.
    async fn record_response(
        &mut self,
        loaded: &Loaded,
        mut response: Response,
        latency_ms: u64,
        usd: Option<f64>,
    ) -> Result<(String, Vec<ToolUse>), EventError> {
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
        let threshold = loaded.config.context.compress_threshold_tokens;
        self.compact_due = (input > threshold).then_some(input);
        self.transcript.usage.add(&response.usage);
        self.env.tree.spend(&response.usage, usd);
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
    /// `Err` is the task's stop (the model ended its turn, a limit, a broken
    /// protocol).
    async fn after_response(
        &mut self,
        model_stop: &str,
        uses: &[ToolUse],
        summary: bool,
        max_turns: u32,
    ) -> Result<Next, Halt> {
        let checked = match self.transcript.messages.last() {
            Some(last) => crate::llm::check_protocol(model_stop, &last.content)
                .and_then(|()| crate::llm::check_fresh_ids(&last.content, &self.used_ids)),
            None => Ok(()),
        };
        if let Err(violation) = checked {
            let error =
                format!("the model's response breaks the Messages API protocol: {violation}");
            self.answer_broken(&error).await?;
            return Err(Halt::Stop(StopReason::Error, Some(error)));
        }
        self.used_ids.extend(uses.iter().map(|u| u.id.clone()));
        // The summary turn was sent with `tool_choice: none`; a server that drops
        // it (llama.cpp, Ollama) may still answer with calls. None of them runs,
        // whatever else the response says: the turn limit stands.
        if summary && !uses.is_empty() {
            self.unexecuted(uses, TOOLS_DISABLED).await?;
            return Err(Halt::stop(StopReason::MaxTurns));
        }
        match model_stop {
            "max_tokens" => {
                if !uses.is_empty() {
                    let why = "not executed: the response was cut off by max_tokens, so this \
                               call may be incomplete";
                    self.unexecuted(uses, why).await?;
                }
                Err(Halt::stop(StopReason::MaxTokens))
            }
            "refusal" => Err(Halt::stop(StopReason::Refusal)),
            "pause_turn" if self.turn >= max_turns => Err(Halt::stop(StopReason::MaxTurns)),
            "pause_turn" => Ok(Next::SendAgain),
            _ if uses.is_empty() => {
                let reason = if summary {
                    StopReason::MaxTurns
                } else {
                    StopReason::EndTurn
                };
                Err(Halt::stop(reason))
            }
            _ => Ok(Next::RunCalls),
        }
    }

    /// The response just appended breaks the protocol (`error` says how): none of
    /// its calls run, each one that has an id is answered so the transcript stays
    /// valid, and the task stops with `error`. A `tool_use` without an id stays in
    /// the history as received (it is the evidence of why the task stopped); it
    /// cannot be answered, and no further request is sent that would carry it.
    async fn answer_broken(&mut self, error: &str) -> Result<(), EventError> {
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
                if self.used_ids.contains(&call.id) {
                    blocks.push(Block::tool_result(&call.id, &why, true));
                } else {
                    let one = std::slice::from_ref(call);
                    blocks.extend(
                        calls::answer_unexecuted(self.env, &self.spec.task_id, one, &why).await?,
                    );
                }
            }
            self.push_user(blocks);
        }
        Ok(())
    }
}
