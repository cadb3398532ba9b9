//! Bounded memory from peers (a hostile API or client): a model response past
//! `api.max_response_mb` is refused, and the daemon's task list is paged and
//! carries no answers (they are read from transcripts when one task is asked for).

use std::collections::HashSet;

use serde_json::Value;

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr};

#[test]
fn a_response_past_the_cap_is_an_error_not_retried() {
    let big = "x".repeat(3 * 1024 * 1024);
    let api = FakeApi::start(vec![Reply::text(&big), Reply::text("never")]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "max_response_mb", "1");
    root.set_config("api", "max_retries", "3");
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        api.requests().len(),
        1,
        "an oversized response is not retried"
    );
    let err = stderr(&out);
    assert!(err.contains("api.max_response_mb (1 MiB)"), "{err}");
    let t = root.transcript();
    assert_eq!(t["stop_reason"], "error");
    assert!(
        t["error"]
            .as_str()
            .unwrap_or("")
            .contains("max_response_mb"),
        "{}",
        t["error"]
    );
}

#[test]
fn a_zero_cap_is_a_config_error_naming_the_key() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "max_response_mb", "0");
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("api.max_response_mb") && err.contains("greater than 0"),
        "{err}"
    );
}

fn ids(page: &Value) -> Vec<String> {
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_task_list_is_paged_newest_first() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let mut submitted = Vec::new();
    for i in 0..7 {
        let id = d.submit(&format!("task {i}"));
        d.wait_finished(&id);
        submitted.push(id);
    }
    let (status, first) = d.request("GET", "/v1/tasks?limit=3", None);
    assert_eq!(status, 200, "{first}");
    let newest: Vec<String> = submitted.iter().rev().take(3).cloned().collect();
    assert_eq!(ids(&first), newest, "{first}");
    let mut seen = ids(&first);
    let mut next = first["next"].as_str().expect("a next cursor").to_string();
    let mut pages = 1;
    loop {
        let (status, page) = d.request("GET", &format!("/v1/tasks?limit=3&before={next}"), None);
        assert_eq!(status, 200, "{page}");
        seen.extend(ids(&page));
        pages += 1;
        assert!(pages <= 3, "too many pages: {seen:?}");
        match page["next"].as_str() {
            Some(n) => next = n.to_string(),
            None => break,
        }
    }
    let expected: Vec<String> = submitted.iter().rev().cloned().collect();
    assert_eq!(seen, expected, "every task once, newest first");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 7);
    let (_, finished) = d.request("GET", "/v1/tasks?status=finished&limit=500", None);
    assert_eq!(ids(&finished).len(), 7, "{finished}");
    assert!(finished.get("next").is_none(), "{finished}");
    let (_, running) = d.request("GET", "/v1/tasks?status=running", None);
    assert_eq!(ids(&running).len(), 0, "{running}");
    for bad in ["status=bogus", "limit=0", "limit=x", "before=t-unknown"] {
        let (status, v) = d.request("GET", &format!("/v1/tasks?{bad}"), None);
        assert_eq!(status, 400, "{bad}: {v}");
    }
}

#[test]
fn the_list_carries_no_answers_and_one_task_reads_its_transcript() {
    let big = "a".repeat(2 * 1024 * 1024);
    let api = FakeApi::start(vec![Reply::text(&big)]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let id = d.submit("say a lot");
    let t = d.wait_finished(&id);
    assert_eq!(t["answer"].as_str().map(str::len), Some(big.len()));
    let (status, text) = d.request_text("GET", "/v1/tasks");
    assert_eq!(status, 200);
    assert!(
        text.len() < 10_000,
        "the list carries the answer: {} bytes",
        text.len()
    );
    let list: Value = serde_json::from_str(&text).unwrap();
    let item = &list["tasks"][0];
    assert_eq!(item["task_id"], id.as_str());
    assert_eq!(item["stop_reason"], "end_turn");
    assert!(item.get("answer").is_none(), "{item}");
    // Asked again, it is still read from the transcript.
    let (_, again) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!(again["answer"].as_str().map(str::len), Some(big.len()));
}
