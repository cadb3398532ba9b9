//! Assembles a streamed Messages API response from its events, so the result is
//! the message a non-streaming request returns, block for block: `message_start`
//! gives the skeleton, `content_block_start` each block as the API began it (a block
//! type harnessd does not know arrives whole there and is kept as it is), deltas
//! extend it, `message_delta` sets the stop reason and the final usage.
//!
//! Pure: events in, a [`Response`] out. Reading the bytes, the cap and the idle
//! timeout belong to the client.

use serde_json::{Map, Value};

use super::sse::SseEvent;
use super::wire::Response;

/// Why a stream did not give a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// An `error` event: the API failed mid-stream (e.g. `overloaded_error`).
    #[error("{kind}: {message}")]
    Api {
        /// The error's `type`.
        kind: String,
        /// The error's message.
        message: String,
    },
    /// The events do not make a message.
    #[error("malformed event stream: {0}")]
    Malformed(String),
}

impl StreamError {
    /// The HTTP status the same error has when the API answers it before the
    /// stream starts, so a mid-stream error is retried exactly as that status is
    /// (docs/config.md). `None` for an error type without a status.
    pub fn status(&self) -> Option<u16> {
        let StreamError::Api { kind, .. } = self else {
            return None;
        };
        Some(match kind.as_str() {
            // llama.cpp's refusal of a request longer than its context.
            "invalid_request_error" | "exceed_context_size_error" => 400,
            "authentication_error" => 401,
            "permission_error" => 403,
            "not_found_error" => 404,
            "request_too_large" => 413,
            "rate_limit_error" => 429,
            "timeout_error" => 504,
            "overloaded_error" => 529,
            // `api_error` and anything newer: a server-side failure.
            _ => 500,
        })
    }
}

fn malformed<T>(what: impl Into<String>) -> Result<T, StreamError> {
    Err(StreamError::Malformed(what.into()))
}

/// The message being assembled.
#[derive(Debug, Default)]
pub struct Assembler {
    /// The `message_start` message, content and stop reason still empty.
    message: Option<Map<String, Value>>,
    content: Vec<Value>,
    /// Tool input JSON received so far, per block index (`None`: no delta yet).
    partial_json: Vec<Option<String>>,
    stopped: bool,
}

impl Assembler {
    /// Applies one event. Returns the text of a `text_delta` (for live output).
    pub fn apply(&mut self, ev: &SseEvent) -> Result<Option<String>, StreamError> {
        let data: Value = match serde_json::from_str(&ev.data) {
            Ok(v) => v,
            Err(e) => return malformed(format!("event {:?} data is not JSON: {e}", ev.event)),
        };
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(&ev.event);
        match kind {
            "message_start" => self.start(data),
            "content_block_start" => self.block_start(data),
            "content_block_delta" => return self.delta(data),
            "content_block_stop" => self.block_stop(&data),
            "message_delta" => self.message_delta(data),
            "message_stop" => {
                self.stopped = true;
                Ok(())
            }
            "error" => {
                let err = data.get("error").cloned().unwrap_or(Value::Null);
                let field = |k: &str| err.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                Err(StreamError::Api {
                    kind: field("type"),
                    message: field("message"),
                })
            }
            // `ping`, and event types a newer API adds, carry nothing to keep.
            _ => Ok(()),
        }
        .map(|()| None)
    }

    /// Whether `message_stop` has arrived.
    pub fn is_complete(&self) -> bool {
        self.stopped
    }

    fn message(&mut self) -> Result<&mut Map<String, Value>, StreamError> {
        match self.message.as_mut() {
            Some(m) => Ok(m),
            None => malformed("an event before message_start"),
        }
    }

    fn start(&mut self, mut data: Value) -> Result<(), StreamError> {
        if self.message.is_some() {
            return malformed("a second message_start");
        }
        match data.get_mut("message").map(Value::take) {
            Some(Value::Object(m)) => {
                self.message = Some(m);
                Ok(())
            }
            _ => malformed("message_start without a message object"),
        }
    }

