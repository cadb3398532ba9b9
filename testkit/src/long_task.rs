//! The fake model of a long task, shared by the compaction tests and the
//! `long_task` benchmark: a `read_file("big.txt")` call with 1 KB of commentary a
//! turn for `turns` turns, then an answer; a summary whenever harnessd asks for
//! one (a request with tools disabled). Input tokens are reported as request
//! bytes / 4, so compaction sees its history grow.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::fake_api::{FakeApi, Reply};

/// Input tokens as the fake reports them: one per 4 bytes of the request.
pub fn tokens_of(body: &Value) -> u64 {
    body.to_string().len() as u64 / 4
}

/// Whether `body` is harnessd's summary request (tools disabled).
pub fn is_summary_request(body: &Value) -> bool {
    body["tool_choice"]["type"] == "none"
}

/// A fake API playing the long task; the counter says how many turns (not
/// summaries) it has answered.
pub fn long_task_api(turns: usize) -> (Arc<AtomicUsize>, FakeApi) {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let api = FakeApi::with_responder(Box::new(move |body: &Value| {
        let usage = json!({"input_tokens": tokens_of(body), "output_tokens": 50});
        if is_summary_request(body) {
            let text = "Summary: the task reads big.txt repeatedly; every read returned the same \
                        10 KB; nothing else was changed; remaining: keep reading.";
            return Reply::message_with_usage(
                json!([{"type": "text", "text": text}]),
                "end_turn",
                usage,
            );
        }
        let n = counter.fetch_add(1, Ordering::SeqCst);
        if n >= turns {
            return Reply::message_with_usage(
                json!([{"type": "text", "text": "done"}]),
                "end_turn",
                usage,
            );
        }
        let note = format!("Turn {n}: reading the file once more. {}", "·".repeat(500));
        Reply::message_with_usage(
            json!([
                {"type": "text", "text": note},
                {"type": "tool_use", "id": format!("tu_{n}"), "name": "read_file", "input": {"path": "big.txt"}}
            ]),
            "tool_use",
            usage,
        )
    }));
    (asked, api)
}
