//! The Messages request of one turn, built from one config snapshot: the model,
//! the system prompt, the tools offered, thinking, streaming and the cache
//! breakpoint; and the `model_error` event of a failed attempt at sending it.

use serde_json::json;

use super::calls::offered_to;
use super::{TaskEnv, compact};
use crate::config::Loaded;
use crate::events::{Event, EventError, EventLog};
use crate::knowledge::Knowledge;
use crate::llm::{FailedAttempt, Message, Request, ToolChoice};
use crate::tools::{ToolDefinition, ToolName};

/// The request of one turn. `model` is the task's own (its transcript's: the
/// `model` it was submitted with, else `api.model` when it started); empty falls
/// back to `api.model`. `tools` are the definitions offered ([`tools_offered`]).
/// The system prompt is the operator's, then what the task read at its start
/// (`knowledge`: the skills, listed while `load_skill` is offered, and `AGENTS.md`).
pub(super) fn build_request<'a>(
    loaded: &Loaded,
    model: &str,
    messages: &'a [Message],
    summary: bool,
    tools: Vec<serde_json::Value>,
    knowledge: &Knowledge,
) -> Request<'a> {
    let api = &loaded.config.api;
    let model = if model.is_empty() { &api.model } else { model };
    let list_skills = tools
        .iter()
        .any(|d| d["name"] == ToolName::LoadSkill.as_str());
    Request {
        model: model.to_string(),
        max_tokens: api.max_tokens,
        system: vec![json!({
            "type": "text",
            "text": knowledge.system_prompt(&loaded.system_prompt, list_skills),
        })],
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

/// The tools task `task_id` is offered: the built-ins it has, then the MCP tools,
/// each within the task's narrowing.
pub(super) fn tools_offered(
    env: &TaskEnv,
    task_id: &str,
    loaded: &Loaded,
) -> Vec<serde_json::Value> {
    let mcp = super::mcp_calls::offered(env, loaded)
        .into_iter()
        .filter(|d| d["name"].as_str().is_some_and(|n| env.tree.allows(n)));
    ToolName::ALL
        .into_iter()
        .filter(|t| offered_to(env, task_id, loaded, *t))
        .map(ToolName::definition)
        .chain(mcp)
        .collect()
}

/// Where the failed attempts of one request are recorded: each becomes a
/// `model_error` event, written before the client waits for the next attempt
/// (llm reports, the loop records).
pub(super) struct ModelErrors<'a> {
    /// The audit log.
    pub events: &'a EventLog,
    /// The task whose request it is.
    pub task_id: &'a str,
    /// The request's turn.
    pub turn: u32,
}

impl ModelErrors<'_> {
    /// Records one failed attempt; an `Err` abandons the request.
    pub async fn record(&self, f: FailedAttempt) -> Result<(), EventError> {
        self.events
            .record(Some(self.task_id), model_error(self.turn, f))
            .await
            .map(|_| ())
    }
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
