//! events.jsonl and transcripts: complete, ordered, parseable, secret-free.

use serde_json::json;

use crate::common::{FakeApi, Reply, SECRET_KEY, TestRoot, stderr, stdout};

#[test]
fn events_record_a_task_in_order_and_seq_continues_across_runs() {
    let api = FakeApi::start(vec![
        Reply::tool("t1", "read_file", json!({"path": "scores.csv"})),
        Reply::text("first"),
        Reply::text("second"),
    ]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let first_run = root.events().len();
    assert_eq!(root.run(&["run", "two"]).status.code(), Some(0));
    let events = root.events();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(events.len() > first_run);
    let types: Vec<&str> = events[..first_run]
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            ["config_loaded", "config_loaded"].as_slice(),
            &crate::common::ONE_TOOL_TASK
        ]
        .concat()
    );
    for e in &events {
        let ts = e["ts"].as_str().unwrap();
        assert!(
            ts.ends_with('Z') && ts.len() == 24,
            "ts {ts} is RFC 3339 UTC with ms"
        );
    }
    let task_events: Vec<_> = events[..first_run]
        .iter()
        .filter(|e| e.get("task_id").is_some())
        .collect();
    assert_eq!(task_events.len(), first_run - 2);
    let task_id = task_events[0]["task_id"].as_str().unwrap();
    assert!(task_events.iter().all(|e| e["task_id"] == task_id));
    assert_eq!(events[0]["file"], "config/config.toml");
    assert_eq!(events[1]["file"], "policies/settings.json");
    assert_eq!(events[0]["sha256"].as_str().unwrap().len(), 64);
    let started = &events[2];
    assert_eq!(started["prompt"], "one");
    assert_eq!(started["source"], "cli");
    let fin = &events[7];
    assert_eq!(fin["tool"], "read_file");
    assert_eq!(fin["is_error"], false);
    assert_eq!(fin["exit_code"], 0);
}

#[test]
fn transcript_holds_exact_messages_and_turns() {
    let api = FakeApi::start(vec![
        Reply::tool("t1", "get_time", json!({})),
        Reply::text("It is now."),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "time?"]);
    assert_eq!(out.status.code(), Some(0));
    let t = root.transcript();
    assert_eq!(t["status"], "finished");
    assert_eq!(t["stop_reason"], "end_turn");
    assert_eq!(t["answer"], "It is now.");
    assert_eq!(t["model"], "claude-sonnet-4-5");
    let msgs = t["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[1]["content"][0]["type"], "tool_use");
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    let turns = t["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["stop_reason"], "tool_use");
    assert!(turns[1]["latency_ms"].is_u64());
    // What was sent last equals the transcript's history minus the final answer.
    let reqs = api.requests();
    let mut sent = reqs[1].body["messages"].clone();
    let last = sent.as_array_mut().unwrap().last_mut().unwrap();
    for b in last["content"].as_array_mut().unwrap() {
        b.as_object_mut().unwrap().remove("cache_control");
    }
    assert_eq!(sent.as_array().unwrap()[..], msgs[..3]);
    assert!(stderr(&out).contains(&format!(
        "transcripts/{}.json",
        t["task_id"].as_str().unwrap()
    )));
}

#[test]
fn the_api_key_appears_in_no_record_output_or_tool_environment() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            (
                "e",
                "run_bash",
                json!({"command": "env; echo; cat /proc/self/environ"}),
            ),
            (
                "p",
                "run_python",
                json!({"code": "import os; print(dict(os.environ))"}),
            ),
        ]),
        Reply::error(401, "authentication_error", "invalid x-api-key"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--yes", "print the environment"]);
    assert_eq!(out.status.code(), Some(1));
    let results = crate::common::last_results(&api.requests()[1].body);
    assert!(
        results[0]["content"].as_str().unwrap().contains("PATH="),
        "the tool really ran env"
    );
    for r in &results {
        assert!(!r["content"].as_str().unwrap().contains(SECRET_KEY));
        assert!(!r["content"].as_str().unwrap().contains("ANTHROPIC_API_KEY"));
    }
    let records = root.all_records();
    assert!(records.len() >= 4, "{records:?}");
    for (path, text) in records {
        assert!(
            !text.contains(SECRET_KEY),
            "key leaked into {}",
            path.display()
        );
    }
    assert!(!stderr(&out).contains(SECRET_KEY));
    assert!(!stdout(&out).contains(SECRET_KEY));
}

