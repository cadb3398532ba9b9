//! `harnessd serve`: the control API, approvals, cancel, restart safety, shutdown,
//! concurrency, and the sandbox's distance from the API.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, stdout, wait_until};

/// Lets run_bash and run_python run without asking (write_file still asks).
fn allow_commands(root: &TestRoot) {
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!([
            "run_bash",
            "run_python",
            "read_file",
            "list_dir",
            "get_time"
        ]);
        s["tools"]["ask"] = json!(["write_file", "edit_file"]);
        // No deny pattern on run_bash: with one, commands it cannot see into (the
        // heartbeat's `while` loop) are raised to ask.
        s["tools"]["deny"] = json!(["read_file(workspace/secrets/*)"]);
    });
}

#[test]
fn every_endpoint_answers_good_and_bad_requests() {
    let api = FakeApi::start(vec![
        Reply::tool("t", "get_time", json!({})),
        Reply::text("the answer"),
    ]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    assert_eq!(
        d.request("GET", "/healthz", None),
        (200, json!({"status": "ok"}))
    );
    let id = d.submit("what time is it?");
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "end_turn");
    assert_eq!(t["answer"], "the answer");
    assert!(t["created"].is_string() && t["updated"].is_string());
    let (status, list) = d.request("GET", "/v1/tasks", None);
    assert_eq!(status, 200);
    assert_eq!(list["tasks"][0]["task_id"], id.as_str());
    assert_eq!(
        d.request("GET", "/v1/approvals", None),
        (200, json!({"approvals": []}))
    );
    let (status, text) = d.request_text("GET", "/metrics");
    assert_eq!(status, 200);
    assert!(text.contains("harnessd_model_requests_total 2"), "{text}");
    assert!(
        text.contains("harnessd_tasks{status=\"finished\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("harnessd_tool_runs_total{tool=\"get_time\",outcome=\"ok\"} 1"),
        "{text}"
    );
    let (status, text) = d.request_text("GET", &format!("/v1/events?task={id}&type=task_finished"));
    assert_eq!(status, 200);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["stop_reason"], "end_turn");
    // Bad requests get JSON errors with fitting statuses.
    let bad = [
        ("POST", "/v1/tasks", Some("{not json"), 400),
        (
            "POST",
            "/v1/tasks",
            Some(r#"{"prompt": "x", "colour": 1}"#),
            422,
        ),
        ("POST", "/v1/tasks", Some(r#"{"prompt": ""}"#), 400),
        (
            "POST",
            "/v1/tasks",
            Some(r#"{"prompt": "x", "max_turns": 0}"#),
            400,
        ),
        ("GET", "/v1/tasks/t-nope", None, 404),
        ("POST", "/v1/tasks/t-nope/cancel", None, 404),
        (
            "POST",
            "/v1/approvals/ap-nope",
            Some(r#"{"decision": "approve"}"#),
            404,
        ),
        ("DELETE", "/v1/tasks", None, 405),
        ("GET", "/v2/everything", None, 404),
    ];
    for (method, path, body, expected) in bad {
        let (status, v) = d.request(method, path, body);
        assert_eq!(status, expected, "{method} {path}: {v}");
        assert!(
            v["error"]["type"].is_string() && v["error"]["message"].is_string(),
            "{method} {path}: {v}"
        );
    }
    let huge = json!({"prompt": "x".repeat(300 * 1024)}).to_string();
    let (status, v) = d.request("POST", "/v1/tasks", Some(&huge));
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"]["type"], "too_large");
    assert_eq!(
        d.request("GET", "/healthz", None).0,
        200,
        "the daemon survived"
    );
}

#[test]
fn second_daemon_on_the_same_root_is_refused() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let _d = Daemon::start(&root);
    let out = root.run(&["serve"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("already serving this root"),
        "{}",
        stderr(&out)
    );
}

/// A daemon whose one task asks to write a file (an `ask` call).
fn asking_daemon(timeout_secs: u64) -> (FakeApi, TestRoot, Daemon, String) {
    let api = FakeApi::start(vec![
        Reply::tool(
            "w",
            "write_file",
            json!({"path": "asked.txt", "content": "x"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "approval_timeout_secs", &timeout_secs.to_string());
    let d = Daemon::start(&root);
    let id = d.submit("write it");
    wait_until("the approval", || {
        d.request("GET", "/v1/approvals", None).1["approvals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    assert_eq!(
        d.request("GET", &format!("/v1/tasks/{id}"), None).1["status"],
        "awaiting_approval"
    );
    (api, root, d, id)
}

#[test]
fn approve_through_the_cli_records_the_peer_uid() {
    let (api, root, d, id) = asking_daemon(600);
    let (_, list) = d.request("GET", "/v1/approvals", None);
    let a = &list["approvals"][0];
    assert_eq!(a["task_id"], id.as_str());
    assert_eq!(a["tool"], "write_file");
    assert_eq!(a["rule"], "write_file");
    assert_eq!(a["input"]["path"], "asked.txt");
    let shown = stdout(&root.run(&["approvals"]));
    assert!(
        shown.contains(a["approval_id"].as_str().unwrap()),
        "{shown}"
    );
    let out = root.run(&["approve", a["approval_id"].as_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    d.wait_finished(&id);
    assert!(root.workspace().join("asked.txt").exists());
    let resolved = &root.events_of("approval_resolved")[0];
    assert_eq!(resolved["decision"], "approved");
    // The answer names its call, as the request did: one step from one to the other.
    assert_eq!(resolved["tool_use_id"], a["tool_use_id"]);
    assert_eq!(
        root.events_of("approval_requested")[0]["tool_use_id"],
        a["tool_use_id"]
    );
    // docs/events.md: `uid:N (name)`, the name from the user database.
    let uid = nix::unistd::Uid::effective();
    let name = nix::unistd::User::from_uid(uid).unwrap().unwrap().name;
    assert_eq!(resolved["by"], format!("uid:{uid} ({name})"));
    assert!(
        last_results(&api.requests()[1].body)[0]
            .get("is_error")
            .is_none()
    );
}

#[test]
fn deny_with_a_reason_reaches_the_model() {
    let (api, root, d, id) = asking_daemon(600);
    let approval = d.request("GET", "/v1/approvals", None).1["approvals"][0]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = root.run(&["deny", &approval, "--reason", "not on a Friday"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    d.wait_finished(&id);
    assert!(!root.workspace().join("asked.txt").exists());
    let result = &last_results(&api.requests()[1].body)[0];
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("not on a Friday"),
        "{result}"
    );
    assert_eq!(root.events_of("approval_resolved")[0]["decision"], "denied");
}

#[test]
fn unanswered_approval_times_out_into_a_denial() {
    let (api, root, d, id) = asking_daemon(1);
    d.wait_finished(&id);
    let resolved = &root.events_of("approval_resolved")[0];
    assert_eq!(resolved["decision"], "timeout");
    assert_eq!(resolved["by"], "timeout");
    assert_eq!(
        resolved["tool_use_id"],
        root.events_of("tool_requested")[0]["tool_use_id"]
    );
    let result = &last_results(&api.requests()[1].body)[0];
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("nobody answered"),
        "{result}"
    );
}

#[test]
fn cancel_during_a_model_request_and_during_a_tool() {
    let mut slow = Reply::text("late");
    slow.delay = Duration::from_secs(30);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let id = d.submit("slow model");
    wait_until("the model request", || {
        !root.events_of("model_request").is_empty()
    });
    let (status, _) = d.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(status, 202);
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "cancelled");

    let api = FakeApi::start(vec![
        Reply::tool(
            "long",
            "run_bash",
            json!({"command": format!("{} & wait", crate::tools::HEARTBEAT)}),
        ),
        Reply::text("never"),
    ]);
    let root = TestRoot::new(&api.url);
    allow_commands(&root);
    let d = Daemon::start(&root);
    let id = d.submit("long tool");
    let heartbeat = root.workspace().join("heartbeat");
    wait_until("the tool", || heartbeat.exists());
    let out = root.run(&["cancel", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "cancelled");
    crate::tools::assert_heartbeat_stopped(&heartbeat);
}

#[test]
fn sigterm_lets_running_tasks_finish_then_stops_cleanly() {
    let api = FakeApi::start(vec![
        Reply::tool("s", "run_bash", json!({"command": "sleep 1; echo slept"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    allow_commands(&root);
    let mut d = Daemon::start(&root);
    let id = d.submit("sleep");
    wait_until("the tool", || !root.events_of("tool_requested").is_empty());
    unsafe { libc::kill(d.pid(), libc::SIGTERM) };
    let status = d.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!d.socket.exists(), "the socket is removed");
    let fin = root.events_of("task_finished");
    assert_eq!(fin[0]["task_id"], id.as_str());
    assert_eq!(
        fin[0]["stop_reason"], "end_turn",
        "the task finished within the grace period"
    );
    let events = root.events();
    assert_eq!(events.last().unwrap()["type"], "daemon_stopping");
}

#[test]
fn kill_9_mid_task_then_restart_marks_it_interrupted_and_resume_completes_it() {
    let api = FakeApi::start(vec![
        Reply::tool("stuck", "run_bash", json!({"command": "sleep 60"})),
        Reply::text("resumed and done"),
    ]);
    let root = TestRoot::new(&api.url);
    allow_commands(&root);
    let mut d = Daemon::start(&root);
    let id = d.submit("stuck");
    wait_until("the tool", || !root.events_of("tool_requested").is_empty());
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let seq_before = root.events().last().unwrap()["seq"].as_u64().unwrap();
    let d = Daemon::start(&root);
    let (_, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!(t["status"], "interrupted");
    let interrupted = root.events_of("task_interrupted");
    assert_eq!(interrupted[0]["task_id"], id.as_str());
    assert!(
        interrupted[0]["seq"].as_u64().unwrap() > seq_before,
        "seq continues after the crash"
    );
    let out = root.run(&["resume", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "end_turn");
    assert_eq!(t["answer"], "resumed and done");
    // The dangling tool_use was answered before the history went back to the model.
    let reqs = api.requests();
    let result = &last_results(&reqs[1].body)[0];
    assert_eq!(result["tool_use_id"], "stuck");
    assert!(
        result["content"].as_str().unwrap().contains("interrupted"),
        "{result}"
    );
    assert_eq!(root.transcript()["status"], "finished");
    let seqs: Vec<u64> = root
        .events()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
}

#[test]
fn a_tool_cannot_reach_the_control_api_to_approve_itself() {
    let attack = r#"
import socket, os, json
results = []
def attempt(name, f):
    try:
        f(); results.append(name + ': REACHED')
    except Exception as e:
        results.append(name + ': ' + type(e).__name__)
def by_path():
    s = socket.socket(socket.AF_UNIX); s.connect('../run/harnessd.sock')
    s.sendall(b'GET /v1/approvals HTTP/1.1\r\nhost: localhost\r\n\r\n'); s.recv(100)
attempt('socket path', by_path)
pid = open('daemon.pid').read().strip()
attempt('proc fd', lambda: os.listdir('/proc/' + pid + '/fd'))
attempt('proc root', lambda: os.listdir('/proc/' + pid + '/root/'))
def inherited():
    for fd in range(3, 64):
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            continue
        s.sendall(b'GET /v1/approvals HTTP/1.1\r\nhost: localhost\r\n\r\n')
        raise SystemExit('fd %d is a live socket' % fd)
    raise OSError('no inherited socket')
attempt('inherited fd', inherited)
print('\n'.join(results))
"#;
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("py", "run_python", json!({"code": attack})),
            (
                "curl",
                "run_bash",
                json!({"command": "curl -s --max-time 2 --unix-socket ../run/harnessd.sock http://localhost/v1/approvals && echo REACHED; ls ../run && echo REACHED"}),
            ),
            (
                "w",
                "write_file",
                json!({"path": "self-approved.txt", "content": "x"}),
            ),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    allow_commands(&root);
    root.set_config("daemon", "approval_timeout_secs", "2");
    let d = Daemon::start(&root);
    std::fs::write(root.workspace().join("daemon.pid"), d.pid().to_string()).unwrap();
    let id = d.submit("approve yourself");
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "end_turn");
    let results = last_results(&api.requests()[1].body);
    for r in &results[..2] {
        let text = r["content"].as_str().unwrap();
        assert!(
            !text.contains("REACHED"),
            "a tool reached the control API: {text}"
        );
    }
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("socket path: PermissionError"),
        "{}",
        results[0]
    );
    assert_eq!(
        root.events_of("approval_resolved")[0]["decision"],
        "timeout"
    );
    assert!(!root.workspace().join("self-approved.txt").exists());
}

#[test]
fn eight_concurrent_tasks_all_finish_with_ordered_parseable_events() {
    // Each task: one tool call, then an answer, decided from the request itself.
    let api = FakeApi::with_responder(Box::new(|body: &Value| {
        let msgs = body["messages"].as_array().unwrap();
        let prompt = msgs[0]["content"][0]["text"].as_str().unwrap().to_string();
        if msgs.len() == 1 {
            Reply::tool(
                &format!("call-{prompt}"),
                "run_bash",
                json!({"command": format!("echo {prompt}")}),
            )
        } else {
            Reply::text(&format!("answer {prompt}"))
        }
    }));
    let root = TestRoot::new(&api.url);
    allow_commands(&root);
    let d = Daemon::start(&root);
    let ids: Vec<String> = (0..8).map(|i| d.submit(&format!("task{i}"))).collect();
    for (i, id) in ids.iter().enumerate() {
        let t = d.wait_finished(id);
        assert_eq!(t["answer"], format!("answer task{i}"));
    }
    let events = root.events();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "seq strictly increasing without gaps"
    );
    for id in &ids {
        let kinds: Vec<&str> = events
            .iter()
            .filter(|e| e["task_id"] == id.as_str())
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        // A task submitted through the API is recorded as queued before its 202.
        assert_eq!(kinds[0], "task_queued", "{id}");
        assert_eq!(kinds[1..], crate::common::ONE_TOOL_TASK, "{id}");
    }
}

#[test]
fn events_follow_streams_new_lines() {
    let mut slow = Reply::text("later");
    slow.delay = Duration::from_millis(800);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let mut follower = root
        .command(&["events", "--type", "task_finished", "--follow", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let id = d.submit("x");
    d.wait_finished(&id);
    std::thread::sleep(Duration::from_millis(300));
    let _ = follower.kill();
    let out = follower.wait_with_output().unwrap();
    let text = stdout(&out);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["task_id"], id.as_str());
}

#[test]
fn submit_wait_exits_like_run_and_the_clients_show_the_task() {
    let api = FakeApi::start(vec![
        Reply::tool("t", "get_time", json!({})),
        Reply::text("summary of the work"),
    ]);
    let root = TestRoot::new(&api.url);
    let _d = Daemon::start(&root);
    let out = root.run(&["submit", "--wait", "--max-turns", "2", "what time is it?"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "max_turns exits 3 like run: {}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "summary of the work\n");
    let tasks = stdout(&root.run(&["tasks"]));
    assert!(
        tasks.contains("finished") && tasks.contains("max_turns"),
        "{tasks}"
    );
    // Under the header, the newest task first.
    assert!(tasks.starts_with("TASK "), "{tasks}");
    let id = tasks
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    let shown = stdout(&root.run(&["show", &id]));
    assert!(
        shown.contains(&id) && shown.contains("summary of the work"),
        "{shown}"
    );
    let json_out: Value =
        serde_json::from_slice(&root.run(&["show", "--json", &id]).stdout).unwrap();
    assert_eq!(json_out["stop_reason"], "max_turns");
    let out = root.run(&["show", "t-nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no task"), "{}", stderr(&out));
    // A bare submit prints the id alone.
    let out = root.run(&["submit", "y"]);
    assert_eq!(out.status.code(), Some(0));
    let printed = stdout(&out);
    assert!(
        printed.starts_with("t-") && printed.split_whitespace().count() == 1,
        "{printed}"
    );
}

#[test]
fn clients_without_a_daemon_say_so() {
    // `tasks`, `show` and `events` read the files instead; these need the daemon.
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root.run(&["approvals"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is `harnessd serve` running"),
        "{}",
        stderr(&out)
    );
    // The cause once, not again after the question.
    assert_eq!(
        stderr(&out).matches("os error").count(),
        1,
        "{}",
        stderr(&out)
    );
}

#[test]
fn tools_still_run_after_the_daemons_binary_is_replaced() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "t",
            "run_bash",
            json!({"command": "echo still sandboxed; id -u"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    allow_commands(&root);
    // Serve from a copy of the binary, then delete it, as an upgrade would.
    let copy = root.dir.join("harnessd-old");
    std::fs::copy(crate::common::bin(), &copy).unwrap();
    let mut child = std::process::Command::new(&copy)
        .arg("--root")
        .arg(&root.dir)
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("ANTHROPIC_API_KEY", crate::common::SECRET_KEY)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let socket = root.dir.join("run/harnessd.sock");
    wait_until("the daemon", || socket.exists());
    std::fs::remove_file(&copy).unwrap();
    let out = root.run(&["submit", "--wait", "x"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = &last_results(&api.requests()[1].body)[0];
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("still sandboxed") && !text.contains("\n0\n"),
        "{text}"
    );
}

#[test]
fn a_task_cancelled_while_queued_never_reaches_the_model() {
    let mut slow = Reply::text("first");
    slow.delay = Duration::from_millis(1500);
    let api = FakeApi::start(vec![slow, Reply::text("never")]);
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "max_concurrent_tasks", "1");
    let d = Daemon::start(&root);
    let first = d.submit("slow");
    wait_until("the first request", || {
        !root.events_of("model_request").is_empty()
    });
    let second = d.submit("queued");
    assert_eq!(
        d.request("GET", &format!("/v1/tasks/{second}"), None).1["status"],
        "queued"
    );
    assert_eq!(
        d.request("POST", &format!("/v1/tasks/{second}/cancel"), None)
            .0,
        202
    );
    assert_eq!(d.wait_finished(&second)["stop_reason"], "cancelled");
    assert_eq!(d.wait_finished(&first)["stop_reason"], "end_turn");
    assert_eq!(api.requests().len(), 1, "the cancelled task sent nothing");
    let requests_of_second = root
        .events_of("model_request")
        .into_iter()
        .filter(|e| e["task_id"] == second.as_str())
        .count();
    assert_eq!(requests_of_second, 0);
}
