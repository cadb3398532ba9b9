//! How the fake API streams a scripted message: the exact event sequence of the
//! Anthropic Messages API (`message_start`, `ping`, per block
//! `content_block_start` / `_delta`* / `_stop`, `message_delta`, `message_stop`),
//! built from the non-streaming body, so one script serves both modes and the
//! assembled message must equal that body.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

/// How a streamed reply departs from a clean stream.
#[derive(Debug, Clone, Default)]
pub struct StreamPlan {
    /// Tool input JSON streamed for a block instead of its `input` (by block
    /// index): a `max_tokens` cut sends incomplete JSON.
    pub partial_inputs: HashMap<usize, String>,
    /// Close the connection after this many events, before `message_stop`.
    pub cut_after: Option<usize>,
    /// Send an `error` event of this type after this many events, then end.
    pub error_after: Option<(usize, String)>,
    /// Go silent for this long after this many events, then go on.
    pub stall_after: Option<(usize, std::time::Duration)>,
    /// After this many events, send a `ping` event every `.1` for `.2`, then go
    /// on: a stream kept alive without ever making progress.
    pub pings_after: Option<(usize, std::time::Duration, std::time::Duration)>,
}

/// One event in wire form: `event: <type>\ndata: <json>\n\n`.
fn event(data: Value) -> String {
    let kind = data["type"].as_str().unwrap_or("").to_string();
    format!("event: {kind}\ndata: {data}\n\n")
}

/// `s` in pieces of `n` characters (never inside a character: deltas are JSON
/// strings; the byte stream is cut inside characters elsewhere), and in at most
/// about 64 pieces, so a megabyte answer is not a million events.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let n = n.max(chars.len() / 64);
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

fn without(block: &Map<String, Value>, key: &str) -> Map<String, Value> {
    block
        .iter()
        .filter(|(k, _)| k.as_str() != key)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn delta(index: usize, delta: Value) -> String {
    event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

/// The events of one content block.
fn block_events(index: usize, block: &Value, plan: &StreamPlan, out: &mut Vec<String>) {
    let Some(obj) = block.as_object() else {
        return;
    };
    let mut start = obj.clone();
    let mut deltas = Vec::new();
    match block["type"].as_str().unwrap_or("") {
        "text" => {
            start.insert("text".into(), "".into());
            for p in pieces(block["text"].as_str().unwrap_or(""), 3) {
                deltas.push(delta(index, json!({"type": "text_delta", "text": p})));
            }
        }
        "tool_use" => {
            start.insert("input".into(), json!({}));
            let input = plan
                .partial_inputs
                .get(&index)
                .cloned()
                .unwrap_or_else(|| block["input"].to_string());
            for p in pieces(&input, 4) {
                deltas.push(delta(
                    index,
                    json!({"type": "input_json_delta", "partial_json": p}),
                ));
            }
        }
        "thinking" => {
            start = without(obj, "signature");
            start.insert("thinking".into(), "".into());
            for p in pieces(block["thinking"].as_str().unwrap_or(""), 5) {
                deltas.push(delta(
                    index,
                    json!({"type": "thinking_delta", "thinking": p}),
                ));
            }
            if let Some(sig) = block["signature"].as_str() {
                deltas.push(delta(
                    index,
                    json!({"type": "signature_delta", "signature": sig}),
                ));
            }
        }
        // Any other block (redacted thinking, server tool results, types not yet
        // invented) arrives whole in its start event.
        _ => {}
    }
    out.push(event(
        json!({"type": "content_block_start", "index": index, "content_block": start}),
    ));
    out.extend(deltas);
    out.push(event(json!({"type": "content_block_stop", "index": index})));
}

/// The whole event stream of `message` (a non-streaming Messages API body).
pub fn message_events(message: &Value, plan: &StreamPlan) -> Vec<String> {
    let mut head = message.clone();
    head["content"] = json!([]);
    head["stop_reason"] = Value::Null;
    head["stop_sequence"] = Value::Null;
    let usage = message["usage"].clone();
    if head["usage"].get("output_tokens").is_some() {
        head["usage"]["output_tokens"] = json!(1);
    }
    let mut out = vec![
        event(json!({"type": "message_start", "message": head})),
        event(json!({"type": "ping"})),
    ];
    for (i, block) in message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        block_events(i, block, plan, &mut out);
    }
    let mut final_usage = Map::new();
    if let Some(n) = usage.get("output_tokens") {
        final_usage.insert("output_tokens".into(), n.clone());
    }
    out.push(event(json!({
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
        "usage": final_usage,
    })));
    out.push(event(json!({"type": "message_stop"})));
    out
}

/// A `ping` event, as the API sends to keep a stream alive.
pub fn ping_event() -> String {
    event(json!({"type": "ping"}))
}

/// The `error` event the API sends when it fails mid-stream.
pub fn error_event(kind: &str) -> String {
    event(json!({"type": "error", "error": {"type": kind, "message": format!("fake {kind}")}}))
}
