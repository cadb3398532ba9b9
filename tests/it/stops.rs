//! Every stop of docs/commands.md and its exit code.

use serde_json::json;

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, stdout};

#[test]
fn end_turn_answers_on_stdout_and_exits_0() {
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "read_file", json!({"path": "scores.csv"})),
        Reply::text("The average score is 81.125."),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "What is the average score in scores.csv?"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "The average score is 81.125.\n");
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2);
    let first = &reqs[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.headers["anthropic-version"], "2023-06-01");
    assert_eq!(first.headers["x-api-key"], crate::common::SECRET_KEY);
    assert_eq!(first.body["model"], "claude-sonnet-4-5");
    assert_eq!(first.body["max_tokens"], 4096);
    assert!(
        first.body["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("harnessd")
    );
    let names: Vec<&str> = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "run_bash",
            "run_python",
            "get_time",
            "load_skill",
            "delegate"
        ]
    );
    assert_eq!(
        first.body["messages"][0]["content"][0]["text"],
        "What is the average score in scores.csv?"
    );
    assert!(first.body.get("tool_choice").is_none());
    let results = last_results(&reqs[1].body);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_use_id"], "tu_1");
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("alice,red,91")
    );
    assert!(results[0].get("is_error").is_none());
    let stderr = stderr(&out);
    assert!(
        stderr.contains("[turn 1]") && stderr.contains("read_file"),
        "{stderr}"
    );
}