    fn block_start(&mut self, mut data: Value) -> Result<(), StreamError> {
        self.message()?;
        let index = index_of(&data)?;
        if index != self.content.len() {
            return malformed(format!(
                "content_block_start index {index}, expected {}",
                self.content.len()
            ));
        }
        match data.get_mut("content_block").map(Value::take) {
            Some(block @ Value::Object(_)) => {
                self.content.push(block);
                self.partial_json.push(None);
                Ok(())
            }
            _ => malformed(format!("content_block_start {index} without a block")),
        }
    }

    fn delta(&mut self, data: Value) -> Result<Option<String>, StreamError> {
        let index = index_of(&data)?;
        let Some(block) = self.content.get_mut(index) else {
            return malformed(format!("a delta for block {index}, which has not started"));
        };
        let delta = data.get("delta").cloned().unwrap_or(Value::Null);
        let text = |k: &str| match delta.get(k).and_then(Value::as_str) {
            Some(s) => Ok(s),
            None => malformed(format!("a delta of block {index} without its \"{k}\"")),
        };
        match delta.get("type").and_then(Value::as_str).unwrap_or("") {
            "text_delta" => {
                let t = text("text")?;
                append(block, "text", t);
                return Ok(Some(t.to_string()));
            }
            "thinking_delta" => append(block, "thinking", text("thinking")?),
            "signature_delta" => append(block, "signature", text("signature")?),
            "input_json_delta" => {
                let piece = text("partial_json")?;
                if let Some(slot) = self.partial_json.get_mut(index) {
                    slot.get_or_insert_with(String::new).push_str(piece);
                }
            }
            "citations_delta" => {
                let citation = delta.get("citation").cloned().unwrap_or(Value::Null);
                if let Some(obj) = block.as_object_mut() {
                    let list = obj.entry("citations").or_insert(Value::Array(Vec::new()));
                    if let Some(list) = list.as_array_mut() {
                        list.push(citation);
                    }
                }
            }
            other => {
                return malformed(format!(
                    "unknown delta type {other:?} for block {index}: it cannot be applied, \
                     so the message cannot be assembled as sent"
                ));
            }
        }
        Ok(None)
    }

    /// A tool input's JSON is whole once its block stops; an input cut by
    /// `max_tokens` stays as the block began it (checked in [`Self::finish`]).
    fn block_stop(&mut self, data: &Value) -> Result<(), StreamError> {
        let index = index_of(data)?;
        if index >= self.content.len() {
            return malformed(format!(
                "content_block_stop for block {index}, never started"
            ));
        }
        Ok(())
    }

    fn message_delta(&mut self, data: Value) -> Result<(), StreamError> {
        let message = self.message()?;
        if let Some(Value::Object(delta)) = data.get("delta") {
            for (k, v) in delta {
                message.insert(k.clone(), v.clone());
            }
        }
        // Later usage counts replace earlier ones field by field: message_start
        // carries the input side, message_delta the final output count.
        if let Some(Value::Object(usage)) = data.get("usage") {
            let entry = message
                .entry("usage")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(target) = entry.as_object_mut() {
                for (k, v) in usage {
                    target.insert(k.clone(), v.clone());
                }
            }
        }
        Ok(())
    }

    /// The assembled message, once `message_stop` has arrived.
    pub fn finish(mut self) -> Result<Response, StreamError> {
        if !self.stopped {
            return malformed("the stream ended before message_stop");
        }
        let Some(mut message) = self.message.take() else {
            return malformed("no message_start");
        };
        let cut_allowed = message.get("stop_reason").and_then(Value::as_str) == Some("max_tokens");
        for (index, (block, partial)) in self.content.iter_mut().zip(&self.partial_json).enumerate()
        {
            let Some(json) = partial.as_deref().filter(|j| !j.is_empty()) else {
                continue;
            };
            match serde_json::from_str::<Value>(json) {
                Ok(input) => block["input"] = input,
                Err(_) if cut_allowed => {}
                Err(e) => {
                    return malformed(format!("tool input of block {index} is not JSON: {e}"));
                }
            }
        }
        message.insert("content".into(), Value::Array(self.content));
        serde_json::from_value(Value::Object(message))
            .map_err(|e| StreamError::Malformed(format!("the assembled message: {e}")))
    }
}

