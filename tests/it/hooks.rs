//! Hooks through the real binary: pre_tool decisions (and failing closed),
//! `may_allow`'s limits, the hook's own sandbox against the real kernel, a hook's
//! ask as an approval under `serve`, post_tool's replacement of the model's text,
//! task_finished's input, bad settings and `policy test --hooks`.

use std::io::ErrorKind;
use std::net::TcpListener;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, stdout, wait_until};

const FIXTURE: &str = include_str!("../fixtures/hooks/hook.py");

/// A hook `name` running the fixture in `args` (installed under the root's
/// `hooks/`, which is its `read`).
fn hook(root: &TestRoot, name: &str, args: &[&str]) -> Value {
    let dir = root.dir.join("hooks");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hook.py"), FIXTURE).unwrap();
    let mut command = vec![
        "python3".to_string(),
        dir.join("hook.py").display().to_string(),
    ];
    command.extend(args.iter().map(|a| a.to_string()));
    json!({"name": name, "command": command, "read": ["hooks"]})
}

/// A hook answering `answer`.
fn answering(root: &TestRoot, name: &str, answer: &str) -> Value {
    hook(root, name, &["answer", answer])
}

fn set_hooks(root: &TestRoot, point: &str, hooks: Vec<Value>) {
    root.edit_settings(|s| s["hooks"][point] = Value::Array(hooks));
}

/// The position of the first event of `kind` for the call `id`.
fn position(events: &[Value], kind: &str, id: &str) -> usize {
    events
        .iter()
        .position(|e| e["type"] == kind && e["tool_use_id"] == id)
        .unwrap_or_else(|| panic!("no {kind} for {id}"))
}

fn read_scores() -> Vec<Reply> {
    vec![
        Reply::tool("r", "read_file", json!({"path": "scores.csv"})),
        Reply::text("done"),
    ]
}

#[test]
fn a_deny_hook_stops_a_call_the_policy_allows_and_later_hooks_do_not_run() {
    let api = FakeApi::start(read_scores());
    let root = TestRoot::new(&api.url);
    let hooks = vec![
        hook(&root, "echo", &["echo"]),
        answering(
            &root,
            "guard",
            r#"{"decision": "deny", "reason": "not today"}"#,
        ),
        answering(&root, "after", r#"{"decision": "continue"}"#),
    ];
    set_hooks(&root, "pre_tool", hooks);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = &last_results(&api.requests()[1].body)[0];
    assert_eq!(result["is_error"], true);
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("hook:guard") && text.contains("not today"),
        "{text}"
    );
    assert!(!text.contains("alice"), "the file was read: {text}");
    let decided = root.events_of("policy_decision");
    assert_eq!(
        (&decided[0]["tier"], &decided[0]["rule"]),
        (&json!("deny"), &json!("hook:guard"))
    );
    let runs = root.events_of("hook_decision");
    assert_eq!(runs.len(), 2, "the first deny wins: {runs:?}");
    assert_eq!(
        (&runs[0]["hook"], &runs[0]["decision"]),
        (&json!("echo"), &json!("continue"))
    );
    let seen: Value = serde_json::from_str(runs[0]["reason"].as_str().unwrap()).unwrap();
    assert_eq!(seen["point"], "pre_tool");
    assert_eq!(seen["tool"], "read_file");
    assert_eq!(seen["tool_use_id"], "r");
    assert_eq!(seen["input"], json!({"path": "scores.csv"}));
    assert_eq!(
        seen["decision"],
        json!({"tier": "allow", "rule": "read_file"})
    );
    assert_eq!(
        (&runs[1]["decision"], &runs[1]["point"]),
        (&json!("deny"), &json!("pre_tool"))
    );
    assert_eq!(runs[1]["reason"], "not today");
    let events = root.events();
    assert!(position(&events, "hook_decision", "r") < position(&events, "policy_decision", "r"));
    let finished = &root.events_of("tool_finished")[0];
    assert!(finished["output_file"].is_null() && finished["exit_code"].is_null());
}

