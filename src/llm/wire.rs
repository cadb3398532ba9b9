//! Anthropic Messages API wire types.
//!
//! Content blocks are kept as the raw JSON the API sent ([`Block`]), so a block type
//! harnessd does not know — or a field it does not model, or a thinking block's
//! signature — goes back byte for byte. [`KnownBlock`] is the typed view used to
//! act on a block; it is never what is sent.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::protocol::Usage;

/// One content block, exactly as received or built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Block(pub Value);

/// The typed view of the block kinds harnessd acts on.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum KnownBlock {
    /// Text from the model or the user.
    Text {
        /// The text.
        text: String,
    },
    /// The model asks for a tool call.
    ToolUse {
        /// Id the result must quote.
        id: String,
        /// Tool name.
        name: String,
        /// Tool input (any JSON; validated later).
        #[serde(default)]
        input: Value,
    },
    /// A tool's result, sent by harnessd.
    ToolResult {
        /// The `tool_use` id answered.
        tool_use_id: String,
    },
    /// Extended thinking; echoed back verbatim with its signature.
    Thinking {
        /// The thinking text.
        thinking: String,
    },
    /// Redacted thinking; echoed back verbatim.
    RedactedThinking {
        /// Opaque data.
        data: String,
    },
}

impl Block {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Block {
        Block(json!({"type": "text", "text": text.into()}))
    }

    /// A `tool_result` block with text content.
    pub fn tool_result(tool_use_id: &str, content: &str, is_error: bool) -> Block {
        let mut obj = Map::new();
        obj.insert("type".into(), "tool_result".into());
        obj.insert("tool_use_id".into(), tool_use_id.into());
        obj.insert("content".into(), content.into());
        if is_error {
            obj.insert("is_error".into(), true.into());
        }
        Block(Value::Object(obj))
    }

    /// The typed view, or `None` for a block type harnessd does not act on.
    pub fn known(&self) -> Option<KnownBlock> {
        KnownBlock::deserialize(&self.0).ok()
    }

    /// A `tool_use` block's id, when it has a usable one (a non-empty string).
    pub fn tool_use_id(&self) -> Option<&str> {
        self.0
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
    }

    /// The block's `type` field.
    pub fn kind(&self) -> &str {
        self.0.get("type").and_then(Value::as_str).unwrap_or("")
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user (prompts and tool results).
    User,
    /// The model.
    Assistant,
}

/// One `tool_use` block of an assistant message: the call the model asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    /// The id its `tool_result` must quote.
    pub id: String,
    /// The tool's name, as the model wrote it (not yet known to exist).
    pub name: String,
    /// The tool's input, any JSON until it is validated against the schema.
    pub input: Value,
}

/// One message of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Content blocks.
    pub content: Vec<Block>,
}

impl Message {
    /// A user message.
    pub fn user(content: Vec<Block>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }

    /// The `tool_use` blocks of the message, in order.
    pub fn tool_uses(&self) -> Vec<ToolUse> {
        self.content
            .iter()
            .filter_map(|b| match b.known() {
                Some(KnownBlock::ToolUse { id, name, input }) => Some(ToolUse { id, name, input }),
                _ => None,
            })
            .collect()
    }

    /// Every `tool_use` block that has an id, in order and repeats included, with
    /// its name and input as far as they are usable (`""` and null otherwise). This
    /// is what must be answered when a response that breaks the protocol is not
    /// acted on; [`Message::tool_uses`] skips a malformed block instead.
    pub fn answerable_tool_uses(&self) -> Vec<ToolUse> {
        self.content
            .iter()
            .filter(|b| b.kind() == "tool_use")
            .filter_map(|b| {
                let id = b.tool_use_id()?.to_string();
                let name = b.0.get("name").and_then(Value::as_str).unwrap_or("");
                let input = b.0.get("input").cloned().unwrap_or(Value::Null);
                Some(ToolUse {
                    id,
                    name: name.to_string(),
                    input,
                })
            })
            .collect()
    }

