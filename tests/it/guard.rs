//! No panic reaches a task's caller or the process (docs/operating.md, `error`): a panic in the
//! loop ends that task with `error` and a `task_finished` naming it, answers every open
//! `tool_use`, makes `run` exit 1 and leaves `serve` serving. The panic is injected
//! through the debug-build-only `HARNESSD_TEST_PANIC_ON_TOOL` switch (see
//! `src/agent/guard.rs`), at the two places a call can panic: where the policy judges
//! it (as the shell splitter once did) and where it is dispatched.

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::fake_api::check_pairing;
use crate::common::{FakeApi, Reply, TestRoot, stderr};

const PANIC_VAR: &str = "HARNESSD_TEST_PANIC_ON_TOOL";

/// The tool_result blocks of a transcript's last message, by tool_use_id.
fn final_results(t: &Value) -> Vec<(String, Value)> {
    t["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| (b["tool_use_id"].as_str().unwrap().to_string(), b.clone()))
        .collect()
}

fn ids(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["tool_use_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_panic_while_dispatching_a_call_ends_run_with_error_and_answers_every_call() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("c1", "get_time", json!({})),
            ("c2", "run_bash", json!({"command": "touch ran-c2"})),
            ("c3", "list_dir", json!({})),
        ]),
        Reply::text("never asked"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root
        .command(&["run", "--yes", "look around"])
        .env(PANIC_VAR, "run_bash")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(api.requests().len(), 1, "nothing is sent after the panic");
    assert!(!root.workspace().join("ran-c2").exists());

    let finished = root.events_of("task_finished");
    assert_eq!(finished.len(), 1, "{err}");
    assert_eq!(finished[0]["stop_reason"], "error");
    let error = finished[0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("internal error: panic")
            && error.contains("injected by HARNESSD_TEST_PANIC_ON_TOOL=run_bash"),
        "{error}"
    );
    assert!(
        error.contains("src/agent/calls.rs:"),
        "names where: {error}"
    );
    assert!(err.contains(&format!("error: {error}")), "{err}");

    let t = root.transcript();
    assert_eq!(t["status"], "finished");
    assert_eq!(t["stop_reason"], "error");
    assert_eq!(t["error"], error);
    check_pairing(&t).unwrap();
    let results = final_results(&t);
    let order: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(order, ["c1", "c2", "c3"]);
    // c1 ran before the panic: its real result is kept.
    assert!(results[0].1.get("is_error").is_none(), "{}", results[0].1);
    // c2 was being dispatched: it may have started.
    assert_eq!(results[1].1["is_error"], true);
    assert!(
        results[1].1["content"]
            .as_str()
            .unwrap()
            .starts_with("state unknown"),
        "{}",
        results[1].1
    );
    // c3 never started.
    assert_eq!(results[2].1["is_error"], true);
    assert!(
        results[2].1["content"]
            .as_str()
            .unwrap()
            .starts_with("not executed: internal error"),
        "{}",
        results[2].1
    );
    // The log closes every call it opened, once.
    assert_eq!(ids(&root.events_of("tool_requested")), ["c1", "c2", "c3"]);
    let mut closed = ids(&root.events_of("tool_finished"));
    closed.sort();
    assert_eq!(closed, ["c1", "c2", "c3"]);
}

#[test]
fn a_panic_in_the_policy_check_ends_run_with_error_and_answers_unexecuted() {
    let api = FakeApi::start(vec![Reply::tools(&[
        ("p1", "run_bash", json!({"command": "touch ran-p1"})),
        ("p2", "get_time", json!({})),
    ])]);
    let root = TestRoot::new(&api.url);
    let out = root
        .command(&["run", "x"])
        .env(PANIC_VAR, "run_bash:policy")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!root.workspace().join("ran-p1").exists());
    let t = root.transcript();
    assert_eq!(t["stop_reason"], "error");
    check_pairing(&t).unwrap();
    for (id, r) in final_results(&t) {
        assert_eq!(r["is_error"], true, "{id}");
        assert!(
            r["content"]
                .as_str()
                .unwrap()
                .starts_with("not executed: internal error"),
            "{r}"
        );
    }
    assert_eq!(ids(&root.events_of("tool_requested")), ["p1", "p2"]);
    assert_eq!(root.events_of("tool_finished").len(), 2);
    assert_eq!(root.events_of("policy_decision").len(), 0);
}

#[test]
fn a_panicking_task_finishes_with_error_and_the_daemon_keeps_serving() {
    let api = FakeApi::start(vec![
        Reply::tool("p1", "run_bash", json!({"command": "touch ran-p1"})),
        Reply::text("the second task is fine"),
    ]);
    let root = TestRoot::new(&api.url);
    let mut d = Daemon::start_with_env(&root, &[(PANIC_VAR, "run_bash:policy")]);
    let first = d.submit("this one panics");
    let t = d.wait_finished(&first);
    assert_eq!(t["stop_reason"], "error", "{t}");
    let error = t["error"].as_str().unwrap();
    assert!(error.starts_with("internal error: panic"), "{error}");

    let second = d.submit("this one does not");
    let t2 = d.wait_finished(&second);
    assert_eq!(t2["stop_reason"], "end_turn", "{t2}");
    assert_eq!(t2["answer"], "the second task is fine");
    assert_eq!(
        d.request("GET", "/healthz", None),
        (200, json!({"status": "ok"}))
    );
    assert!(d.child.try_wait().unwrap().is_none(), "the daemon is alive");

    let finished: Vec<Value> = root
        .events_of("task_finished")
        .into_iter()
        .filter(|e| e["task_id"] == first.as_str())
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["stop_reason"], "error");
    assert_eq!(finished[0]["error"], error);
    let path = root.dir.join(format!("transcripts/{first}.json"));
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(saved["status"], "finished");
    assert_eq!(saved["stop_reason"], "error");
    check_pairing(&saved).unwrap();
    let results = final_results(&saved);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].1["is_error"], true);
    // The panic is logged once through the daemon's logging, not sprayed.
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert_eq!(
        log.matches("injected by HARNESSD_TEST_PANIC_ON_TOOL")
            .count(),
        1,
        "{log}"
    );
}
