//! A transcript brought in line with the audit log (docs/events.md, "The log is the
//! truth"): after a save that failed (a full disk), the transcript on disk can lag
//! the log — still `running` or `queued` though the log shows the task finished, or
//! ending with `tool_use` blocks whose results were never saved. The log wins: a
//! task it shows finished is saved `finished`, never left to resume or run again,
//! and each open call is answered as far as the log and its kept `.out` file show.

use std::path::Path;

use super::guard::{RESUME_NOT_EXECUTED, RESUME_STATE_UNKNOWN, ran_but_lost};
use super::{StopReason, TaskStatus, Transcript};
use crate::events::CallTrail;
use crate::events::since::Since;
use crate::llm::{Block, Message, Role};

/// Brings `t` in line with what the log says since its last checkpoint; `true`
/// when it changed (and must be saved). `outputs` is `transcripts/`, where each
/// task's `.out` files are; `max_chars` is `output.max_chars`.
///
/// Open calls are answered when the log shows the task finished (every call then
/// gets an answer: its kept output, or what the log says of it), or when every one
/// of them has its `tool_finished`; otherwise they are left to a resume, which
/// answers them from the whole log and closes them there.
pub fn in_line(t: &mut Transcript, since: &Since, outputs: &Path, max_chars: usize) -> bool {
    if t.status == TaskStatus::Finished {
        return false;
    }
    let finished = since
        .tasks
        .get(&t.task_id)
        .and_then(|s| s.finished.clone())
        // `interrupted` (SIGTERM past the grace) leaves the task resumable.
        .filter(|f| f.stop_reason != "interrupted");
    let mut changed = answer_open_calls(t, since, outputs, max_chars, finished.is_some());
    if let Some(f) = finished {
        let reason = serde_json::from_value(serde_json::Value::String(f.stop_reason));
        t.status = TaskStatus::Finished;
        t.stop_reason = Some(reason.unwrap_or(StopReason::Error));
        t.error = f.error;
        t.usage = f.usage;
        t.usd = f.usd.or(t.usd);
        t.answer = Some(
            t.messages
                .iter()
                .rev()
                .find(|m| m.role == Role::Assistant)
                .map(Message::text)
                .unwrap_or_default(),
        );
        changed = true;
    }
    changed
}

/// Answers the `tool_use` blocks of a last assistant message; see [`in_line`].
fn answer_open_calls(
    t: &mut Transcript,
    since: &Since,
    outputs: &Path,
    max_chars: usize,
    finished: bool,
) -> bool {
    let Some(last) = t.messages.last().filter(|m| m.role == Role::Assistant) else {
        return false;
    };
    let uses = last.answerable_tool_uses();
    if uses.is_empty() {
        return false;
    }
    let out_dir = outputs.join(&t.task_id);
    let mut blocks = Vec::with_capacity(uses.len());
    for (id, _, _) in &uses {
        let trail = since.call(&t.task_id, id);
        let done = matches!(trail, CallTrail::Finished { .. });
        if !finished && !done {
            return false;
        }
        let output = since
            .tasks
            .get(&t.task_id)
            .and_then(|s| s.outputs.get(id))
            .copied();
        let kept = std::fs::read(out_dir.join(crate::tools::out_file_name(id)));
        let (content, is_error) = match (kept, output, trail) {
            // The kept output, when it holds something or there was nothing to keep.
            (Ok(bytes), Some((total, failed)), _) if !bytes.is_empty() || total == 0 => {
                (kept_result(&bytes, total, max_chars), failed)
            }
            (
                _,
                _,
                CallTrail::Finished {
                    ran: true,
                    exit_code,
                },
            ) => (ran_but_lost(exit_code), true),
            (_, _, CallTrail::MayHaveRun) => (RESUME_STATE_UNKNOWN.to_string(), true),
            _ => (RESUME_NOT_EXECUTED.to_string(), true),
        };
        blocks.push(Block::tool_result(id, &content, is_error));
    }
    t.messages.push(Message::user(blocks));
    true
}

/// A result filled from a kept `.out` file of `total` bytes in all: cut to
/// `max_chars` as a tool result is, and saying so when part was not kept.
fn kept_result(bytes: &[u8], total: u64, max_chars: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut content = crate::text::truncate_middle(&text, max_chars, 0).0;
    if (bytes.len() as u64) < total {
        content.push_str(&format!(
            "\n[filled in from the kept output after the transcript could not be saved: \
             {} of {total} bytes were kept]",
            bytes.len()
        ));
    }
    content
}