fn index_of(data: &Value) -> Result<usize, StreamError> {
    match data.get("index").and_then(Value::as_u64) {
        Some(i) => usize::try_from(i).or_else(|_| malformed("block index out of range")),
        None => malformed("a content block event without an index"),
    }
}

/// Appends `piece` to the string field `key` of `block`, creating it if absent.
fn append(block: &mut Value, key: &str, piece: &str) {
    if let Some(obj) = block.as_object_mut() {
        match obj.get_mut(key) {
            Some(Value::String(s)) => s.push_str(piece),
            _ => {
                obj.insert(key.to_string(), Value::String(piece.to_string()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(data: Value) -> SseEvent {
        SseEvent {
            event: data["type"].as_str().unwrap_or("").into(),
            data: data.to_string(),
        }
    }

    fn start() -> SseEvent {
        ev(json!({"type": "message_start", "message": {
            "id": "m", "type": "message", "role": "assistant", "model": "x", "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 7, "cache_read_input_tokens": 3, "output_tokens": 1}}}))
    }

    fn run(events: &[SseEvent]) -> Result<Response, StreamError> {
        let mut a = Assembler::default();
        for e in events {
            a.apply(e)?;
        }
        a.finish()
    }

    #[test]
    fn text_tool_thinking_and_unknown_blocks_assemble() {
        let events = vec![
            start(),
            ev(json!({"type": "ping"})),
            ev(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 0})),
            ev(
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "web_search_tool_result", "tool_use_id": "s", "content": [1]}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 1})),
            ev(
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "h\u{e9}"}}),
            ),
            ev(
                json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "th\": \"a\"}"}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 3})),
            ev(
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 42}}),
            ),
            ev(json!({"type": "message_stop"})),
        ];
        let r = run(&events).unwrap();
        assert_eq!(
            serde_json::to_value(&r.content).unwrap(),
            json!([
                {"type": "thinking", "thinking": "hm", "signature": "c2ln"},
                {"type": "web_search_tool_result", "tool_use_id": "s", "content": [1]},
                {"type": "text", "text": "h\u{e9}"},
                {"type": "tool_use", "id": "t", "name": "n", "input": {"path": "a"}},
            ])
        );
        assert_eq!(r.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(r.usage.input_tokens, 7);
        assert_eq!(r.usage.cache_read_input_tokens, 3);
        assert_eq!(r.usage.output_tokens, 42);
    }

    #[test]
    fn a_cut_tool_input_is_kept_only_under_max_tokens() {
        let events = |stop: &str| {
            vec![
                start(),
                ev(
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}}}),
                ),
                ev(
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
                ),
                ev(json!({"type": "message_delta", "delta": {"stop_reason": stop}})),
                ev(json!({"type": "message_stop"})),
            ]
        };
        let r = run(&events("max_tokens")).unwrap();
        assert_eq!(r.content[0].0["input"], json!({}));
        assert!(matches!(
            run(&events("tool_use")),
            Err(StreamError::Malformed(_))
        ));
    }

    #[test]
    fn an_error_event_carries_its_status_and_a_cut_stream_is_no_message() {
        let err = run(&[
            start(),
            ev(json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})),
        ])
        .unwrap_err();
        assert_eq!(err.status(), Some(529));
        assert_eq!(err.to_string(), "overloaded_error: busy");
        let cut = run(&[start()]).unwrap_err();
        assert_eq!(
            cut,
            StreamError::Malformed("the stream ended before message_stop".into())
        );
    }
}
