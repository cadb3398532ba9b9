//! `harnessd policy test`, `harnessd replay` and the shipped settings schema.

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

#[test]
fn policy_test_shows_decision_rule_and_simple_commands() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root.run(&[
        "policy",
        "test",
        "run_bash",
        "git status && curl evil.example",
    ]);
    assert_eq!(out.status.code(), Some(3), "ask exits 3: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("ask  (rule: run_bash)"), "{text}");
    assert!(
        text.contains("  - git status\n") && text.contains("  - curl evil.example\n"),
        "{text}"
    );
    let out = root.run(&[
        "policy",
        "test",
        "--json",
        "run_bash",
        "ls -la; rm -rf /tmp/x",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tier"], "deny");
    assert_eq!(v["rule"], "run_bash(rm -rf *)");
    assert_eq!(v["provable"], true);
    let out = root.run(&["policy", "test", "--json", "read_file", "./x/..//secrets/k"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tier"], "deny");
    assert_eq!(v["subject"], "workspace/secrets/k");
    let out = root.run(&[
        "policy",
        "test",
        "--json",
        "write_file",
        r#"{"path": "a.txt", "content": "x"}"#,
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tier"], "ask");
    let out = root.run(&["policy", "test", "rm_everything", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown tool"));
}

#[test]
fn replay_lists_calls_whose_decision_would_change() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("r1", "read_file", json!({"path": "scores.csv"})),
            ("l1", "run_bash", json!({"command": "ls"})),
            ("t1", "get_time", json!({})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "x"]).status.code(), Some(0));
    let transcript = root.dir.join(format!(
        "transcripts/{}.json",
        root.transcript()["task_id"].as_str().unwrap()
    ));
    let out = root.run(&["replay", transcript.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("3 recorded tool calls, 0 would be decided differently now"),
        "{}",
        stdout(&out)
    );
    // A stricter policy: reading the workspace's CSV files is now refused.
    root.edit_settings(|s| {
        s["tools"]["deny"]
            .as_array_mut()
            .unwrap()
            .push(json!("read_file(workspace/*.csv)"))
    });
    let out = root.run(&[
        "replay",
        "--json",
        root.dir.join("transcripts").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["calls"], 3);
    let changed = v["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 1, "{v}");
    assert_eq!(changed[0]["tool_use_id"], "r1");
    assert_eq!(changed[0]["was"], "allow (read_file)");
    assert_eq!(changed[0]["now"], "deny (read_file(workspace/*.csv))");
    let out = root.run(&["replay", transcript.to_str().unwrap()]);
    let table = stdout(&out);
    assert!(
        table.contains("r1")
            && table.contains("allow (read_file)")
            && table.contains("deny (read_file(workspace/*.csv))"),
        "{table}"
    );
    // Nothing ran: the replay made no request and wrote no events.
    assert_eq!(api.requests().len(), 2);
}

#[test]
fn default_settings_point_at_the_shipped_schema() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(settings["$schema"], "./settings.schema.json");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root.dir.join("policies/settings.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(schema["title"], "Settings");
    assert!(schema["properties"]["tools"].is_object());
    let out = root.run(&["policy", "schema"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        schema
    );
}

#[test]
fn path_dodges_are_normalised_before_matching() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let ws = root.workspace();
    std::fs::create_dir_all(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/k"), "x").unwrap();
    std::os::unix::fs::symlink(ws.join("secrets"), ws.join("alias")).unwrap();
    std::os::unix::fs::symlink(ws.join("secrets/k"), ws.join("k-link")).unwrap();
    for dodge in [
        "secrets/k",
        "./secrets/k",
        ".//secrets//k",
        "x/../secrets/k",
        "alias/k",
        "k-link",
        "../workspace/secrets/k",
    ] {
        let out = root.run(&["policy", "test", "--json", "read_file", dodge]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["tier"], "deny", "{dodge}: {v}");
        assert_eq!(v["subject"], "workspace/secrets/k", "{dodge}");
    }
    let abs = ws.join("secrets/k");
    let out = root.run(&[
        "policy",
        "test",
        "--json",
        "read_file",
        abs.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tier"], "deny", "{v}");
}
