//! `GET /v1/events` as server-sent events: with `Accept: text/event-stream` each
//! line is one event whose `id:` is its seq and whose `data:` is the line, and
//! `Last-Event-ID` resumes after that seq.

use serde_json::Value;

use crate::common::TestRoot;
use crate::common::console::{To, send};
use crate::common::daemon::Daemon;

/// The (id, data) of each event of an SSE body.
fn events_of(body: &str) -> Vec<(Option<u64>, Value)> {
    body.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let mut id = None;
            let mut data = Value::Null;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.parse().unwrap());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).unwrap();
                } else {
                    panic!("not an SSE field: {line:?} in {body}");
                }
            }
            (id, data)
        })
        .collect()
}

#[test]
fn events_stream_as_sse_with_their_seq_as_id_and_resume_after_last_event_id() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = Daemon::start(&root);
    let id = d.submit("hello");
    d.wait_finished(&id);
    let sse = ["accept: text/event-stream"];
    let a = send(&To::Socket(&d), "GET", "/v1/events", "localhost", &sse, "");
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let all = events_of(&a.body);
    assert!(all.len() >= 4, "{}", a.body);
    for (id, data) in &all {
        assert_eq!(*id, data["seq"].as_u64(), "{data}");
    }
    let after = all[1].0.unwrap();
    let resume = format!("last-event-id: {after}");
    let a = send(
        &To::Socket(&d),
        "GET",
        "/v1/events",
        "localhost",
        &[sse[0], &resume],
        "",
    );
    let rest = events_of(&a.body);
    assert_eq!(rest.len(), all.len() - 2, "{}", a.body);
    assert_eq!(rest[0].0, all[2].0);
    // Without the header, ndjson as before.
    let plain = send(&To::Socket(&d), "GET", "/v1/events", "localhost", &[], "");
    assert_eq!(
        plain.header("content-type").as_deref(),
        Some("application/x-ndjson")
    );
    assert_eq!(plain.body.lines().count(), all.len());
    let bad = send(
        &To::Socket(&d),
        "GET",
        "/v1/events",
        "localhost",
        &[sse[0], "last-event-id: x"],
        "",
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("Last-Event-ID"), "{}", bad.body);
}
