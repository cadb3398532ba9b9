//! Model output that breaks the protocol (docs/operating.md `error` stop) and the two
//! `retry-after` forms (docs/config.md), through the real binary and the fake API.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, stderr};

/// A `run_bash` call that leaves `marker` in the workspace if it runs.
fn touch(id: &str, marker: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "run_bash", "input": {"command": format!("touch {marker}")}})
}

/// The task ended with `error`, exit 1, and the error names `what`.
fn assert_error_stop(root: &TestRoot, out: &std::process::Output, what: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    let finished = root.events_of("task_finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["stop_reason"], "error");
    let error = finished[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(what),
        "error {error:?} does not name {what:?}"
    );
    let t = root.transcript();
    assert_eq!(t["stop_reason"], "error");
    assert!(stderr(out).contains(what), "{}", stderr(out));
}

/// The tool_result blocks of the transcript's last message, which must be a user
/// message answering the calls.
fn final_answers(root: &TestRoot) -> Vec<Value> {
    let t = root.transcript();
    let last = t["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user", "the calls must be answered: {t}");
    last["content"].as_array().unwrap().clone()
}

#[test]
fn unknown_stop_reason_stops_with_error_and_runs_no_tool() {
    let api = FakeApi::start(vec![
        Reply::message(json!([touch("u1", "unknown-marker")]), "thinking_harder"),
        Reply::text("never sent"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--yes", "x"]);
    assert_error_stop(&root, &out, "thinking_harder");
    assert_eq!(api.requests().len(), 1, "no request after the bad response");
    assert!(!root.workspace().join("unknown-marker").exists());
    let answers = final_answers(&root);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["tool_use_id"], "u1");
    assert_eq!(answers[0]["is_error"], true);
    assert!(
        answers[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("not executed")
    );
    crate::common::fake_api::check_pairing(&root.transcript()).unwrap();
    let finished = root.events_of("tool_finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["is_error"], true);
}

#[test]
fn tool_use_without_id_stops_with_error_and_runs_nothing() {
    let no_id =
        json!({"type": "tool_use", "name": "run_bash", "input": {"command": "touch noid-marker"}});
    let api = FakeApi::start(vec![
        Reply::message(json!([touch("ok1", "withid-marker"), no_id]), "tool_use"),
        Reply::text("never sent"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--yes", "x"]);
    assert_error_stop(&root, &out, "without an id");
    assert_eq!(api.requests().len(), 1);
    assert!(!root.workspace().join("noid-marker").exists());
    assert!(!root.workspace().join("withid-marker").exists());
    // The call with an id is answered; the one without is kept as received.
    let answers = final_answers(&root);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["tool_use_id"], "ok1");
    assert_eq!(answers[0]["is_error"], true);
    let t = root.transcript();
    let msgs = t["messages"].as_array().unwrap();
    let assistant = &msgs[msgs.len() - 2];
    assert_eq!(assistant["content"].as_array().unwrap().len(), 2);
}

#[test]
fn duplicate_tool_use_ids_stop_with_error_and_neither_runs() {
    let api = FakeApi::start(vec![
        Reply::message(
            json!([touch("dup", "first-marker"), touch("dup", "second-marker")]),
            "tool_use",
        ),
        Reply::text("never sent"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--yes", "x"]);
    assert_error_stop(&root, &out, "\"dup\"");
    assert_eq!(api.requests().len(), 1);
    assert!(!root.workspace().join("first-marker").exists());
    assert!(!root.workspace().join("second-marker").exists());
    let answers = final_answers(&root);
    let ids: Vec<&Value> = answers.iter().map(|a| &a["tool_use_id"]).collect();
    assert_eq!(ids, [&json!("dup"), &json!("dup")]);
    assert!(answers.iter().all(|a| a["is_error"] == true));
}

#[test]
fn retry_after_as_an_http_date_is_honoured() {
    // HTTP-dates have whole seconds: this one is 2 to 3 s ahead when written, a
    // little less by the time the binary has started and been refused.
    let at = SystemTime::now() + Duration::from_secs(3);
    let date = httpdate::fmt_http_date(at);
    let api = FakeApi::start(vec![
        Reply::error(429, "rate_limit_error", "slow down").header("retry-after", &date),
        Reply::text("finally"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2);
    let gap = reqs[1].received_at - reqs[0].received_at;
    assert!(gap >= Duration::from_millis(800), "waited only {gap:?}");
    assert!(gap < Duration::from_secs(5), "waited {gap:?}");
    let errors = root.events_of("model_error");
    assert_eq!(errors.len(), 1);
    let retry_in = errors[0]["retry_in_ms"].as_u64().unwrap();
    assert!((800..=3000).contains(&retry_in), "retry_in_ms {retry_in}");
}
