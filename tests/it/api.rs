//! The Messages API client as seen from the wire: retries, errors, caching,
//! verbatim echo of what the model sent.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

#[test]
fn retries_529_and_429_with_retry_after_then_succeeds() {
    let api = FakeApi::start(vec![
        Reply::error(529, "overloaded_error", "Overloaded"),
        Reply::error(429, "rate_limit_error", "slow down").header("retry-after", "1"),
        Reply::text("finally"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "max_retries", "2");
    let started = Instant::now();
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "finally\n");
    let reqs = api.requests();
    assert_eq!(reqs.len(), 3);
    // The retry-after wait (1 s) replaced the computed backoff.
    let gap = reqs[2].received_at - reqs[1].received_at;
    assert!(gap >= Duration::from_millis(950), "waited only {gap:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let errors = root.events_of("model_error");
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0]["status"], 529);
    assert_eq!(errors[0]["attempt"], 1);
    assert!(errors[0]["retry_in_ms"].as_u64().unwrap() <= 500);
    assert_eq!(errors[1]["status"], 429);
    assert_eq!(errors[1]["retry_in_ms"], 1000);
    assert!(errors[1]["message"].as_str().unwrap().contains("slow down"));
}

#[test]
fn client_errors_are_not_retried_and_surface_the_api_message() {
    for status in [400, 401, 403, 404] {
        let api = FakeApi::start(vec![
            Reply::error(
                status,
                "invalid_request_error",
                "max_tokens: must be at most 64000",
            ),
            Reply::text("never"),
        ]);
        let root = TestRoot::new(&api.url);
        root.set_config("api", "max_retries", "3");
        let out = root.run(&["run", "x"]);
        assert_eq!(out.status.code(), Some(1), "{status}: {}", stderr(&out));
        assert_eq!(api.requests().len(), 1, "{status} must not be retried");
        assert!(
            stderr(&out).contains("max_tokens: must be at most 64000"),
            "{}",
            stderr(&out)
        );
        let err = &root.events_of("model_error")[0];
        assert_eq!(err["status"], status);
        assert!(err["retry_in_ms"].is_null());
    }
}

#[test]
fn malformed_2xx_body_is_a_clear_error_not_retried() {
    let api = FakeApi::start(vec![
        Reply::raw(200, "{\"content\": [oops"),
        Reply::text("never"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "max_retries", "3");
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(api.requests().len(), 1);
    let err = stderr(&out);
    assert!(err.contains("malformed response body"), "{err}");
    assert_eq!(root.transcript()["stop_reason"], "error");
}

#[test]
fn connection_refused_is_retried_then_fails() {
    // A port nobody listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let root = TestRoot::new(&url);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(1));
    let errors = root.events_of("model_error");
    assert_eq!(errors.len(), 2);
    assert!(errors[0]["status"].is_null());
    assert!(errors[0]["retry_in_ms"].is_u64());
}

#[test]
fn thinking_blocks_and_unknown_blocks_are_echoed_byte_identical() {
    let content = json!([
        {"type": "thinking", "thinking": "Let me check the file.", "signature": "EqQBCkYIARgCIkDk+sig/=="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
        {"type": "mystery_block", "payload": {"z": 1, "a": [true, null]}},
        {"type": "tool_use", "id": "tu_9", "name": "get_time", "input": {}}
    ]);
    let api = FakeApi::start(vec![
        Reply::message(content.clone(), "tool_use"),
        Reply::text("ok"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "thinking_budget_tokens", "2048");
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert_eq!(
        reqs[0].body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    let echoed = &reqs[1].body["messages"][1]["content"];
    assert_eq!(
        serde_json::to_string(echoed).unwrap(),
        serde_json::to_string(&content).unwrap()
    );
    let saved = &root.transcript()["messages"][1]["content"];
    assert_eq!(saved, &content);
}

#[test]
fn cache_breakpoints_move_forward_each_turn() {
    let api = FakeApi::start(vec![
        Reply::tool("a", "get_time", json!({})),
        Reply::tool("b", "list_dir", json!({})),
        Reply::text("ok"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for (i, r) in api.requests().iter().enumerate() {
        let tools = r.body["tools"].as_array().unwrap();
        assert_eq!(tools.last().unwrap()["cache_control"]["type"], "ephemeral");
        assert_eq!(r.body["system"][0]["cache_control"]["type"], "ephemeral");
        let msgs = r.body["messages"].as_array().unwrap();
        let marked: Vec<usize> = msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|b| b.get("cache_control").is_some())
            })
            .map(|(j, _)| j)
            .collect();
        assert_eq!(
            marked,
            [msgs.len() - 1],
            "request {i}: only the newest message carries a breakpoint"
        );
    }
    // The breakpoint is not stored in the history.
    let t = root.transcript();
    assert!(!t["messages"].to_string().contains("cache_control"));
}

#[test]
fn missing_key_is_a_config_error_before_any_request() {
    let api = FakeApi::start(vec![Reply::text("never")]);
    let root = TestRoot::new(&api.url);
    let out = root
        .command(&["run", "x"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("ANTHROPIC_API_KEY"),
        "{}",
        stderr(&out)
    );
    assert_eq!(api.requests().len(), 0);
    let out = root
        .command(&["run", "x"])
        .env("ANTHROPIC_API_KEY", "  ")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(api.requests().len(), 0);
}

#[test]
fn api_key_file_is_used_and_must_be_private() {
    let api = FakeApi::start(vec![Reply::text("ok")]);
    let root = TestRoot::new(&api.url);
    let key_path = root.dir.join("config/key");
    std::fs::write(&key_path, "sk-from-file\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    root.set_config("api", "api_key_file", "\"config/key\"");
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("chmod 600"), "{}", stderr(&out));
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = root
        .command(&["run", "x"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(api.requests()[0].headers["x-api-key"], "sk-from-file");
}

#[test]
fn usage_with_cache_tokens_is_kept_in_events_and_transcript() {
    let usage = json!({"input_tokens": 3, "output_tokens": 7, "cache_creation_input_tokens": 11, "cache_read_input_tokens": 1000});
    let api = FakeApi::start(vec![Reply::message_with_usage(
        json!([{"type": "text", "text": "hi"}]),
        "end_turn",
        usage,
    )]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0));
    let resp = &root.events_of("model_response")[0];
    assert_eq!(resp["usage"]["cache_read_input_tokens"], 1000);
    assert_eq!(resp["usage"]["cache_creation_input_tokens"], 11);
    let t = root.transcript();
    assert_eq!(t["turns"][0]["usage"]["cache_read_input_tokens"], 1000);
    assert_eq!(t["usage"]["output_tokens"], 7);
    let fin = &root.events_of("task_finished")[0];
    assert_eq!(fin["usage"]["cache_creation_input_tokens"], 11);
    let _: Value = t;
}
