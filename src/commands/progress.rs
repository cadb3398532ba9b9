//! The readable progress trail of `harnessd run` on stderr, drawn from the events
//! as they are written (so it shows exactly what the record holds). Every text
//! field goes through `short`, which escapes it (docs/commands.md).

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::events::{Event, Record};
use crate::protocol::{Decision, Tier};
use crate::text::{Mode, escape, escape_line};

/// A field of an event for one line of the trail: cut to `max` characters, then
/// escaped (text as a one-line field, other values as JSON), so model text in it
/// never reaches the terminal raw.
fn short(v: &Value, max: usize) -> String {
    match v {
        Value::String(s) => short_text(s, max),
        other => cut_and_escape(other.to_string(), max, Mode::Json),
    }
}

/// [`short`] of a text field.
fn short_text(s: &str, max: usize) -> String {
    cut_and_escape(s.to_string(), max, Mode::Line)
}

fn cut_and_escape(s: String, max: usize, mode: Mode) -> String {
    let cut = if s.chars().count() <= max {
        s
    } else {
        let head: String = s.chars().take(max).collect();
        format!("{head}…")
    };
    escape(&cut, mode).into_owned()
}

/// One line for an event, or `None` for events not worth a line.
pub fn line(ev: &Event, total_tokens: &mut u64) -> Option<String> {
    Some(match ev {
        Event::ModelRequest {
            turn,
            tools_disabled,
            ..
        } => {
            let note = if *tools_disabled {
                " (tools disabled: summary)"
            } else {
                ""
            };
            format!("[turn {turn}] asking the model{note}")
        }
        Event::ModelResponse { .. } => model_response(ev, total_tokens)?,
        Event::ModelError { .. } => model_error(ev)?,
        Event::ToolRequested { tool, input, .. } => {
            format!("  → {} {}", short_text(tool, 40), short(input, 120))
        }
        Event::PolicyDecision { tier, rule, .. } => format!(
            "    policy: {} by {}",
            short_text(tier.as_str(), 10),
            short_text(rule, 80)
        ),
        Event::ApprovalResolved { decision, by, .. } => format!(
            "    approval: {} by {}",
            short_text(decision.as_str(), 10),
            short_text(by, 20)
        ),
        Event::ToolFinished { .. } => tool_finished(ev)?,
        Event::TaskFinished {
            stop_reason,
            turns,
            usd: cost,
            duration_ms,
            ..
        } => format!(
            "[done] {} after {turns} turns · {total_tokens} tokens · {} · {duration_ms} ms",
            short_text(stop_reason.as_str(), 20),
            usd(*cost),
        ),
        Event::ContextCompacted {
            turn,
            method,
            tokens_before,
            tokens_after,
            history_file,
            ..
        } => format!(
            "[turn {turn}] context compacted ({}): ~{tokens_before} → ~{tokens_after} tokens; \
             earlier history in {}",
            short_text(method.as_str(), 20),
            short_text(history_file, 200)
        ),
        Event::EventsRepaired { torn_file, .. } => format!(
            "[log] a torn last line of events.jsonl was moved to {}",
            short_text(torn_file, 200)
        ),
        _ => return None,
    })
}

/// The line of a `model_response`; adds its tokens to `total_tokens`, which the
/// line shows so far.
fn model_response(ev: &Event, total_tokens: &mut u64) -> Option<String> {
    let Event::ModelResponse {
        turn,
        stop_reason,
        usage: u,
        latency_ms,
        ..
    } = ev
    else {
        return None;
    };
    *total_tokens += u.total();
    Some(format!(
        "[turn {turn}] {} in {latency_ms} ms · in {} out {} cache read {} write {} · {} tokens so far",
        short_text(stop_reason, 20),
        u.input_tokens,
        u.output_tokens,
        u.cache_read_input_tokens,
        u.cache_creation_input_tokens,
        total_tokens
    ))
}

/// A cost as shown: dollars, or "cost unknown" for a model without a price.
pub fn usd(v: Option<f64>) -> String {
    match v {
        Some(d) => format!("${d:.4}"),
        None => "cost unknown".to_string(),
    }
}

