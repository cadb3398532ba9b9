//! Servers of the Messages API other than Anthropic's (docs/local-servers.md), as
//! they answer: llama.cpp's `exceed_context_size_error` compacts the history and
//! sends it again like Anthropic's "prompt is too long", and a `tool_use` in the
//! answer to a request sent with tools disabled (a server that drops
//! `tool_choice: none`) never runs.

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, stdout};
use harnessd_testkit::long_task::is_summary_request;

/// llama-server's answer to a request longer than its context (`-c 1536`).
const LLAMA_OVERFLOW: &str = r#"{"error":{"code":400,"message":"request (2400 tokens) exceeds the available context size (1536 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2400,"n_ctx":1536}}"#;

/// The events naming `tool_use_id`.
fn events_of_call(root: &TestRoot, id: &str) -> Vec<Value> {
    root.events()
        .into_iter()
        .filter(|e| e["tool_use_id"] == id)
        .collect()
}

#[test]
fn a_llama_cpp_context_overflow_compacts_and_is_sent_again() {
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "list_dir", json!({"path": "."})),
        Reply::tool("tu_2", "list_dir", json!({"path": "."})),
        Reply::tool("tu_3", "get_time", json!({})),
        Reply::raw(400, LLAMA_OVERFLOW),
        // The summary request has tools disabled; this server answers with a call
        // anyway, beside the summary.
        Reply::message(
            json!([
                {"type": "text", "text": "Summary: listed the workspace twice, read the time."},
                {"type": "tool_use", "id": "tu_sum", "name": "write_file",
                 "input": {"path": "from-summary.txt", "content": "ran"}}
            ]),
            "tool_use",
        ),
        Reply::text("done after compaction"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("context", "keep_recent_messages", "2");
    let out = root.run(&["run", "--yes", "Look around."]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "done after compaction\n");
    let requests = api.requests();
    assert_eq!(requests.len(), 6);
    assert!(is_summary_request(&requests[4].body));
    let compacted = root.events_of("context_compacted");
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    assert_eq!(compacted[0]["method"], "summary");
    let errors = root.events_of("model_error");
    assert_eq!(errors[0]["status"], 400);
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("exceed_context_size_error"),
        "{errors:?}"
    );
    // The retried request carries the summary, not the call made beside it.
    let retried = serde_json::to_string(&requests[5].body["messages"]).unwrap();
    assert!(retried.contains("listed the workspace twice"), "{retried}");
    assert!(!retried.contains("tu_sum"), "{retried}");
    assert!(!root.workspace().join("from-summary.txt").exists());
    assert!(events_of_call(&root, "tu_sum").is_empty());
    assert_eq!(
        root.events_of("task_finished")[0]["stop_reason"],
        "end_turn"
    );
}

#[test]
fn a_tool_use_answering_the_tools_disabled_summary_turn_is_not_run() {
    let append = json!({"command": "echo once >> log.txt"});
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "run_bash", append.clone()),
        // Turn 2 is the last: sent with tool_choice none, answered with the very
        // call of turn 1 (which a repeat limit of 2 would also catch).
        Reply::message(
            json!([
                {"type": "text", "text": "Appended once; nothing remains."},
                {"type": "tool_use", "id": "tu_2", "name": "run_bash", "input": append}
            ]),
            "tool_use",
        ),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("loop", "max_turns", "2");
    root.set_config("loop", "no_progress_repeats", "2");
    let out = root.run(&["run", "--yes", "Append to the log."]);
    // 3: a limit stopped the task.
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let requests = api.requests();
    assert_eq!(requests.len(), 2);
    assert!(is_summary_request(&requests[1].body));
    // It ran once, for turn 1 only.
    let log = std::fs::read_to_string(root.workspace().join("log.txt")).unwrap();
    assert_eq!(log, "once\n");
    let finished = root.events_of("task_finished");
    assert_eq!(finished[0]["stop_reason"], "max_turns", "{finished:?}");
    // Answered, so the transcript stays valid, as not executed, saying why.
    let t = root.transcript();
    let messages = t["messages"].as_array().unwrap();
    let answer = last_results(&json!({"messages": messages}));
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(answer[0]["tool_use_id"], "tu_2");
    assert_eq!(answer[0]["is_error"], true);
    let content = answer[0]["content"].as_str().unwrap();
    assert!(content.contains("tools were disabled"), "{content}");
    // Never judged, never approved, never started.
    let kinds: Vec<Value> = events_of_call(&root, "tu_2")
        .into_iter()
        .map(|e| e["type"].clone())
        .collect();
    assert_eq!(kinds, ["tool_requested", "tool_finished"], "{kinds:?}");
    assert_eq!(t["answer"], "Appended once; nothing remains.");
}

#[test]
fn anthropic_base_url_overrides_api_base_url_and_says_so() {
    let api = FakeApi::start(vec![Reply::text("from the env endpoint")]);
    // The file points at a closed port: only the variable reaches the fake.
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root
        .command(&["run", "--yes", "Say hi."])
        .env("ANTHROPIC_BASE_URL", &api.url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "from the env endpoint\n");
    assert_eq!(api.requests().len(), 1);

    let check = root
        .command(&["check", "--json"])
        .env("ANTHROPIC_BASE_URL", &api.url)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(report["api"]["base_url"], api.url.as_str(), "{report}");
    assert_eq!(report["api"]["base_url_from"], "ANTHROPIC_BASE_URL");
    let plain = root.command(&["check"]).output().unwrap();
    let text = stdout(&plain);
    assert!(text.contains("http://127.0.0.1:9"), "{text}");
    assert!(!text.contains("from ANTHROPIC_BASE_URL"), "{text}");

    let bad = root
        .command(&["check"])
        .env("ANTHROPIC_BASE_URL", "localhost:8080")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = stderr(&bad);
    assert!(
        err.contains("ANTHROPIC_BASE_URL") && err.contains("not an http(s) URL"),
        "{err}"
    );
}

#[test]
fn daemon_started_names_the_endpoint_in_force() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new("http://127.0.0.1:9");
    let d =
        crate::common::daemon::Daemon::start_with_env(&root, &[("ANTHROPIC_BASE_URL", &api.url)]);
    drop(d);
    let started = root.events_of("daemon_started");
    assert_eq!(started[0]["base_url"], api.url.as_str(), "{started:?}");
    assert_eq!(started[0]["base_url_from"], "ANTHROPIC_BASE_URL");
}

#[test]
fn a_base_url_that_does_not_parse_is_refused_by_check() {
    let root = TestRoot::new("http://127.0.0.1:9");
    // Each passed the old prefix test, and every request then failed.
    for url in [
        "http://a b",
        "http://[::1",
        "http://",
        "http://127.0.0.1:9\n",
    ] {
        let out = root
            .command(&["check"])
            .env("ANTHROPIC_BASE_URL", url)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{url:?}: {}", stdout(&out));
        assert!(stderr(&out).contains("ANTHROPIC_BASE_URL"), "{url:?}");
    }
    root.set_config("api", "base_url", "\"http://[::1\"");
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("api.base_url"), "{}", stderr(&out));
}