#[test]
fn torn_last_line_is_moved_aside_at_start_and_nothing_is_lost() {
    let api = FakeApi::start(vec![Reply::text("a"), Reply::text("b")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let before = std::fs::read_to_string(root.dir.join("transcripts/events.jsonl")).unwrap();
    let n = before.lines().count();
    let torn = format!("{{\"seq\":{},\"ts\":\"2026-11-29T1", n + 1);
    std::fs::write(
        root.dir.join("transcripts/events.jsonl"),
        format!("{before}{torn}"),
    )
    .unwrap();
    assert_eq!(root.run(&["run", "two"]).status.code(), Some(0));
    let events = root.events();
    assert_eq!(events[n]["type"], "events_repaired");
    assert_eq!(events[n]["seq"], n as u64 + 1);
    let torn_file = root.dir.join(events[n]["torn_file"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(torn_file).unwrap(), torn);
    let after = std::fs::read_to_string(root.dir.join("transcripts/events.jsonl")).unwrap();
    assert!(after.starts_with(&before), "no complete line was lost");
}

#[test]
fn long_fields_are_capped_in_events_but_whole_in_the_transcript() {
    let long = "z".repeat(10_000);
    let api = FakeApi::start(vec![Reply::text("ok")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", &long]).status.code(), Some(0));
    let started = &root.events_of("task_started")[0];
    let prompt = started["prompt"].as_str().unwrap();
    assert!(prompt.chars().count() < 4200);
    assert!(prompt.contains("[… 5906 chars omitted …]"));
    assert_eq!(
        root.transcript()["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .len(),
        10_000
    );
}

#[test]
fn events_command_reads_the_log_without_a_daemon() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let out = root.run(&["events", "--type", "task_finished", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["stop_reason"], "end_turn");
}

#[test]
fn a_long_command_is_cut_in_its_event_and_tied_to_the_whole_input_by_input_sha256() {
    use sha2::{Digest, Sha256};
    let hidden = "rm -rf ~/.ssh";
    let head = format!("echo {}", "a".repeat(5990));
    let mut command = format!("{head}; {hidden}; echo ");
    command.push_str(&"b".repeat(12_000 - command.len()));
    assert_eq!(command.len(), 12_000);
    let api = FakeApi::start(vec![
        Reply::tool(
            "long",
            "run_bash",
            json!({"command": command, "timeout_secs": 5}),
        ),
        Reply::text("ok"),
    ]);
    let root = TestRoot::new(&api.url);
    // No TTY and no --yes: the ask-tier call is denied, never run.
    let out = root.run(&["run", "clean up"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let requested = &root.events_of("tool_requested")[0];
    let cut = requested["input"]["command"].as_str().unwrap();
    assert!(cut.chars().count() <= 4200, "{}", cut.len());
    assert!(cut.contains("[… 7906 chars omitted …]"), "{cut}");
    assert!(!cut.contains(hidden), "the middle is cut from the event");
    let sha = requested["input_sha256"].as_str().unwrap();
    assert!(
        sha.len() == 64
            && sha
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{sha}"
    );

    // The transcript holds the whole input, and its compact serialisation — the exact
    // bytes in the transcript file — hashes to input_sha256.
    let t = root.transcript();
    let input = &t["messages"][1]["content"][0]["input"];
    assert_eq!(input["command"].as_str().unwrap(), command);
    assert!(input["command"].as_str().unwrap().contains(hidden));
    let serialised = serde_json::to_string(input).unwrap();
    let file = std::fs::read_to_string(root.dir.join(format!(
        "transcripts/{}.json",
        t["task_id"].as_str().unwrap()
    )))
    .unwrap();
    assert!(file.contains(&format!("\"input\":{serialised}")));
    let digest: String = Sha256::digest(serialised.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(digest, sha);
}