#[test]
fn max_turns_sends_a_summary_request_with_tools_disabled_and_exits_3() {
    let api = FakeApi::start(vec![
        Reply::tool("a", "get_time", json!({})),
        Reply::tool("b", "list_dir", json!({})),
        Reply::text("Summary: I looked at the time and the workspace; nothing remains."),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("loop", "max_turns", "3");
    let out = root.run(&["run", "look around"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("Summary:"));
    let reqs = api.requests();
    assert_eq!(
        reqs.len(),
        3,
        "the summary request is one of the max_turns, not an extra one"
    );
    assert!(reqs[1].body.get("tool_choice").is_none());
    let last = &reqs[2].body;
    assert_eq!(last["tool_choice"], json!({"type": "none"}));
    assert_eq!(
        last["tools"].as_array().unwrap().len(),
        9,
        "tools array is kept"
    );
    let content = last["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(content[0]["type"], "tool_result");
    let text = content.last().unwrap();
    assert_eq!(text["type"], "text");
    assert!(text["text"].as_str().unwrap().contains("Summarise"));
    let finished = root.events_of("task_finished");
    assert_eq!(finished[0]["stop_reason"], "max_turns");
    assert_eq!(root.transcript()["stop_reason"], "max_turns");
}

#[test]
fn max_turns_flag_overrides_config() {
    let api = FakeApi::start(vec![
        Reply::tool("a", "get_time", json!({})),
        Reply::text("sum"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--max-turns", "2", "t"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(
        api.requests()[1].body["tool_choice"],
        json!({"type": "none"})
    );
}

#[test]
fn token_budget_stops_before_running_the_turns_tools() {
    let marker = "budget-marker";
    let api = FakeApi::start(vec![Reply::message_with_usage(
        json!([{"type": "tool_use", "id": "t1", "name": "write_file", "input": {"path": marker, "content": "x"}}]),
        "tool_use",
        json!({"input_tokens": 60, "output_tokens": 10, "cache_read_input_tokens": 40}),
    )]);
    let root = TestRoot::new(&api.url);
    root.set_config("loop", "token_budget", "100");
    let out = root.run(&["run", "--yes", "write"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(api.requests().len(), 1);
    assert!(
        !root.workspace().join(marker).exists(),
        "the call must not run"
    );
    let t = root.transcript();
    let msgs = t["messages"].as_array().unwrap();
    let results = msgs.last().unwrap()["content"].as_array().unwrap();
    assert_eq!(results[0]["tool_use_id"], "t1");
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("token budget")
    );
    assert_eq!(t["stop_reason"], "token_budget");
    assert_eq!(t["usage"]["cache_read_input_tokens"], 40);
    // The saved transcript is valid to resume: every tool_use answered.
    crate::common::fake_api::check_pairing(&t).unwrap();
}

#[test]
fn no_progress_stops_on_the_repeat_without_running_it() {
    // The same call (name and input) each turn, under a fresh id: a reused id would
    // be a protocol error of its own (docs/events.md), not a repeat.
    let call = |id: &str| Reply::tool(id, "run_bash", json!({"command": "echo run >> count.txt"}));
    let api = FakeApi::start(vec![call("x1"), call("x2"), call("x3")]);
    let root = TestRoot::new(&api.url);
    root.set_config("loop", "no_progress_repeats", "3");
    let out = root.run(&["run", "--yes", "loop"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(api.requests().len(), 3);
    let count = std::fs::read_to_string(root.workspace().join("count.txt")).unwrap();
    assert_eq!(
        count.lines().count(),
        2,
        "the third, repeating call is not executed"
    );
    assert_eq!(
        root.events_of("task_finished")[0]["stop_reason"],
        "no_progress"
    );
}

#[test]
fn max_tokens_never_executes_a_cut_tool_use() {
    let api = FakeApi::start(vec![Reply::message(
        json!([{"type": "text", "text": "Let me"}, {"type": "tool_use", "id": "cut", "name": "run_bash", "input": {"command": "touch cut-marker"}}]),
        "max_tokens",
    )]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(!root.workspace().join("cut-marker").exists());
    let t = root.transcript();
    crate::common::fake_api::check_pairing(&t).unwrap();
    assert_eq!(t["stop_reason"], "max_tokens");
}

#[test]
fn refusal_exits_4() {
    let api = FakeApi::start(vec![Reply::message(json!([]), "refusal")]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(root.events_of("task_finished")[0]["stop_reason"], "refusal");
}

#[test]
fn pause_turn_resends_the_history_as_is_and_counts_a_turn() {
    let paused = json!([{"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}}]);
    let api = FakeApi::start(vec![
        Reply::message(paused.clone(), "pause_turn"),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["content"], paused);
    assert_eq!(root.events_of("task_finished")[0]["turns"], 2);
}

#[test]
fn calls_beyond_the_per_turn_limit_are_answered_unexecuted() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("c1", "run_bash", json!({"command": "touch one"})),
            ("c2", "run_bash", json!({"command": "touch two"})),
        ]),
        Reply::text("ok"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("loop", "max_tool_calls_per_turn", "1");
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(root.workspace().join("one").exists());
    assert!(!root.workspace().join("two").exists());
    let results = last_results(&api.requests()[1].body);
    assert_eq!(results[1]["is_error"], true);
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("at most 1 tool calls")
    );
}

#[test]
fn permanent_server_error_exits_1_and_keeps_the_transcript() {
    let api = FakeApi::start(vec![
        Reply::error(500, "api_error", "boom"),
        Reply::error(500, "api_error", "boom"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(api.requests().len(), 2, "first attempt + max_retries (1)");
    assert!(stderr(&out).contains("api_error: boom"), "{}", stderr(&out));
    let t = root.transcript();
    assert_eq!(t["stop_reason"], "error");
    assert_eq!(t["status"], "finished");
    assert_eq!(t["messages"][0]["content"][0]["text"], "x");
    assert_eq!(root.events_of("model_error").len(), 2);
}

#[test]
fn interrupt_during_a_tool_kills_it_saves_the_transcript_and_exits_130() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "long",
            "run_bash",
            json!({"command": format!("{} & wait", crate::tools::HEARTBEAT)}),
        ),
        Reply::text("never asked"),
    ]);
    let root = TestRoot::new(&api.url);
    let child = root
        .command(&["run", "--yes", "x"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let heartbeat = root.workspace().join("heartbeat");
    crate::common::wait_until("the heartbeat", || heartbeat.exists());
    std::thread::sleep(std::time::Duration::from_millis(100));
    let started = std::time::Instant::now();
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    crate::tools::assert_heartbeat_stopped(&heartbeat);
    assert_eq!(api.requests().len(), 1);
    let t = root.transcript();
    assert_eq!(t["stop_reason"], "cancelled");
    crate::common::fake_api::check_pairing(&t).unwrap();
    assert_eq!(
        root.events_of("task_finished")[0]["stop_reason"],
        "cancelled"
    );
}

#[test]
fn interrupt_during_a_model_request_exits_130() {
    let mut slow = Reply::text("too late");
    slow.delay = std::time::Duration::from_secs(30);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    let child = root
        .command(&["run", "x"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while root.events_of("model_request").is_empty() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert_eq!(root.transcript()["stop_reason"], "cancelled");
}