#[test]
fn a_hook_that_times_out_fails_or_answers_garbage_denies() {
    let cases: [(&[&str], &str); 4] = [
        (&["sleep", "30"], "timed out after 1 s"),
        (&["exit", "3"], "exited with code 3"),
        (&["answer", "yes, fine"], "answered nonsense"),
        // Parsers disagree on which of two values wins; model text spliced into a
        // hook's answer after its `deny` would otherwise have the last word.
        (
            &["answer", r#"{"decision": "deny", "decision": "continue"}"#],
            "named `decision` twice",
        ),
    ];
    for (args, why) in cases {
        let api = FakeApi::start(read_scores());
        let root = TestRoot::new(&api.url);
        let mut h = hook(&root, "flaky", args);
        h["timeout_secs"] = json!(1);
        set_hooks(&root, "pre_tool", vec![h]);
        let out = root.run(&["run", "x"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let result = &last_results(&api.requests()[1].body)[0];
        assert_eq!(result["is_error"], true, "{args:?}");
        let decided = &root.events_of("policy_decision")[0];
        assert_eq!(decided["rule"], "hook:flaky", "{args:?}");
        let run = &root.events_of("hook_decision")[0];
        assert_eq!(run["decision"], "deny", "{args:?}");
        let reason = run["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{args:?}: {reason}");
    }
}

/// The deadline of the largest timeout settings take is past what an `Instant`
/// holds: the wait panicked before the tree was killed, so the hook was denied as
/// failed and left running.
#[test]
fn a_hook_with_the_largest_timeout_is_waited_for_and_answers() {
    let api = FakeApi::start(read_scores());
    let root = TestRoot::new(&api.url);
    let mut h = answering(&root, "patient", r#"{"decision": "continue"}"#);
    h["timeout_secs"] = json!(u64::MAX);
    set_hooks(&root, "pre_tool", vec![h]);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = &root.events_of("hook_decision")[0];
    assert_eq!(run["decision"], "continue", "{run}");
    let result = &last_results(&api.requests()[1].body)[0];
    assert!(
        result["content"].as_str().unwrap().contains("alice"),
        "{result}"
    );
}

#[test]
fn may_allow_lifts_a_rules_ask_but_never_a_deny_rule_nor_a_raise() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("secret", "read_file", json!({"path": "secrets/key"})),
            ("raised", "run_bash", json!({"command": "ls | bash"})),
            (
                "lifted",
                "write_file",
                json!({"path": "lifted.txt", "content": "x"}),
            ),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    std::fs::create_dir_all(root.workspace().join("secrets")).unwrap();
    std::fs::write(root.workspace().join("secrets/key"), "hunter2").unwrap();
    // run_bash allowed whole: a command a deny pattern cannot see is raised to ask.
    root.edit_settings(|s| {
        s["tools"]["ask"] = json!(["write_file", "edit_file", "run_python"]);
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("run_bash"));
    });
    let mut lift = answering(&root, "lift", r#"{"decision": "allow"}"#);
    lift["may_allow"] = json!(true);
    set_hooks(&root, "pre_tool", vec![lift]);
    // No TTY and no --yes: an ask is denied.
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decided = root.events_of("policy_decision");
    let by_id = |id: &str| {
        decided
            .iter()
            .find(|d| d["tool_use_id"] == id)
            .unwrap()
            .clone()
    };
    let secret = by_id("secret");
    assert_eq!(
        (&secret["tier"], &secret["rule"]),
        (&json!("deny"), &json!("read_file(workspace/secrets/*)"))
    );
    let raised = by_id("raised");
    assert_eq!(
        (&raised["tier"], &raised["rule"]),
        (&json!("ask"), &json!("run_bash"))
    );
    assert!(raised["raised"].is_string(), "{raised}");
    let lifted = by_id("lifted");
    assert_eq!(
        (&lifted["tier"], &lifted["rule"]),
        (&json!("allow"), &json!("hook:lift"))
    );
    assert!(root.workspace().join("lifted.txt").exists());
    let runs = root.events_of("hook_decision");
    // A call the policy denies runs no hook: a hook could only tighten it.
    assert!(
        runs.iter().all(|r| r["tool_use_id"] != "secret"),
        "{runs:?}"
    );
    let on_raise = runs.iter().find(|r| r["tool_use_id"] == "raised").unwrap();
    assert!(
        on_raise["reason"].as_str().unwrap().contains("not counted"),
        "{on_raise}"
    );
    let results = last_results(&api.requests()[1].body);
    assert_eq!(results[0]["is_error"], true);
    assert!(!results[0]["content"].as_str().unwrap().contains("hunter2"));
    assert_eq!(
        results[1]["is_error"], true,
        "the raised call was not approved"
    );
}

/// A hook `name` with `may_allow` answering `allow`.
fn lifting(root: &TestRoot, name: &str) -> Value {
    let mut h = answering(root, name, r#"{"decision": "allow"}"#);
    h["may_allow"] = json!(true);
    h
}

#[test]
fn may_allow_does_not_lift_a_rules_ask_of_text_a_deny_rule_cannot_see() {
    // The shipped settings: run_bash asked whole, `run_bash(rm -rf *)` denied. An
    // allow rule for this command would be raised to ask; a hook's allow is no more.
    let api = FakeApi::start(vec![
        Reply::tool(
            "hidden",
            "run_bash",
            json!({"command": "$(echo rm) -rf victim"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    std::fs::create_dir_all(root.workspace().join("victim")).unwrap();
    set_hooks(&root, "pre_tool", vec![lifting(&root, "lift")]);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decided = &root.events_of("policy_decision")[0];
    assert_eq!(
        (&decided["tier"], &decided["rule"]),
        (&json!("ask"), &json!("run_bash")),
        "{decided}"
    );
    assert!(root.workspace().join("victim").exists(), "the rm ran");
    let run = &root.events_of("hook_decision")[0];
    let reason = run["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not counted"), "{run}");
}

#[test]
fn may_allow_does_not_lift_an_ask_an_earlier_hook_answered() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "w",
            "write_file",
            json!({"path": "lifted.txt", "content": "x"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    // write_file is asked by a rule; the first hook asks too, the second allows.
    let asker = answering(&root, "asker", r#"{"decision": "ask"}"#);
    set_hooks(&root, "pre_tool", vec![asker, lifting(&root, "lift")]);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decided = &root.events_of("policy_decision")[0];
    assert_eq!(decided["tier"], "ask", "{decided}");
    assert!(!root.workspace().join("lifted.txt").exists());
    let runs = root.events_of("hook_decision");
    let lift = runs.iter().find(|r| r["hook"] == "lift").unwrap();
    let reason = lift["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("another hook asked"), "{lift}");
}

/// A hook installed to try `paths` for writing and 127.0.0.1 at `ports`, with
/// `network`; returns what it saw.
fn escape_attempts(network: Value, paths: &[String], ports: &[u16]) -> (TestRoot, String) {
    let api = FakeApi::start(read_scores());
    let root = TestRoot::new(&api.url);
    let mut args: Vec<String> = vec!["escape".into()];
    args.extend(
        paths
            .iter()
            .map(|p| p.replace("{root}", &root.dir.display().to_string())),
    );
    args.push("--".into());
    args.extend(ports.iter().map(u16::to_string));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut h = hook(&root, "probe", &args);
    h["network"] = network;
    set_hooks(&root, "pre_tool", vec![h]);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = root.events_of("hook_decision")[0].clone();
    assert_eq!(run["decision"], "continue", "{run}");
    (root, run["reason"].as_str().unwrap().to_string())
}

fn no_connection(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    matches!(listener.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

#[test]
fn the_kernel_refuses_a_hook_writing_outside_or_using_the_network_when_it_has_none() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let paths = [
        "{root}/workspace/hooked.txt".to_string(),
        "{root}/hooks/hooked.txt".to_string(),
        "/root/hooked.txt".to_string(),
    ];
    let (root, seen) = escape_attempts(json!(false), &paths, &[port]);
    for p in ["workspace/hooked.txt", "hooks/hooked.txt"] {
        let at = root.dir.join(p);
        let refused = format!("write {}: Permission denied", at.display());
        assert!(seen.contains(&refused), "{seen}");
        assert!(!at.exists(), "{p} was written: {seen}");
    }
    assert!(!std::path::Path::new("/root/hooked.txt").exists());
    // No TCP socket at all without the network: seccomp refuses it, as a tool's.
    let refused = format!("connect {port}: Operation not permitted");
    assert!(seen.contains(&refused), "{seen}");
    assert!(seen.contains("udp: Operation not permitted"), "{seen}");
    assert!(no_connection(&listener), "the listener was reached");
}

#[test]
fn a_port_list_hook_reaches_its_port_and_no_other() {
    let listed = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let (a, b) = (
        listed.local_addr().unwrap().port(),
        other.local_addr().unwrap().port(),
    );
    let (_root, seen) = escape_attempts(json!([a]), &[], &[a, b]);
    assert!(seen.contains(&format!("connect {a}: ok")), "{seen}");
    assert!(
        seen.contains(&format!("connect {b}: Permission denied")),
        "{seen}"
    );
    assert!(seen.contains("udp: Operation not permitted"), "{seen}");
    listed.set_nonblocking(true).unwrap();
    assert!(listed.accept().is_ok(), "the listed port was not reached");
    assert!(no_connection(&other), "the other port was reached");
}

/// Landlock governs connect(2) and bind(2) only: sendto(2) with MSG_FASTOPEN
/// connects without the one, listen(2) on an unbound socket binds without the
/// other.
#[test]
fn a_port_list_hook_reaches_no_other_port_by_tcp_fast_open_and_cannot_listen() {
    let listed = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let (a, b) = (
        listed.local_addr().unwrap().port(),
        other.local_addr().unwrap().port(),
    );
    let (_root, seen) = escape_attempts(json!([a]), &[], &[b]);
    assert!(
        seen.contains(&format!("fastopen {b}: Operation not permitted")),
        "{seen}"
    );
    assert!(seen.contains("listen: Operation not permitted"), "{seen}");
    assert!(no_connection(&other), "the other port was reached: {seen}");
}

#[test]
fn a_hooks_ask_under_serve_is_an_approval_that_can_be_approved() {
    let api = FakeApi::start(read_scores());
    let root = TestRoot::new(&api.url);
    let asker = answering(
        &root,
        "asker",
        r#"{"decision": "ask", "reason": "a human should see"}"#,
    );
    set_hooks(&root, "pre_tool", vec![asker]);
    let d = Daemon::start(&root);
    let id = d.submit("read it");
    wait_until("the approval", || {
        d.request("GET", "/v1/approvals", None).1["approvals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let (_, list) = d.request("GET", "/v1/approvals", None);
    let a = &list["approvals"][0];
    assert_eq!(
        (&a["tool"], &a["rule"]),
        (&json!("read_file"), &json!("hook:asker"))
    );
    let approval = a["approval_id"].as_str().unwrap();
    assert!(stdout(&root.run(&["approvals"])).contains(approval));
    let out = root.run(&["approve", approval]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    d.wait_finished(&id);
    let result = &last_results(&api.requests()[1].body)[0];
    assert!(result.get("is_error").is_none(), "{result}");
    assert!(
        result["content"].as_str().unwrap().contains("alice"),
        "{result}"
    );
    let requested = &root.events_of("approval_requested")[0];
    assert_eq!(requested["rule"], "hook:asker");
}

#[test]
fn post_tool_replaces_the_models_text_but_not_the_kept_output_and_task_finished_sees_the_end() {
    let api = FakeApi::start(vec![
        Reply::tool("b", "run_bash", json!({"command": "echo real-output"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let scrub = answering(&root, "scrub", r#"{"result": "REDACTED"}"#);
    set_hooks(&root, "post_tool", vec![scrub]);
    set_hooks(
        &root,
        "task_finished",
        vec![hook(&root, "ticket", &["echo"])],
    );
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = &last_results(&api.requests()[1].body)[0];
    assert_eq!(result["content"], "REDACTED");
    let finished = &root.events_of("tool_finished")[0];
    let file = finished["output_file"].as_str().expect("an .out file");
    let kept = std::fs::read_to_string(root.dir.join(file)).unwrap();
    assert!(kept.contains("real-output"), "{kept}");
    let runs = root.events_of("hook_decision");
    let post = runs.iter().find(|r| r["point"] == "post_tool").unwrap();
    assert_eq!(
        (&post["hook"], &post["decision"]),
        (&json!("scrub"), &json!("replace"))
    );
    let events = root.events();
    assert!(position(&events, "hook_decision", "b") < position(&events, "tool_finished", "b"));
    let end = runs.iter().find(|r| r["point"] == "task_finished").unwrap();
    let seen: Value = serde_json::from_str(end["reason"].as_str().unwrap()).unwrap();
    assert_eq!(seen["stop_reason"], "end_turn");
    assert_eq!(seen["turns"], 2);
    assert_eq!(seen["answer"], "done");
    let task_end = events
        .iter()
        .position(|e| e["type"] == "task_finished")
        .unwrap();
    let hook_end = events
        .iter()
        .position(|e| e["point"] == "task_finished")
        .unwrap();
    assert!(
        task_end < hook_end,
        "task_finished hooks run after the task's end is recorded"
    );
}

#[test]
fn bad_hooks_settings_are_refused_naming_file_line_and_key() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let mut h = hook(&root, "net", &["echo"]);
    h["network"] = json!("sometimes");
    set_hooks(&root, "pre_tool", vec![h]);
    let out = root.run(&["policy", "test", "read_file", "scores.csv"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("policies/settings.json:"), "{err}");
    assert!(err.contains("hooks.pre_tool[0].network"), "{err}");
}

#[test]
fn policy_test_hooks_runs_them_and_exits_with_the_final_decision() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let cases = [
        (r#"{"decision": "continue"}"#, 0, "allow  (rule: read_file)"),
        (r#"{"decision": "ask"}"#, 3, "ask  (rule: hook:judge)"),
        (
            r#"{"decision": "deny", "reason": "no"}"#,
            4,
            "deny  (rule: hook:judge)",
        ),
    ];
    for (answer, code, first) in cases {
        set_hooks(&root, "pre_tool", vec![answering(&root, "judge", answer)]);
        let plain = root.run(&["policy", "test", "read_file", "scores.csv"]);
        assert_eq!(
            plain.status.code(),
            Some(0),
            "without --hooks, no hook runs"
        );
        let out = root.run(&["policy", "test", "--hooks", "read_file", "scores.csv"]);
        assert_eq!(out.status.code(), Some(code), "{answer}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(text.starts_with(first), "{text}");
        assert!(text.contains("hook judge: "), "{text}");
    }
}

/// The pid of a running process whose command line holds `marker`.
fn pid_running(marker: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        cmdline.contains(marker).then_some(pid)
    })
}

#[test]
fn a_tool_cannot_read_a_running_hooks_environment_nor_its_read_paths() {
    let api = FakeApi::start(read_scores());
    let root = TestRoot::new(&api.url);
    std::fs::create_dir_all(root.dir.join("hook-data")).unwrap();
    std::fs::write(root.dir.join("hook-data/token"), "hook-only-token").unwrap();
    // Tools may read /proc here, so only the kernel's cross-domain check stands
    // between a tool and the hook's /proc/PID/environ.
    root.edit_settings(|s| {
        s["allowed_paths"]["read"]
            .as_array_mut()
            .unwrap()
            .push(json!("/proc"));
    });
    let marker = format!("hold-{}", std::process::id());
    let mut h = hook(&root, "holder", &["sleep", "60", &marker]);
    h["timeout_secs"] = json!(120);
    h["read"] = json!(["hooks", "hook-data"]);
    h["env"] = json!({"HOOK_TOKEN": "DAEMON_HOOK_TOKEN"});
    set_hooks(&root, "pre_tool", vec![h]);
    let mut run = root
        .command(&["run", "x"])
        .env("DAEMON_HOOK_TOKEN", "the-hooks-secret")
        .spawn()
        .unwrap();
    let mut pid = None;
    wait_until("the hook running", || {
        pid = pid_running(&marker).filter(|p| {
            // The program, not the helper that became it a moment later.
            std::fs::read(format!("/proc/{p}/environ"))
                .is_ok_and(|e| String::from_utf8_lossy(&e).contains("the-hooks-secret"))
        });
        pid.is_some()
    });
    let pid = pid.unwrap();
    let environ = format!("/proc/{pid}/environ");
    let token = root.dir.join("hook-data/token").display().to_string();
    let out = crate::common::sandbox::run(&root, false, None, &["cat", &environ, &token]);
    let (said, err) = (stdout(&out), stderr(&out));
    let _ = run.kill();
    let _ = run.wait();
    assert!(!out.status.success(), "{said} {err}");
    assert!(
        !said.contains("the-hooks-secret") && !said.contains("hook-only-token"),
        "{said}"
    );
    assert!(
        err.contains(&format!("{environ}: Permission denied")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{token}: Permission denied")),
        "{err}"
    );
    // The tool does see /proc: its own environment is readable.
    let own = crate::common::sandbox::run(&root, false, None, &["cat", "/proc/self/environ"]);
    assert!(own.status.success(), "{}", stderr(&own));
}

#[test]
fn mcp_calls_go_through_pre_tool_and_post_tool_hooks_by_tool_glob() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            (
                "now",
                "mcp__time__get_current_time",
                json!({"timezone": "UTC"}),
            ),
            (
                "conv",
                "mcp__time__convert_time",
                json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "UTC"}),
            ),
            ("r", "read_file", json!({"path": "scores.csv"})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    crate::common::mcp::python_servers(&root);
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__time", "read_file"]));
    let mut guard = answering(
        &root,
        "guard",
        r#"{"decision": "deny", "reason": "no converting"}"#,
    );
    guard["tools"] = json!(["mcp__*__convert_*"]);
    let mut scrub = answering(&root, "scrub", r#"{"result": "REDACTED"}"#);
    scrub["tools"] = json!(["mcp__time__get_*"]);
    set_hooks(&root, "pre_tool", vec![guard]);
    set_hooks(&root, "post_tool", vec![scrub]);
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = last_results(&api.requests()[1].body);
    assert_eq!(r[0]["content"], "REDACTED", "{}", r[0]);
    assert_eq!(r[1]["is_error"], true);
    assert!(
        r[1]["content"].as_str().unwrap().contains("no converting"),
        "{}",
        r[1]
    );
    assert!(
        r[2]["content"].as_str().unwrap().contains("alice"),
        "{}",
        r[2]
    );
    let decided = root.events_of("policy_decision");
    let conv = decided.iter().find(|d| d["tool_use_id"] == "conv").unwrap();
    assert_eq!(
        (&conv["tier"], &conv["rule"]),
        (&json!("deny"), &json!("hook:guard"))
    );
    let runs = root.events_of("hook_decision");
    let ids: Vec<&str> = runs
        .iter()
        .map(|r| r["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["conv", "now"],
        "a hook runs only for the tools its globs name"
    );
}

#[test]
fn hooks_are_reloaded_with_the_settings_and_a_call_uses_those_it_was_decided_under() {
    let mut replies = read_scores();
    replies.extend(read_scores());
    let api = FakeApi::start(replies);
    let root = TestRoot::new(&api.url);
    let guard = answering(&root, "guard", r#"{"decision": "deny"}"#);
    set_hooks(&root, "pre_tool", vec![guard]);
    let d = Daemon::start(&root);
    let first = d.submit("read it");
    d.wait_finished(&first);
    set_hooks(&root, "pre_tool", vec![hook(&root, "echo", &["echo"])]);
    wait_until("the reload", || {
        root.events_of("config_loaded")
            .iter()
            .any(|e| e["trigger"] != "start")
    });
    let second = d.submit("read it again");
    d.wait_finished(&second);
    let reqs = api.requests();
    assert_eq!(last_results(&reqs[1].body)[0]["is_error"], true);
    assert!(
        last_results(&reqs[3].body)[0]["content"]
            .as_str()
            .unwrap()
            .contains("alice")
    );
    let hooks: Vec<(Value, Value)> = root
        .events_of("hook_decision")
        .iter()
        .map(|r| (r["hook"].clone(), r["decision"].clone()))
        .collect();
    assert_eq!(
        hooks,
        [
            (json!("guard"), json!("deny")),
            (json!("echo"), json!("continue"))
        ]
    );
}

#[test]
fn a_post_tool_replacement_is_capped_like_a_tools_output() {
    let api = FakeApi::start(vec![
        Reply::tool("b", "run_bash", json!({"command": "echo short"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| s["output"]["max_chars"] = json!(200));
    let long = "x".repeat(5000);
    let answer = json!({ "result": long }).to_string();
    let flood = answering(&root, "flood", &answer);
    set_hooks(&root, "post_tool", vec![flood]);
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = &last_results(&api.requests()[1].body)[0];
    let text = result["content"].as_str().unwrap();
    let xs = text.chars().filter(|c| *c == 'x').count();
    assert!(
        xs <= 200,
        "{xs} characters of the hook's text reached the model"
    );
    assert!(xs >= 100, "the replacement was not kept at all: {text}");
}

/// The log fills while a pre_tool hook runs: neither its `hook_decision` nor the
/// call's `policy_decision` can be written, so nothing is decided — the call never
/// runs unrecorded, and the task stops with an error.
#[test]
fn a_hook_decision_that_cannot_be_recorded_stops_the_call() {
    let api = FakeApi::start(vec![
        Reply::tool("w", "run_bash", json!({"command": "touch ran"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| s["tools"]["allow"] = json!(["run_bash"]));
    set_hooks(
        &root,
        "pre_tool",
        vec![hook(&root, "slow", &["sleep", "2"])],
    );
    let faults = root.dir.join("faults");
    let mut child = root
        .command(&["run", "x"])
        .env("HARNESSD_FAILPOINTS", format!("@{}", faults.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // tool_requested is written before the hooks run: the hook is running now.
    wait_until("the call is requested", || {
        !root.events_of("tool_requested").is_empty()
    });
    std::fs::write(&faults, "events.append=enospc").unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "the task stops with an error");
    assert!(
        !root.workspace().join("ran").exists(),
        "the call ran unrecorded"
    );
    assert!(root.events_of("hook_decision").is_empty());
    assert!(root.events_of("policy_decision").is_empty());
    assert_eq!(api.requests().len(), 1, "no result reached the model");
}