/// The line of a `model_error`, saying when it is retried.
fn model_error(ev: &Event) -> Option<String> {
    let Event::ModelError {
        turn,
        attempt,
        retry_in_ms,
        message,
        ..
    } = ev
    else {
        return None;
    };
    let message = short_text(message, 200);
    Some(match retry_in_ms {
        Some(ms) => {
            format!("[turn {turn}] model error (attempt {attempt}): {message}; retrying in {ms} ms")
        }
        None => format!("[turn {turn}] model error (attempt {attempt}): {message}"),
    })
}

/// The line of a `tool_finished`: status, exit code, duration and size.
fn tool_finished(ev: &Event) -> Option<String> {
    let Event::ToolFinished {
        tool,
        exit_code,
        duration_ms,
        output_bytes,
        truncated,
        is_error,
        ..
    } = ev
    else {
        return None;
    };
    let status = if *is_error { "error" } else { "ok" };
    let exit = exit_code.map(|c| format!(" exit {c}")).unwrap_or_default();
    let cut = if *truncated {
        " (truncated for the model)"
    } else {
        ""
    };
    Some(format!(
        "    ← {} {status}{exit} in {duration_ms} ms, {output_bytes} bytes{cut}",
        short_text(tool, 40),
    ))
}

/// What the task waits on after `ev`, for the elapsed-time notes: the model after
/// a request, a tool once it may run; `None` when nothing is awaited, or when the
/// terminal is about to ask a question (an approval), which a note must not
/// interrupt.
fn waiting_on(ev: &Event) -> Option<String> {
    match ev {
        Event::ModelRequest { .. } => Some("waiting for the model".into()),
        Event::PolicyDecision {
            tier: Tier::Allow, ..
        } => Some("running the tool".into()),
        Event::ApprovalResolved {
            decision: Decision::Approved,
            ..
        } => Some("running the tool".into()),
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
                let Some(record) = Record::from_value(ev) else { continue };
                calls.observe_in(record.task_id.as_deref(), &record.event);
                if let Some(l) = line(&record.event, &mut total) {
                    let mut err = std::io::stderr().lock();
                    if std::mem::take(&mut mid_text) {
                        let _ = writeln!(err);
                    }
                    let _ = writeln!(err, "{}", of_task(&record, &l));
                }
                waiting = waiting_on(&record.event).map(|what| Waiting {
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

/// `text` (a progress line, or several) as a line of `record`'s task: a child
/// task's lines are indented by its depth and say whose they are
/// (`  [child t-….7a95b70396] …`), so they never pass for the parent's.
pub(super) fn of_task(record: &Record, text: &str) -> String {
    let Some(id) = record
        .task_id
        .as_deref()
        .filter(|id| crate::protocol::tree::parent_task_id(id).is_some())
    else {
        return text.to_string();
    };
    let depth = crate::protocol::tree::delegation_depth(id) as usize;
    let prefix = format!("{}[child {}] ", "  ".repeat(depth), escape_line(id));
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
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
        let wait = |v: Value| {
            let mut line = json!({"seq": 1, "ts": "t"});
            line.as_object_mut()
                .unwrap()
                .extend(v.as_object().unwrap().clone());
            waiting_on(&Record::from_value(line).unwrap().event)
        };
        let decision = |tier: &str| {
            json!({"type": "policy_decision", "tool_use_id": "u", "tool": "t", "tier": tier,
                   "rule": "r", "subject": null, "profile": "write"})
        };
        let request = json!({"type": "model_request", "turn": 1, "messages": 1,
                             "tools_disabled": false});
        assert_eq!(wait(request).as_deref(), Some("waiting for the model"));
        assert!(wait(decision("allow")).is_some());
        // An approval is a question on the terminal: no status line over it.
        let asked = json!({"type": "approval_requested", "approval_id": "a",
                           "tool_use_id": "u", "tool": "t", "rule": "r"});
        assert_eq!(wait(asked), None);
        assert_eq!(wait(decision("ask")), None);
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
