//! The bodies of the control API's requests and responses (docs/api.md), one type per
//! body. Field order is wire order (serde_json keeps it), so reordering a field
//! changes the bytes every client sees.

use serde::{Deserialize, Serialize};

use super::approval::ApprovalRequest;
use super::task::{StopReason, TaskStatus};
use super::usage::Usage;

/// `POST /v1/tasks`: a task to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
// An unknown field is a client's mistake (a misspelt `max_turns` would otherwise
// run with the default silently), so it is refused.
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// What the model is asked; must not be empty.
    pub prompt: String,
    /// Override of `loop.max_turns` for this task; at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Override of `api.model` for this task; it keeps it when resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A W3C `traceparent` (the `traceparent` header may carry it instead): the
    /// task's spans join the caller's trace, under its span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// The answer to `POST /v1/tasks` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// The id the new task is known by.
    pub task_id: String,
}

/// A task as the API shows it (`GET /v1/tasks/{id}`, and the answer to cancel and
/// resume).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The task's id.
    pub task_id: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// Why it stopped, once finished.
    pub stop_reason: Option<StopReason>,
    /// Tokens used so far, updated after every model response.
    pub usage: Usage,
    /// The start of the prompt (at most [`Task::PROMPT_CHARS`] characters), for
    /// listings; absent for tasks the daemon found on disk at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// US dollars spent so far; absent when unknown (a model without a price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    /// The model's final text, once finished. Absent from list items: an answer
    /// may be megabytes, and `GET /v1/tasks/{id}` reads it from the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// What went wrong, when `stop_reason` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the task was created (RFC 3339).
    pub created: String,
    /// When the task last changed (RFC 3339).
    pub updated: String,
    /// For a child task (started by a `delegate` call): its parent's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<String>,
}

impl Task {
    /// How much of the prompt a task keeps for listings.
    pub const PROMPT_CHARS: usize = 100;

    /// The start of `prompt` as a task keeps it; `None` for an empty one.
    pub fn prompt_start(prompt: &str) -> Option<String> {
        if prompt.is_empty() {
            return None;
        }
        let mut start: String = prompt.chars().take(Self::PROMPT_CHARS).collect();
        if start.len() < prompt.len() {
            start.push('…');
        }
        Some(start)
    }
}

/// The answer to `GET /v1/tasks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskList {
    /// One page of tasks, newest first, without their answers.
    pub tasks: Vec<Task>,
    /// The cursor of the following page (pass it as `before`); absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// One pending approval: the call that waits for a human and when it began
/// waiting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Approval {
    /// What is asked: the call, its task and the rule that asked.
    #[serde(flatten)]
    pub request: ApprovalRequest,
    /// When it was asked (RFC 3339).
    pub requested_at: String,
}

/// The answer to `GET /v1/approvals`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalList {
    /// Every pending approval, oldest first.
    pub approvals: Vec<Approval>,
}

/// `POST /v1/approvals/{id}`: the answer to one approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// `approve` or `deny`. A string rather than an enum so that the daemon, not
    /// the JSON decoder, names a wrong value in its error.
    pub decision: String,
    /// Why, passed on to the model. Sent as `null` when absent, as clients always
    /// have.
    #[serde(default)]
    pub reason: Option<String>,
    /// With `approve`: also add the narrowest allow rule for the call to
    /// settings.json, so the same call runs without asking (`approve --remember`).
    /// Left out of the body when false, as clients always have.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remember: bool,
}

impl DecisionRequest {
    /// The decision word for approving.
    pub const APPROVE: &'static str = "approve";
    /// The decision word for denying.
    pub const DENY: &'static str = "deny";

    /// Approves (`approve` true) or denies, with an optional reason.
    pub fn new(approve: bool, reason: Option<String>) -> DecisionRequest {
        DecisionRequest {
            decision: if approve { Self::APPROVE } else { Self::DENY }.to_string(),
            reason,
            remember: false,
        }
    }

    /// Whether the decision approves; `None` when it is neither word.
    pub fn approves(&self) -> Option<bool> {
        match self.decision.as_str() {
            Self::APPROVE => Some(true),
            Self::DENY => Some(false),
            _ => None,
        }
    }
}

/// The answer to `POST /v1/approvals/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionResponse {
    /// The approval answered.
    pub approval_id: String,
    /// The decision as given: `approve` or `deny`.
    pub decision: String,
    /// The allow rules that now let the same call run without asking, when
    /// `remember` was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remembered: Option<Vec<String>>,
}

/// Every error the API returns, whatever the endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A machine-readable kind: `not_found`, `invalid_request`, `conflict`…
    #[serde(rename = "type")]
    pub kind: String,
    /// A sentence for a human.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The bytes the clients and scripts have always seen.
    #[test]
    fn wire_shapes_are_unchanged() {
        let submit = SubmitRequest {
            prompt: "p".into(),
            max_turns: None,
            model: None,
            traceparent: None,
        };
        assert_eq!(serde_json::to_string(&submit).unwrap(), r#"{"prompt":"p"}"#);
        let answer = DecisionRequest::new(false, None);
        assert_eq!(
            serde_json::to_string(&answer).unwrap(),
            r#"{"decision":"deny","reason":null}"#
        );
        let error = ErrorBody {
            error: ErrorDetail {
                kind: "not_found".into(),
                message: "no task".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&error).unwrap(),
            r#"{"error":{"type":"not_found","message":"no task"}}"#
        );
        let list = TaskList {
            tasks: vec![],
            next: None,
        };
        assert_eq!(serde_json::to_string(&list).unwrap(), r#"{"tasks":[]}"#);
    }

    #[test]
    fn a_task_round_trips() {
        let v = json!({
            "task_id": "t1", "status": "finished", "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 2,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            "answer": "hi", "created": "a", "updated": "b"
        });
        let task: Task = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(task.status, TaskStatus::Finished);
        assert_eq!(serde_json::to_value(&task).unwrap(), v);
    }

    #[test]
    fn decisions_are_two_words() {
        assert_eq!(DecisionRequest::new(true, None).approves(), Some(true));
        assert_eq!(DecisionRequest::new(false, None).approves(), Some(false));
        let maybe = DecisionRequest {
            decision: "maybe".into(),
            reason: None,
            remember: false,
        };
        assert_eq!(maybe.approves(), None);
    }
}

/// `POST /v1/console/links`'s body.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkRequest {
    /// Who the link is for: actions through it are `console:<name>`.
    pub name: String,
}

/// `POST /v1/console/links`'s answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct LinkResponse {
    /// The link's path and token, to open on `daemon.listen` or a port
    /// forwarded to the socket.
    pub path: String,
    /// The whole link on `daemon.listen`, when it is set.
    pub url: Option<String>,
    /// When the link stops working if unused (RFC 3339).
    pub expires_at: String,
}