    /// The message's text blocks joined.
    pub fn text(&self) -> String {
        let texts: Vec<String> = self
            .content
            .iter()
            .filter_map(|b| match b.known() {
                Some(KnownBlock::Text { text }) => Some(text),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }
}

/// The `stop_reason` values of the Messages API that harnessd acts on; any other
/// value is a response it cannot interpret safely (docs/operating.md: an `error` stop).
pub const KNOWN_STOP_REASONS: [&str; 6] = [
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "pause_turn",
    "refusal",
];

/// How a response breaks the Messages API protocol. Such a response is not acted
/// on: guessing what the model meant could run a call it never asked for, or run
/// one twice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// `stop_reason` is absent, null or empty.
    #[error("the response has no stop_reason")]
    MissingStopReason,
    /// A `stop_reason` this version does not know.
    #[error("unknown stop_reason \"{0}\"")]
    UnknownStopReason(String),
    /// A `tool_use` block whose `id` is absent, not a string or empty: it cannot
    /// be answered.
    #[error("a tool_use block without an id (block {index} of the content, from 0)")]
    MissingToolUseId {
        /// Index of the block in the response's content.
        index: usize,
    },
    /// Two `tool_use` blocks of one response share an id.
    #[error("tool_use id \"{0}\" appears more than once in one response")]
    DuplicateToolUseId(String),
    /// A `tool_use` block reuses the id of a call made earlier in the task (an
    /// earlier response, or the history a resumed task started from).
    #[error("tool_use id \"{0}\" was already used by an earlier call of this task")]
    RepeatedToolUseId(String),
    /// A `tool_use` block with an id but no usable `name` or `input`.
    #[error("tool_use block \"{id}\" is malformed: {reason}")]
    MalformedToolUse {
        /// The block's id.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Checks a response's stop reason (`""` when it had none) and its content
/// against the protocol; the first problem found is returned.
pub fn check_protocol(stop_reason: &str, content: &[Block]) -> Result<(), ProtocolError> {
    if stop_reason.is_empty() {
        return Err(ProtocolError::MissingStopReason);
    }
    if !KNOWN_STOP_REASONS.contains(&stop_reason) {
        return Err(ProtocolError::UnknownStopReason(stop_reason.to_string()));
    }
    let mut seen = std::collections::HashSet::new();
    for (index, block) in content.iter().enumerate() {
        if block.kind() != "tool_use" {
            continue;
        }
        let Some(id) = block.tool_use_id() else {
            return Err(ProtocolError::MissingToolUseId { index });
        };
        if !seen.insert(id) {
            return Err(ProtocolError::DuplicateToolUseId(id.to_string()));
        }
        if let Err(e) = KnownBlock::deserialize(&block.0) {
            return Err(ProtocolError::MalformedToolUse {
                id: id.to_string(),
                reason: e.to_string(),
            });
        }
    }
    Ok(())
}

/// Checks that no `tool_use` of `content` reuses an id in `used` (the ids of the
/// task's earlier calls); the first reused id is returned.
pub fn check_fresh_ids(
    content: &[Block],
    used: &std::collections::HashSet<String>,
) -> Result<(), ProtocolError> {
    match content
        .iter()
        .filter(|b| b.kind() == "tool_use")
        .filter_map(Block::tool_use_id)
        .find(|id| used.contains(*id))
    {
        Some(id) => Err(ProtocolError::RepeatedToolUseId(id.to_string())),
        None => Ok(()),
    }
}

/// A successful Messages API response (the fields harnessd uses).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Response {
    /// Must be `assistant`.
    pub role: Role,
    /// The assistant's content, kept raw.
    pub content: Vec<Block>,
    /// Why the model stopped: `end_turn`, `tool_use`, `max_tokens`, `pause_turn`,
    /// `refusal`, `stop_sequence`, or a value a newer API adds.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Tokens of this request.
    #[serde(default)]
    pub usage: Usage,
    /// The response's share of the memory budget, held by whoever holds the
    /// response until it has been saved (not part of the message).
    #[serde(skip)]
    pub hold: Hold,
}

/// Keeps a response's [`super::Lease`] while copies of it are being made (recorded,
/// appended to the history, saved with the transcript); dropping the last clone
/// returns the share. Never compared: two responses are equal by their message.
#[derive(Debug, Clone, Default)]
pub struct Hold {
    _lease: Option<std::sync::Arc<super::Lease>>,
}

impl Hold {
    /// Holds `lease`.
    pub fn new(lease: super::Lease) -> Hold {
        Hold {
            _lease: Some(std::sync::Arc::new(lease)),
        }
    }
}

impl PartialEq for Hold {
    fn eq(&self, _: &Hold) -> bool {
        true
    }
}

/// Tool choice of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model may not call tools.
    None,
}

/// One Messages API request. It borrows the history: a long task's messages are
/// serialised once per request, never copied.
#[derive(Debug, Clone, Serialize)]
pub struct Request<'a> {
    /// Model id.
    pub model: String,
    /// Output cap.
    pub max_tokens: u32,
    /// System prompt blocks.
    pub system: Vec<Value>,
    /// Tool definitions.
    pub tools: Vec<Value>,
    /// The history.
    pub messages: &'a [Message],
    /// Set only when tools are disabled for the summary request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Extended thinking, when enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Value>,
    /// A message whose last block gets a cache breakpoint of its own: the end of
    /// a compacted prefix, so it is cached again and stays cached.
    #[serde(skip)]
    pub cache_prefix: Option<usize>,
    /// Ask for server-sent events (`api.stream`); the assembled answer is the same.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_blocks_and_fields_survive_a_round_trip() {
        let raw = r#"{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"c2ln=="},{"type":"server_tool_use","id":"s1","name":"web_search","input":{"q":"x"}},{"type":"text","text":"hi","citations":[{"a":1}]}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}"#;
        let resp: Response = serde_json::from_str(raw).unwrap();
        let msg = Message {
            role: resp.role,
            content: resp.content,
        };
        let back = serde_json::to_value(&msg).unwrap();
        let orig: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(back["content"], orig["content"]);
        assert_eq!(
            serde_json::to_string(&back["content"]).unwrap(),
            serde_json::to_string(&orig["content"]).unwrap()
        );
        assert_eq!(msg.text(), "hi");
        assert_eq!(msg.content[1].known(), None);
    }

    fn blocks(v: Value) -> Vec<Block> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn protocol_check_names_what_is_wrong() {
        let ok = blocks(json!([{"type": "tool_use", "id": "a", "name": "x", "input": {}}]));
        assert_eq!(check_protocol("tool_use", &ok), Ok(()));
        assert_eq!(
            check_protocol("", &ok),
            Err(ProtocolError::MissingStopReason)
        );
        assert_eq!(
            check_protocol("model_context_window_exceeded", &ok),
            Err(ProtocolError::UnknownStopReason(
                "model_context_window_exceeded".into()
            ))
        );
        let no_id = blocks(
            json!([{"type": "text", "text": "t"}, {"type": "tool_use", "id": "", "name": "x"}]),
        );
        assert_eq!(
            check_protocol("tool_use", &no_id),
            Err(ProtocolError::MissingToolUseId { index: 1 })
        );
        let dup = blocks(json!([
            {"type": "tool_use", "id": "a", "name": "x", "input": {}},
            {"type": "tool_use", "id": "a", "name": "y", "input": {}}
        ]));
        assert_eq!(
            check_protocol("tool_use", &dup),
            Err(ProtocolError::DuplicateToolUseId("a".into()))
        );
        let used: std::collections::HashSet<String> = ["a".to_string()].into();
        let later = blocks(json!([
            {"type": "tool_use", "id": "b", "name": "x", "input": {}},
            {"type": "tool_use", "id": "a", "name": "y", "input": {}}
        ]));
        assert_eq!(
            check_fresh_ids(&later, &used),
            Err(ProtocolError::RepeatedToolUseId("a".into()))
        );
        assert_eq!(check_fresh_ids(&later[..1], &used), Ok(()));
        let no_name = blocks(json!([{"type": "tool_use", "id": "a", "input": {}}]));
        assert!(matches!(
            check_protocol("tool_use", &no_name),
            Err(ProtocolError::MalformedToolUse { .. })
        ));
        let msg = Message {
            role: Role::Assistant,
            content: [
                dup,
                no_name,
                blocks(json!([{"type": "tool_use", "name": "z"}])),
            ]
            .concat(),
        };
        let ids: Vec<String> = msg
            .answerable_tool_uses()
            .into_iter()
            .map(|u| u.id)
            .collect();
        assert_eq!(ids, ["a", "a", "a"]);
    }
}
