//! MCP under `harnessd serve`: a task's servers die with it (cancelled too), a
//! server added to settings.json serves the next task without a restart, and
//! `mcp list` / `mcp pin` go through the daemon, which writes the record.

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::mcp::{hostile, text};
use crate::common::{FakeApi, Reply, TestRoot, last_results, stdout, wait_until};

fn alive(pid: i64) -> bool {
    // A zombie is gone for our purposes only once reaped; /proc/<pid> stays until then.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn started_pids(root: &TestRoot) -> Vec<i64> {
    root.events_of("mcp_server_started")
        .iter()
        .map(|e| e["pid"].as_i64().unwrap())
        .collect()
}

#[test]
fn cancelling_a_task_kills_its_server_and_the_call_is_recorded() {
    let api = FakeApi::start(vec![
        Reply::tool("h", "mcp__hostile__hang", json!({})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let state = hostile(&root, json!({}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let d = Daemon::start_with_env(&root, &[("HOSTILE_STATE_SRC", state.to_str().unwrap())]);
    let id = d.submit("hang");
    wait_until("the hanging call", || {
        !root.events_of("mcp_server_started").is_empty()
            && root.events_of("tool_requested").len() == 1
            && root.events_of("policy_decision").len() == 1
    });
    let pids = started_pids(&root);
    assert_eq!(pids.len(), 1);
    assert!(alive(pids[0]), "the server runs while its call hangs");
    let (status, _) = d.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(status, 202);
    let task = d.wait_finished(&id);
    assert_eq!(task["stop_reason"], "cancelled");
    wait_until("the server's end", || !alive(pids[0]));
    let finished = root.events_of("tool_finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["is_error"], true);
    assert_eq!(finished[0]["server"], "hostile");
    // A stop the task asked for is not a death.
    assert!(root.events_of("mcp_server_exited").is_empty());
}

#[test]
fn a_server_added_while_serving_is_used_by_the_next_task_and_pinned_through_the_daemon() {
    let api = FakeApi::start(vec![
        Reply::text("no servers yet"),
        Reply::tool("e", "mcp__hostile__echo", json!({"text": "new server"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let first = d.submit("one");
    d.wait_finished(&first);
    // No run counter: the server serves its first description every time.
    hostile(&root, json!({"env": {}}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile__echo"]));
    wait_until("the reload", || {
        root.events_of("config_loaded")
            .iter()
            .any(|e| e["file"] == "policies/settings.json" && e["trigger"] != "start")
    });
    let second = d.submit("two");
    assert_eq!(d.wait_finished(&second)["stop_reason"], "end_turn");
    let reqs = api.requests();
    assert_eq!(text(&last_results(&reqs[2].body)[0]), "new server");
    // `mcp list` and `mcp pin` through the daemon's API.
    let list = root.run(&["mcp", "list", "--json"]);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let list: Value = serde_json::from_str(&stdout(&list)).unwrap();
    let server = &list["servers"][0];
    assert_eq!(server["name"], "hostile");
    assert_eq!(server["drift"]["changed"], json!([]));
    assert!(
        server["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["state"] == "pinned"),
        "{server}"
    );
    let pin = root.run(&["mcp", "pin", "hostile", "--json"]);
    assert!(
        pin.status.success(),
        "{}",
        String::from_utf8_lossy(&pin.stderr)
    );
    let pinned = root.events_of("mcp_tools_pinned");
    assert_eq!(pinned.len(), 2, "first use, then the operator");
    assert!(
        pinned[1]["by"].as_str().unwrap().starts_with("uid:"),
        "{:?}",
        pinned[1]
    );
}

#[test]
fn a_server_killed_mid_call_is_an_error_result_and_is_started_again() {
    let api = FakeApi::start(vec![
        Reply::tool("h", "mcp__hostile__hang", json!({})),
        Reply::tool("e", "mcp__hostile__echo", json!({"text": "again"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    // No run counter: the second start lists what the first pinned.
    hostile(&root, json!({"env": {}}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let d = Daemon::start(&root);
    let id = d.submit("hang, then echo");
    wait_until("the hanging call", || {
        root.events_of("policy_decision").len() == 1
    });
    let pid = started_pids(&root)[0];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    assert_eq!(d.wait_finished(&id)["stop_reason"], "end_turn");
    let reqs = api.requests();
    let killed = &last_results(&reqs[1].body)[0];
    assert_eq!(killed["is_error"], true);
    assert!(
        text(killed).contains("killed by signal 9"),
        "{}",
        text(killed)
    );
    assert_eq!(text(&last_results(&reqs[2].body)[0]), "again");
    let exited = root.events_of("mcp_server_exited");
    assert_eq!(exited.len(), 1, "{exited:?}");
    assert_eq!(exited[0]["signal"], 9);
    assert_eq!(started_pids(&root).len(), 2);
}

#[test]
fn a_shared_server_serves_every_task_from_one_process() {
    let api = FakeApi::start(vec![
        Reply::tool("a", "mcp__hostile__echo", json!({"text": "first"})),
        Reply::text("one"),
        Reply::tool("b", "mcp__hostile__echo", json!({"text": "second"})),
        Reply::text("two"),
    ]);
    let root = TestRoot::new(&api.url);
    hostile(&root, json!({"env": {}, "shared": true}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let d = Daemon::start(&root);
    for prompt in ["one", "two"] {
        let id = d.submit(prompt);
        assert_eq!(d.wait_finished(&id)["stop_reason"], "end_turn");
    }
    let reqs = api.requests();
    assert_eq!(text(&last_results(&reqs[1].body)[0]), "first");
    assert_eq!(text(&last_results(&reqs[3].body)[0]), "second");
    let started = root.events_of("mcp_server_started");
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(
        started[0].get("task_id").is_none(),
        "a shared server belongs to no task"
    );
    let pid = started[0]["pid"].as_i64().unwrap();
    assert!(alive(pid), "it outlives the tasks");
    let (status, metrics) = d.request_text("GET", "/metrics");
    assert_eq!(status, 200);
    let line = metrics
        .lines()
        .find(|l| l.starts_with("harnessd_mcp_events_total{") && l.contains("kind=\"started\""))
        .unwrap_or_else(|| panic!("no MCP start counted: {metrics}"));
    assert!(
        line.contains("server=\"hostile\"") && line.ends_with(" 1"),
        "{line}"
    );
    drop(d);
    wait_until("the shared server's end with the daemon", || !alive(pid));
}

#[test]
fn approve_remember_of_an_mcp_call_writes_its_narrowest_key_rule() {
    let api = FakeApi::start(vec![
        Reply::tool("a", "mcp__hostile__echo", json!({"text": "a*b, (c)=d"})),
        Reply::text("one"),
        Reply::tool("b", "mcp__hostile__echo", json!({"text": "a*b, (c)=d"})),
        Reply::text("two"),
    ]);
    let root = TestRoot::new(&api.url);
    hostile(&root, json!({"env": {}}));
    let d = Daemon::start(&root);
    let first = d.submit("one");
    wait_until("the approval", || {
        !root.events_of("approval_requested").is_empty()
    });
    let approval = root.events_of("approval_requested")[0]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = root.run(&["approve", &approval, "--remember"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(d.wait_finished(&first)["stop_reason"], "end_turn");
    let resolved = root.events_of("approval_resolved");
    let rule = resolved[0]["remembered"][0].as_str().unwrap().to_string();
    assert_eq!(rule, r"mcp__hostile__echo(text=a\*b\, \(c\)\=d, !)");
    // The same call in the next task is allowed by that rule, with no approval.
    let second = d.submit("two");
    assert_eq!(d.wait_finished(&second)["stop_reason"], "end_turn");
    assert_eq!(
        text(&last_results(&api.requests()[3].body)[0]),
        "a*b, (c)=d"
    );
    assert_eq!(root.events_of("approval_requested").len(), 1);
    let decisions = root.events_of("policy_decision");
    assert_eq!(decisions.last().unwrap()["rule"], json!(rule));
    // One more key, or another value, is not covered.
    for input in [
        r#"{"text": "a*b, (c)=d", "n": 1}"#,
        r#"{"text": "a*b, (c)=e"}"#,
    ] {
        let out = root.run(&["policy", "test", "mcp__hostile__echo", input]);
        assert_eq!(out.status.code(), Some(3), "{input}: {}", stdout(&out));
    }
}

#[test]
fn a_shared_server_removed_from_the_settings_is_stopped_at_the_reload() {
    let api = FakeApi::start(vec![
        Reply::tool("a", "mcp__hostile__echo", json!({"text": "first"})),
        Reply::text("one"),
    ]);
    let root = TestRoot::new(&api.url);
    hostile(&root, json!({"env": {}, "shared": true}));
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__hostile"]));
    let d = Daemon::start(&root);
    let id = d.submit("one");
    assert_eq!(d.wait_finished(&id)["stop_reason"], "end_turn");
    let pid = started_pids(&root)[0];
    assert!(alive(pid), "a shared server outlives its task");
    let loaded = root.events_of("config_loaded").len();
    root.edit_settings(|s| {
        s["mcp"]["servers"]
            .as_object_mut()
            .unwrap()
            .remove("hostile");
        s["tools"]["allow"] = json!([]);
    });
    wait_until("the reload", || {
        root.events_of("config_loaded").len() > loaded
    });
    // No task will ever use it again: it must not keep running (with its write
    // set and network) until the daemon stops.
    wait_until("the removed server's end", || !alive(pid));
    drop(d);
}

/// The pids of the processes whose command line is `sleep <arg>`.
fn sleeping(arg: &str) -> Vec<i64> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if cmdline == format!("sleep\0{arg}\0").as_bytes() && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn a_task_cancelled_while_its_server_never_answers_the_handshake_ends_at_once() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    // A program that never speaks: the task's first turn waits for its handshake
    // to pin its tools.
    let arg = format!("{}", 7000 + std::process::id() % 1000);
    crate::common::mcp::add_server(&root, "mute", json!({"command": ["sleep", arg]}));
    let d = Daemon::start(&root);
    let id = d.submit("hello");
    wait_until("the mute server's start", || !sleeping(&arg).is_empty());
    let started = std::time::Instant::now();
    let (status, _) = d.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(status, 202);
    let task = d.wait_finished(&id);
    assert_eq!(task["stop_reason"], "cancelled", "{task}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the cancel waited {:?} for the handshake's timeout",
        started.elapsed()
    );
    wait_until("the mute server's end", || sleeping(&arg).is_empty());
    // A stop the cancel asked for is not a death.
    assert!(root.events_of("mcp_server_exited").is_empty());
}
