//! MCP through `harnessd run` with the hostile stdlib server: tools offered from the
//! pins, calls decided by rules and recorded like built-ins, results mapped, what
//! the server asks of the client refused, a definition that changed withheld and
//! denied until `mcp pin`, a death recorded and the server started again.

use serde_json::{Value, json};

use crate::common::mcp::{hostile, offered, text};
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr};

/// Runs `harnessd run` with the hostile server's state file passed in.
fn run(root: &TestRoot, state: &std::path::Path, args: &[&str]) -> std::process::Output {
    root.command(args)
        .env("HOSTILE_STATE_SRC", state)
        .output()
        .unwrap()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[test]
fn a_server_is_pinned_at_first_use_its_tools_offered_and_called() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            (
                "c1",
                "mcp__hostile__echo",
                json!({"text": "hello from the model"}),
            ),
            ("c2", "mcp__hostile__image", json!({})),
            ("c3", "mcp__hostile__fail", json!({})),
            ("c4", "mcp__hostile__wipe", json!({})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let out = run(&root, &state, &["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    let tools = offered(&reqs[0].body);
    for t in ["mcp__hostile__echo", "mcp__hostile__crash", "read_file"] {
        assert!(tools.contains(&t.to_string()), "{t} not offered: {tools:?}");
    }
    let echo = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__hostile__echo")
        .unwrap()
        .clone();
    assert_eq!(
        echo["description"],
        "(MCP server hostile) Echo the text back."
    );
    assert_eq!(echo["input_schema"]["required"], json!(["text"]));
    let results = last_results(&reqs[1].body);
    assert_eq!(text(&results[0]), "hello from the model");
    assert_ne!(results[0]["is_error"], true);
    // The image is kept as a file; the model reads a placeholder naming it.
    let image = text(&results[1]);
    assert!(
        image.starts_with("here:\n[image image/png, 12 bytes, kept as transcripts/"),
        "{image}"
    );
    let kept = image
        .split("kept as ")
        .nth(1)
        .unwrap()
        .trim_end_matches(']');
    assert_eq!(
        std::fs::read(root.dir.join(kept)).unwrap(),
        b"\x89PNG\r\n\x1a\nfake"
    );
    assert_eq!(text(&results[2]), "it went wrong");
    assert_eq!(results[2]["is_error"], true);
    // Pinned at first use, in a lock file that parses and names every tool.
    let lock: Value = serde_json::from_str(
        &std::fs::read_to_string(root.dir.join("policies/mcp.lock.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(lock["version"], 1);
    assert_eq!(crate::common::mcp::lock_violations(&root), None);
    assert_eq!(
        lock["servers"]["hostile"]["tools"]
            .as_object()
            .unwrap()
            .len(),
        11
    );
    let events = root.events();
    let pinned = of_type(&events, "mcp_tools_pinned");
    assert_eq!(pinned.len(), 1);
    assert_eq!(pinned[0]["by"], "first_use");
    let started = of_type(&events, "mcp_server_started");
    assert_eq!(started.len(), 1, "one process for the task");
    assert_eq!(started[0]["protocol"], "2025-06-18");
    let finished = of_type(&events, "tool_finished");
    assert!(
        finished.iter().all(|f| f["server"] == "hostile"),
        "{finished:?}"
    );
    let c1 = finished.iter().find(|f| f["tool_use_id"] == "c1").unwrap();
    assert!(
        c1["output_file"].as_str().unwrap().ends_with("c1.out"),
        "{c1}"
    );
    let decisions = of_type(&events, "policy_decision");
    assert!(
        decisions.iter().all(|d| d["rule"] == "mcp__hostile"),
        "{decisions:?}"
    );
}

#[test]
fn rules_decide_calls_by_name_and_by_key_patterns() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("d1", "mcp__hostile__wipe", json!({})),
            ("k1", "mcp__hostile__echo", json!({"text": "hi there"})),
            ("k2", "mcp__hostile__echo", json!({"text": "bye"})),
            ("k3", "mcp__hostile__echo", json!({"text": "hi", "n": 3})),
            ("v1", "mcp__hostile__echo", json!({"text": 5})),
            ("u1", "mcp__hostile__nonesuch", json!({})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({}));
    root.edit_settings(|s| {
        s["tools"]["deny"] = json!(["mcp__hostile__wipe"]);
        s["tools"]["allow"] = json!(["mcp__hostile__echo(text=hi*, !)"]);
    });
    // Without --yes and without a terminal, what asks is denied.
    let out = run(&root, &state, &["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert!(!offered(&reqs[0].body).contains(&"mcp__hostile__wipe".to_string()));
    let r = last_results(&reqs[1].body);
    assert!(
        text(&r[0]).contains("denied by policy (rule `mcp__hostile__wipe`)"),
        "{}",
        text(&r[0])
    );
    assert_eq!(text(&r[1]), "hi there");
    assert_eq!(r[2]["is_error"], true, "{}", text(&r[2]));
    assert_eq!(
        r[3]["is_error"], true,
        "a key the rule does not name, after `!`"
    );
    assert!(text(&r[4]).contains("invalid input"), "{}", text(&r[4]));
    assert!(text(&r[5]).contains("mcp:unpinned"), "{}", text(&r[5]));
    let events = root.events();
    let rules: Vec<String> = of_type(&events, "policy_decision")
        .iter()
        .map(|d| {
            format!(
                "{} {}",
                d["tier"].as_str().unwrap(),
                d["rule"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            "deny mcp__hostile__wipe",
            "allow mcp__hostile__echo(text=hi*, !)",
            "ask default",
            "ask default",
            "deny mcp:unpinned"
        ]
    );
}

#[test]
fn requests_from_the_server_are_refused_and_recorded() {
    let api = FakeApi::start(vec![
        Reply::tool("a", "mcp__hostile__ask_client", json!({})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({}));
    let out = run(&root, &state, &["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let answer = text(&last_results(&api.requests()[1].body)[0]);
    for method in ["sampling/createMessage", "roots/list", "elicitation/create"] {
        let line = answer
            .lines()
            .find(|l| l.starts_with(method))
            .unwrap_or_default();
        assert!(line.contains("-32601"), "{method} was answered: {answer}");
    }
    let events = root.events();
    let refused: Vec<&str> = of_type(&events, "mcp_request_refused")
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        refused,
        ["sampling/createMessage", "roots/list", "elicitation/create"]
    );
}

#[test]
fn a_changed_definition_is_withheld_and_denied_until_pinned() {
    let api = FakeApi::start(vec![
        Reply::tool("p", "mcp__hostile__echo", json!({"text": "one"})),
        Reply::text("first"),
        Reply::tool("q", "mcp__hostile__echo", json!({"text": "two"})),
        Reply::text("second"),
        Reply::tool("r", "mcp__hostile__echo", json!({"text": "three"})),
        Reply::text("third"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile__echo"]));
    assert_eq!(run(&root, &state, &["run", "x"]).status.code(), Some(0));
    let before: Value = serde_json::from_str(
        &std::fs::read_to_string(root.dir.join("policies/mcp.lock.json")).unwrap(),
    )
    .unwrap();
    // The second start serves another description for `echo`.
    let out = run(&root, &state, &["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert_eq!(text(&last_results(&reqs[1].body)[0]), "one");
    let denied = text(&last_results(&reqs[3].body)[0]);
    assert!(denied.contains("mcp:drifted"), "{denied}");
    // Found drifted at the call: withheld from the next request of the task.
    assert!(!offered(&reqs[3].body).contains(&"mcp__hostile__echo".to_string()));
    let events = root.events();
    let changed = of_type(&events, "mcp_tools_changed");
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["changed"][0]["tool"], "echo");
    assert_eq!(
        changed[0]["changed"][0]["old_sha256"],
        before["servers"]["hostile"]["tools"]["echo"]["sha256"]
    );
    // The lock file is untouched until an operator accepts the change.
    let unchanged = std::fs::read_to_string(root.dir.join("policies/mcp.lock.json")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&unchanged).unwrap(), before);
    // Without a daemon `mcp list` starts the server itself and shows the drift.
    let list = root
        .command(&["mcp", "list", "--json"])
        .env("HOSTILE_STATE_SRC", &state)
        .output()
        .unwrap();
    assert!(list.status.success(), "{}", stderr(&list));
    let list: Value = serde_json::from_str(&crate::common::stdout(&list)).unwrap();
    let tools = list["servers"][0]["tools"].as_array().unwrap();
    let echo = tools.iter().find(|t| t["name"] == "echo").unwrap();
    assert_eq!(echo["state"], "changed", "{echo}");
    assert_ne!(echo["pinned_sha256"], echo["live_sha256"]);
    assert!(
        tools
            .iter()
            .filter(|t| t["name"] != "echo")
            .all(|t| t["state"] == "pinned")
    );
    let pin = root
        .command(&["mcp", "pin", "hostile"])
        .env("HOSTILE_STATE_SRC", &state)
        .output()
        .unwrap();
    assert!(pin.status.success(), "{}", stderr(&pin));
    let after = std::fs::read_to_string(root.dir.join("policies/mcp.lock.json")).unwrap();
    assert!(after.contains("evil.example"), "{after}");
    let pinned = of_type(&root.events(), "mcp_tools_pinned")
        .last()
        .copied()
        .cloned()
        .unwrap();
    assert_eq!(pinned["by"], "cli");
    assert_eq!(run(&root, &state, &["run", "x"]).status.code(), Some(0));
    assert_eq!(text(&last_results(&api.requests()[5].body)[0]), "three");
}

#[test]
fn a_server_that_dies_mid_call_is_an_error_result_and_starts_again() {
    let api = FakeApi::start(vec![
        Reply::tool("c", "mcp__hostile__crash", json!({})),
        Reply::tool("e", "mcp__hostile__echo", json!({"text": "back"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    // No run counter: the restarted server lists what was pinned (a counted second
    // start would serve a changed description, and be denied as drifted).
    let state = hostile(&root, json!({"env": {}}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let out = run(&root, &state, &["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    let crashed = &last_results(&reqs[1].body)[0];
    assert_eq!(crashed["is_error"], true);
    assert!(
        text(crashed).contains("ended during the call (exit code 3)"),
        "{}",
        text(crashed)
    );
    assert_eq!(text(&last_results(&reqs[2].body)[0]), "back");
    let events = root.events();
    let exited = of_type(&events, "mcp_server_exited");
    assert_eq!(exited.len(), 1, "{exited:?}");
    assert_eq!(exited[0]["code"], 3);
    assert_eq!(of_type(&events, "mcp_server_started").len(), 2);
}

#[test]
fn a_call_past_its_timeout_is_cancelled_at_the_server() {
    let api = FakeApi::start(vec![
        Reply::tool("h", "mcp__hostile__hang", json!({})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({"timeout_secs": 1}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let out = run(&root, &state, &["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = &last_results(&api.requests()[1].body)[0];
    assert_eq!(r["is_error"], true);
    assert!(text(r).contains("no answer within 1 s"), "{}", text(r));
}

#[test]
fn a_server_gets_only_its_named_variables_its_read_set_and_no_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("env", "mcp__hostile__env", json!({})),
            (
                "out",
                "mcp__hostile__read_path",
                json!({"path": "/etc/passwd"}),
            ),
            // Its own code, in its `read` (relative to its working directory, the root).
            (
                "in",
                "mcp__hostile__read_path",
                json!({"path": "mcp-code/hostile.py"}),
            ),
            ("net", "mcp__hostile__connect", json!({"port": port})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let out = root
        .command(&["run", "x"])
        .env("HOSTILE_STATE_SRC", &state)
        .env("DAEMON_ONLY_SECRET", "do-not-pass")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = last_results(&api.requests()[1].body);
    let env: Value = serde_json::from_str(&text(&r[0])).unwrap();
    let names: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(env["HOSTILE_STATE"], state.display().to_string());
    for leaked in [
        "ANTHROPIC_API_KEY",
        "DAEMON_ONLY_SECRET",
        "HOSTILE_STATE_SRC",
    ] {
        assert!(
            !names.contains(&leaked),
            "{leaked} reached the server: {names:?}"
        );
    }
    assert!(!text(&r[0]).contains(crate::common::SECRET_KEY));
    // /etc/passwd is world-readable: only Landlock refuses it.
    assert!(
        text(&r[1]).starts_with("PermissionError"),
        "{}",
        text(&r[1])
    );
    assert!(text(&r[2]).contains("def send(m)"), "{}", text(&r[2]));
    assert_eq!(r[3]["is_error"], true, "{}", text(&r[3]));
    assert!(!text(&r[3]).contains("connected"), "{}", text(&r[3]));
    drop(listener);
}

#[test]
fn check_lists_each_server_with_its_sandbox_and_warns_about_what_opens_it() {
    let root = TestRoot::new("http://127.0.0.1:9");
    hostile(&root, json!({}));
    crate::common::mcp::add_server(
        &root,
        "fetcher",
        json!({"command": ["npx", "-y", "some-server"], "network": true}),
    );
    crate::common::mcp::add_server(&root, "nowhere", json!({"command": ["no-such-program-x"]}));
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = crate::common::stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("mcp        hostile: stdio `python3 "))
        .unwrap_or_else(|| panic!("no line for the server: {text}"));
    assert!(
        line.contains("/mcp-code") && line.contains("network false"),
        "{line}"
    );
    assert!(
        line.contains("write ") && line.contains("/mcp-state"),
        "{line}"
    );
    let warnings = stderr(&out);
    assert!(
        warnings.contains("mcp.servers.fetcher has network: true"),
        "{warnings}"
    );
    assert!(
        warnings.contains("mcp.servers.fetcher: npx fetches packages")
            || warnings.contains("\"npx\" is not found"),
        "{warnings}"
    );
    assert!(
        warnings.contains("mcp.servers.nowhere: \"no-such-program-x\" is not found"),
        "{warnings}"
    );
    let json: Value =
        serde_json::from_str(&crate::common::stdout(&root.run(&["check", "--json"]))).unwrap();
    let servers = json["mcp"].as_array().unwrap();
    assert_eq!(servers.len(), 3);
    assert_eq!(servers[1]["name"], "hostile");
    assert_eq!(servers[1]["env"], json!(["HOSTILE_STATE"]));
}

#[test]
fn a_pin_whose_record_fails_is_taken_back() {
    let api = FakeApi::start(vec![
        Reply::tool("p", "mcp__hostile__echo", json!({"text": "one"})),
        Reply::text("first"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile__echo"]));
    assert_eq!(run(&root, &state, &["run", "x"]).status.code(), Some(0));
    let lock = root.dir.join("policies/mcp.lock.json");
    let before = std::fs::read_to_string(&lock).unwrap();
    // The second start serves a changed description; accepting it cannot be recorded.
    let pin = root
        .command(&["mcp", "pin", "hostile"])
        .env("HOSTILE_STATE_SRC", &state)
        .env("HARNESSD_FAILPOINTS", "events.append=enospc")
        .output()
        .unwrap();
    assert_ne!(pin.status.code(), Some(0), "{}", stderr(&pin));
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        before,
        "an unrecorded pin stayed"
    );
    assert!(
        !root
            .events()
            .iter()
            .any(|e| e["type"] == "mcp_tools_pinned" && e["by"] == "cli")
    );
}

#[test]
fn a_server_flooding_the_client_with_requests_is_refused_without_flooding_the_log() {
    let api = FakeApi::start(vec![
        Reply::tool("f", "mcp__hostile__flood_client", json!({})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let out = run(&root, &state, &["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        text(&last_results(&api.requests()[1].body)[0]),
        "200 of 200 refused"
    );
    let recorded = root.events_of("mcp_request_refused").len();
    assert_eq!(
        recorded,
        harnessd::mcp::client::MAX_RECORDED_REFUSALS,
        "{recorded} recorded"
    );
}
