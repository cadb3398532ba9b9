//! The readable progress trail of `harnessd run` on stderr, drawn from the events
//! as they are written (so it shows exactly what the record holds). Every text
//! field goes through `short`, which escapes it (docs/commands.md).

use std::io::Write;
use std::time::{Duration, Instant};

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

/// What the task waits on after `ev`, for the elapsed-time notes: the model after
/// a request, a tool once it may run; `None` when nothing is awaited, or when the
/// terminal is about to ask a question (an approval), which a note must not
/// interrupt.
fn waiting_on(ev: &Value) -> Option<String> {
    match ev["type"].as_str()? {
        "model_request" => Some("waiting for the model".into()),
        "policy_decision" if ev["tier"] == "allow" => Some("running the tool".into()),
        "approval_resolved" if ev["decision"] == "approved" => Some("running the tool".into()),
        _ => None,
    }
}

/// When to say how long the task has waited: at these many seconds, then every
/// [`EVERY`] seconds after the last.
const FIRST_NOTES: [u64; 4] = [5, 10, 20, 30];
/// Seconds between notes after [`FIRST_NOTES`].
const EVERY: u64 = 30;

/// The second of the note after the one due at `secs`.
fn next_note(secs: u64) -> u64 {
    FIRST_NOTES
        .iter()
        .copied()
        .find(|&n| n > secs)
        .unwrap_or((secs / EVERY + 1) * EVERY)
}

/// A wait on the model or a tool: what, since when, and the second of the next
/// note.
struct Waiting {
    what: String,
    since: Instant,
    next: u64,
}

/// Prints lines for events received until the channel closes, and the model's
/// text as it streams (`text_delta` values, escaped like an answer), ended by a
/// newline before the next line. With `live` (stderr is a terminal), a long wait
/// on the model or a tool is said with how long it has lasted (`… waiting for the
/// model: 20s`), as new lines: nothing is redrawn, so no control sequence reaches
/// the terminal, not even our own. Returns what became of the task's calls.
pub async fn print(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Value>,
    live: bool,
) -> super::tally::CallTally {
    let mut calls = super::tally::CallTally::default();
    let mut total = 0u64;
    let mut waiting: Option<Waiting> = None;
    let mut mid_text = false;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { break };
                if ev["type"] == "text_delta" {
                    // The model is answering: no note breaks its text.
                    waiting = None;
                    stream_text(&ev, &mut mid_text);
                    continue;
                }
                calls.observe(&ev);
                if let Some(l) = line(&ev, &mut total) {
                    let mut err = std::io::stderr().lock();
                    if std::mem::take(&mut mid_text) {
                        let _ = writeln!(err);
                    }
                    let _ = writeln!(err, "{l}");
                }
                waiting = waiting_on(&ev).map(|what| Waiting {
                    what,
                    since: Instant::now(),
                    next: FIRST_NOTES[0],
                });
            }
            _ = tick.tick(), if live && waiting.is_some() => {
                // A late tick still gives its note, with the time it shows.
                if let Some(w) = waiting.as_mut()
                    && w.since.elapsed().as_secs() >= w.next
                {
                    let so_far = w.since.elapsed();
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "  … {}: {}",
                        w.what,
                        elapsed(so_far)
                    );
                    w.next = next_note(so_far.as_secs());
                }
            }
        }
    }
    calls
}

/// Writes a streamed piece of the model's text, escaped; `mid_text` says whether
/// the last piece left a line open.
pub(super) fn stream_text(ev: &Value, mid_text: &mut bool) {
    let text = ev["text"].as_str().unwrap_or("");
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{}", crate::text::escape_text(text));
    let _ = err.flush();
    if !text.is_empty() {
        *mid_text = !text.ends_with('\n');
    }
}

/// `7s`, `2m05s`: how long, for the notes.
fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn elapsed_notes_name_what_is_awaited_and_space_out() {
        let wait = |v: Value| waiting_on(&v);
        assert_eq!(
            wait(json!({"type": "model_request"})).as_deref(),
            Some("waiting for the model")
        );
        assert!(wait(json!({"type": "policy_decision", "tier": "allow"})).is_some());
        // An approval is a question on the terminal: no status line over it.
        assert_eq!(wait(json!({"type": "approval_requested"})), None);
        assert_eq!(
            wait(json!({"type": "policy_decision", "tier": "ask"})),
            None
        );
        assert_eq!(wait(json!({"type": "tool_finished"})), None);
        assert_eq!(elapsed(Duration::from_secs(7)), "7s");
        assert_eq!(elapsed(Duration::from_secs(125)), "2m05s");
        let mut notes = vec![FIRST_NOTES[0]];
        while notes.len() < 7 {
            notes.push(next_note(*notes.last().unwrap()));
        }
        assert_eq!(notes, [5, 10, 20, 30, 60, 90, 120]);
        // A note given late (at 12 s) is followed by the next one due, not 10.
        assert_eq!(next_note(12), 20);
        assert_eq!(next_note(95), 120);
    }
}
