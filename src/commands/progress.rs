//! The readable progress trail of `harnessd run` on stderr, drawn from the events
//! as they are written (so it shows exactly what the record holds). Every text
//! field goes through `short`, which escapes it (SPEC §8).

use std::io::Write;

use serde_json::Value;

use crate::text::{Mode, escape};

/// A field of an event for one line of the trail: cut to `max` characters, then
/// escaped (text as a one-line field, other values as JSON), so model text in it
/// never reaches the terminal raw.
fn short(v: &Value, max: usize) -> String {
    let (s, mode) = match v {
        Value::String(s) => (s.clone(), Mode::Line),
        other => (other.to_string(), Mode::Json),
    };
    let cut = if s.chars().count() <= max {
        s
    } else {
        let head: String = s.chars().take(max).collect();
        format!("{head}…")
    };
    escape(&cut, mode).into_owned()
}

/// One line for an event, or `None` for events not worth a line.
pub fn line(ev: &Value, total_tokens: &mut u64) -> Option<String> {
    let turn = ev["turn"].as_u64().unwrap_or(0);
    Some(match ev["type"].as_str()? {
        "model_request" => {
            let note = if ev["tools_disabled"] == true {
                " (tools disabled: summary)"
            } else {
                ""
            };
            format!("[turn {turn}] asking the model{note}")
        }
        "model_response" => model_response(ev, turn, total_tokens),
        "model_error" => model_error(ev, turn),
        "tool_requested" => format!(
            "  → {} {}",
            short(&ev["tool"], 40),
            short(&ev["input"], 120)
        ),
        "policy_decision" => format!(
            "    policy: {} by {}",
            short(&ev["tier"], 10),
            short(&ev["rule"], 80)
        ),
        "approval_resolved" => format!(
            "    approval: {} by {}",
            short(&ev["decision"], 10),
            short(&ev["by"], 20)
        ),
        "tool_finished" => tool_finished(ev),
        "task_finished" => format!(
            "[done] {} after {} turns · {} tokens · {} · {} ms",
            short(&ev["stop_reason"], 20),
            ev["turns"],
            total_tokens,
            usd(&ev["usd"]),
            ev["duration_ms"]
        ),
        "context_compacted" => format!(
            "[turn {turn}] context compacted ({}): ~{} → ~{} tokens; earlier history in {}",
            short(&ev["method"], 20),
            ev["tokens_before"],
            ev["tokens_after"],
            short(&ev["history_file"], 200)
        ),
        "events_repaired" => format!(
            "[log] a torn last line of events.jsonl was moved to {}",
            short(&ev["torn_file"], 200)
        ),
        _ => return None,
    })
}

/// The line of a `model_response`; adds its tokens to `total_tokens`, which the
/// line shows so far.
fn model_response(ev: &Value, turn: u64, total_tokens: &mut u64) -> String {
    let u = &ev["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    let this = n("input_tokens")
        + n("output_tokens")
        + n("cache_read_input_tokens")
        + n("cache_creation_input_tokens");
    *total_tokens += this;
    format!(
        "[turn {turn}] {} in {} ms · in {} out {} cache read {} write {} · {} tokens so far",
        short(&ev["stop_reason"], 20),
        ev["latency_ms"],
        n("input_tokens"),
        n("output_tokens"),
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
        total_tokens
    )
}

/// A cost as shown: dollars, or "cost unknown" for a model without a price.
pub fn usd(v: &Value) -> String {
    match v.as_f64() {
        Some(d) => format!("${d:.4}"),
        None => "cost unknown".to_string(),
    }
}

/// The line of a `model_error`, saying when it is retried.
fn model_error(ev: &Value, turn: u64) -> String {
    match ev["retry_in_ms"].as_u64() {
        Some(ms) => format!(
            "[turn {turn}] model error (attempt {}): {}; retrying in {ms} ms",
            ev["attempt"],
            short(&ev["message"], 200)
        ),
        None => format!(
            "[turn {turn}] model error (attempt {}): {}",
            ev["attempt"],
            short(&ev["message"], 200)
        ),
    }
}

/// The line of a `tool_finished`: status, exit code, duration and size.
fn tool_finished(ev: &Value) -> String {
    let status = if ev["is_error"] == true {
        "error"
    } else {
        "ok"
    };
    let exit = ev["exit_code"]
        .as_i64()
        .map(|c| format!(" exit {c}"))
        .unwrap_or_default();
    let cut = if ev["truncated"] == true {
        " (truncated for the model)"
    } else {
        ""
    };
    format!(
        "    ← {} {status}{exit} in {} ms, {} bytes{cut}",
        short(&ev["tool"], 40),
        ev["duration_ms"],
        ev["output_bytes"]
    )
}

/// Prints lines for events received until the channel closes, and the model's
/// text as it streams (`text_delta` values, escaped like an answer), ended by a
/// newline before the next line.
pub async fn print(mut rx: tokio::sync::mpsc::UnboundedReceiver<Value>) {
    let mut total = 0u64;
    let mut mid_text = false;
    while let Some(ev) = rx.recv().await {
        let mut err = std::io::stderr().lock();
        if ev["type"] == "text_delta" {
            let text = ev["text"].as_str().unwrap_or("");
            let _ = write!(err, "{}", crate::text::escape_text(text));
            let _ = err.flush();
            if !text.is_empty() {
                mid_text = !text.ends_with('\n');
            }
            continue;
        }
        if let Some(l) = line(&ev, &mut total) {
            if std::mem::take(&mut mid_text) {
                let _ = writeln!(err);
            }
            let _ = writeln!(err, "{l}");
        }
    }
}
