//! The live text a follower of `/v1/events?follow=1&text=1` gets stays in its turn:
//! every text delta comes after its turn's `model_request` and before its
//! `model_response`, even for a follower that fell behind.

use crate::audit::{sha256_hex, write_lines};
use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot};

/// `/v1/events?follow=1&text=1` took the next text delta or the next event,
/// whichever `select!` picked at random when both were waiting, so a follower that
/// fell behind (here: held up while the log's earlier lines were sent) got a
/// turn's `model_response`, even its `task_finished`, before that turn's text —
/// `submit --wait` printed `[done]` mid-answer. Each delta now carries the seq of
/// the last line written before it and is sent right after that line: every
/// delta of a turn comes after its request and before its response.
#[test]
fn live_text_comes_before_the_response_of_its_turn() {
    use std::io::{Read as _, Write as _};
    let big = "x".repeat(8_000);
    let mut script = Vec::new();
    for turn in 0..8 {
        // Distinct calls, or the no-progress stop ends the task early.
        let input = serde_json::json!({"path": format!("d{turn}")});
        let mut r = Reply::tool(&format!("tu{turn}"), "list_dir", input);
        let mut body = r.body_json();
        let content = body["content"].as_array_mut().unwrap();
        content.insert(
            0,
            serde_json::json!({"type": "text", "text": format!("turn {turn} text")}),
        );
        r = Reply::message(body["content"].clone(), "tool_use");
        script.push(r);
    }
    script.push(Reply::text("the end of it"));
    let api = FakeApi::start(script);
    let root = TestRoot::new(&api.url);
    // Earlier lines the follower is sent first (chained, so the daemon continues
    // them): more than the socket holds unread and the daemon queues for one
    // follower, so the follower is held up while the task runs.
    let mut prev = "0".repeat(64);
    let mut lines = Vec::new();
    for seq in 1..=300u64 {
        let line = serde_json::json!({"seq": seq, "ts": "2026-01-01T00:00:00.000Z",
            "prev": prev, "type": "daemon_stopping", "reason": big})
        .to_string();
        prev = sha256_hex(line.as_bytes());
        lines.push(line);
    }
    write_lines(&root.dir.join("transcripts/events.jsonl"), &lines);
    let daemon = Daemon::start(&root);
    let mut s =
        std::os::unix::net::UnixStream::connect(root.dir.join("run/harnessd.sock")).unwrap();
    write!(
        s,
        "GET /v1/events?follow=1&text=1 HTTP/1.1\r\nhost: localhost\r\n\r\n"
    )
    .unwrap();
    let id = daemon.submit("go");
    daemon.wait_finished(&id);
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let done = |raw: &[u8]| {
        String::from_utf8_lossy(raw)
            .lines()
            .any(|l| l.contains(&id) && l.contains("\"type\":\"task_finished\""))
    };
    while !done(&raw) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before the task's end");
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw);
    let deltas = text.matches("\"text_delta\"").count();
    assert!(
        deltas >= 15,
        "{deltas} text deltas:\n{}",
        &text[text.len().saturating_sub(6000)..]
    );
    let mut requested = std::collections::HashSet::new();
    let mut responded = std::collections::HashSet::new();
    let mut late = Vec::new();
    for line in text.lines().filter(|l| l.contains(&id)) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match v["type"].as_str() {
            Some("model_response") => {
                responded.insert(v["turn"].as_u64());
            }
            Some("model_request") => {
                requested.insert(v["turn"].as_u64());
            }
            Some("text_delta")
                if responded.contains(&v["turn"].as_u64())
                    || !requested.contains(&v["turn"].as_u64()) =>
            {
                late.push(v)
            }
            _ => {}
        }
    }
    assert!(
        late.is_empty(),
        "text out of its turn (after its response or before its request): {late:?}"
    );
}
