//! Traces over OTLP/HTTP, received by a real OTLP receiver that decodes the
//! export with the official protobuf definitions (tests/fixtures/otlp): the three
//! span kinds with their parent links and GenAI attributes, the trace id shared
//! with `task_started`, content only when asked, a caller's `traceparent` joined
//! (through a restart too), a collector that is down costing counted spans and no
//! task, and bad `[telemetry]` settings refused with where they are.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, fresh_dir, stderr, stdout, wait_until};

/// The caller's trace in the traceparent tests.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// The receiver (tests/fixtures/otlp/receiver.py) on a free loopback port, writing
/// each span it decodes as a JSON line; killed on drop.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.out.parent().unwrap());
    }
}

impl Receiver {
    fn start() -> Receiver {
        let venv = std::env::var("HARNESSD_TEST_OTLP").unwrap_or("/opt/harnessd-test/otlp".into());
        let python = PathBuf::from(venv).join("venv/bin/python3");
        assert!(
            python.exists(),
            "{} is missing: run tests/fixtures/otlp/install.sh",
            python.display()
        );
        let out = fresh_dir("harnessd-otlp-").join("spans.jsonl");
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/otlp/receiver.py"
        );
        let mut child = Command::new(python)
            .arg(script)
            .arg(&out)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().strip_prefix("port ").unwrap().parse().unwrap();
        Receiver { child, port, out }
    }

    fn endpoint(&self) -> String {
        format!("\"http://127.0.0.1:{}\"", self.port)
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The spans of `trace`, once its root span (`invoke_agent`) has arrived.
    fn trace(&self, trace: &str) -> Vec<Value> {
        let of = |spans: Vec<Value>| -> Vec<Value> {
            spans
                .into_iter()
                .filter(|s| s["trace_id"] == trace)
                .collect()
        };
        wait_until("the task's root span reaches the receiver", || {
            of(self.spans())
                .iter()
                .any(|s| s["name"] == "invoke_agent harnessd")
        });
        of(self.spans())
    }
}

/// A two-turn task: one `list_dir` call, then the answer.
fn two_turns() -> FakeApi {
    FakeApi::start(vec![
        Reply::tool("tu_1", "list_dir", json!({"path": "."})),
        Reply::message_with_usage(
            json!([{"type": "text", "text": "done"}]),
            "end_turn",
            json!({"input_tokens": 30, "output_tokens": 7}),
        ),
    ])
}

/// Submits a task with `traceparent` through the API and waits for its end;
/// returns its id.
fn submit_traced(d: &Daemon, traceparent: &str) -> String {
    let body = json!({"prompt": "p", "traceparent": traceparent}).to_string();
    let (status, v) = d.request("POST", "/v1/tasks", Some(&body));
    assert_eq!(status, 202, "{v}");
    let id = v["task_id"].as_str().unwrap().to_string();
    d.wait_finished(&id);
    id
}

fn named<'a>(spans: &'a [Value], prefix: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with(prefix))
        .collect()
}

fn one<'a>(spans: &'a [Value], prefix: &str) -> &'a Value {
    let found = named(spans, prefix);
    assert_eq!(found.len(), 1, "{prefix}: {spans:#?}");
    found[0]
}

#[test]
fn a_task_is_one_trace_of_agent_chat_and_tool_spans_named_in_task_started() {
    let receiver = Receiver::start();
    let api = two_turns();
    let root = TestRoot::new(&api.url);
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    let out = root.run(&["run", "list the workspace"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let started = &root.events_of("task_started")[0];
    let trace_id = started["trace_id"]
        .as_str()
        .expect("task_started names its trace");
    assert_eq!(trace_id.len(), 32);
    // `run` sent its spans before it exited.
    let spans = receiver.spans();
    assert!(
        spans.iter().all(|s| s["trace_id"] == trace_id),
        "{spans:#?}"
    );
    assert_eq!(spans.len(), 4, "{spans:#?}");

    let agent = one(&spans, "invoke_agent harnessd");
    assert_eq!(
        agent["parent_span_id"], "",
        "a task without a caller is a root"
    );
    let a = &agent["attributes"];
    assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(a["gen_ai.agent.name"], "harnessd");
    assert_eq!(a["gen_ai.provider.name"], "anthropic");
    assert_eq!(a["gen_ai.request.model"], started["model"]);
    assert_eq!(a["harnessd.task_id"], started["task_id"]);
    assert_eq!(a["harnessd.stop_reason"], "end_turn");
    assert_eq!(agent["resource"]["service.name"], "harnessd");

    let model = started["model"].as_str().unwrap();
    let chats = named(&spans, "chat ");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let mut chats = chats.clone();
    chats.sort_by_key(|c| c["attributes"]["harnessd.turn"].as_i64());
    let expect = [("tool_use", 10, 5), ("end_turn", 30, 7)];
    for (chat, (finish, input, output)) in chats.iter().zip(expect) {
        assert_eq!(chat["name"], format!("chat {model}"));
        assert_eq!(chat["parent_span_id"], agent["span_id"], "{chat}");
        let c = &chat["attributes"];
        assert_eq!(c["gen_ai.operation.name"], "chat");
        assert_eq!(c["gen_ai.request.model"], model);
        assert_eq!(c["gen_ai.usage.input_tokens"], input);
        assert_eq!(c["gen_ai.usage.output_tokens"], output);
        assert_eq!(c["gen_ai.response.finish_reasons"], json!([finish]));
    }

    let tool = one(&spans, "execute_tool ");
    assert_eq!(tool["name"], "execute_tool list_dir");
    assert_eq!(tool["parent_span_id"], agent["span_id"]);
    let t = &tool["attributes"];
    assert_eq!(t["gen_ai.operation.name"], "execute_tool");
    assert_eq!(t["gen_ai.tool.name"], "list_dir");
    assert_eq!(t["gen_ai.tool.call.id"], "tu_1");
    let decision = &root.events_of("policy_decision")[0];
    assert_eq!(t["harnessd.tier"], "allow");
    assert_eq!(t["harnessd.rule"], decision["rule"]);
    // The call ran inside the chat of its turn and the second turn: by the log's times.
    assert!(tool["start"].as_u64() >= chats[0]["end"].as_u64());
    assert!(tool["end"].as_u64() <= chats[1]["start"].as_u64());

    // Content is off by default: no prompt, input or output leaves the host.
    let text = serde_json::to_string(&spans).unwrap();
    for key in [
        "gen_ai.input.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    ] {
        assert!(
            !text.contains(key),
            "{key} exported without telemetry.content"
        );
    }
    assert!(
        !text.contains("list the workspace"),
        "the prompt was exported"
    );
}

#[test]
fn content_is_exported_only_when_asked() {
    let receiver = Receiver::start();
    let api = two_turns();
    let root = TestRoot::new(&api.url);
    std::fs::write(root.workspace().join("marker-file.txt"), "x").unwrap();
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    root.set_config("telemetry", "content", "true");
    let out = root.run(&["run", "list the workspace"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let spans = receiver.spans();
    let agent = one(&spans, "invoke_agent");
    let messages: Value = serde_json::from_str(
        agent["attributes"]["gen_ai.input.messages"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(messages[0]["parts"][0]["content"], "list the workspace");
    let tool = &one(&spans, "execute_tool")["attributes"];
    let input: Value =
        serde_json::from_str(tool["gen_ai.tool.call.arguments"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"path": "."}));
    let result = tool["gen_ai.tool.call.result"].as_str().unwrap();
    assert!(result.contains("marker-file.txt"), "{result}");
}

#[test]
fn a_callers_traceparent_puts_the_task_in_its_trace_and_a_bad_one_is_refused() {
    let receiver = Receiver::start();
    let api = FakeApi::start(vec![Reply::text("one"), Reply::text("two")]);
    let root = TestRoot::new(&api.url);
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    let d = Daemon::start(&root);

    let (status, v) = d.request(
        "POST",
        "/v1/tasks",
        Some(&json!({"prompt": "p", "traceparent": "00-abc-def-01"}).to_string()),
    );
    assert_eq!(status, 400, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("traceparent") && message.contains("00-abc-def-01"),
        "{message}"
    );

    let tp = format!("00-{TRACE}-{PARENT}-01");
    let id = submit_traced(&d, &tp);
    let id = id.as_str();
    let started = root
        .events_of("task_started")
        .into_iter()
        .find(|e| e["task_id"] == id)
        .unwrap();
    assert_eq!(started["trace_id"], TRACE);
    let spans = receiver.trace(TRACE);
    let agent = one(&spans, "invoke_agent");
    assert_eq!(agent["parent_span_id"], PARENT, "under the caller's span");
    assert_eq!(agent["attributes"]["harnessd.task_id"], id);
    assert_eq!(one(&spans, "chat ")["parent_span_id"], agent["span_id"]);

    // `submit --traceparent` does the same from the command line.
    let other = "0af7651916cd43dd8448eb211c80319c";
    let tp = format!("00-{other}-b7ad6b7169203331-01");
    let out = root.run(&["submit", "--traceparent", &tp, "q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    d.wait_finished(&id);
    let agent = one(&receiver.trace(other), "invoke_agent").clone();
    assert_eq!(agent["parent_span_id"], "b7ad6b7169203331");
    assert_eq!(agent["attributes"]["harnessd.task_id"], id.as_str());
    let bad = root.run(&["submit", "--traceparent", "nonsense", "q"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("traceparent"), "{}", stderr(&bad));
}

#[test]
fn a_queued_task_keeps_its_callers_trace_across_a_restart() {
    let receiver = Receiver::start();
    let mut slow = Reply::text("never seen");
    slow.delay = std::time::Duration::from_secs(60);
    let api = FakeApi::start(vec![slow, Reply::text("after the restart")]);
    let root = TestRoot::new(&api.url);
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    root.set_config("daemon", "max_concurrent_tasks", "1");
    root.set_config("daemon", "shutdown_grace_secs", "1");
    let mut d = Daemon::start(&root);
    let first = d.submit("holds the only slot");
    wait_until("the first task's request is sent", || {
        !api.requests().is_empty()
    });
    let tp = format!("00-{TRACE}-{PARENT}-01");
    let (status, v) = d.request(
        "POST",
        "/v1/tasks",
        Some(&json!({"prompt": "waits", "traceparent": tp}).to_string()),
    );
    assert_eq!(status, 202, "{v}");
    let queued = v["task_id"].as_str().unwrap().to_string();
    assert!(d.terminate(), "the daemon stops on SIGTERM");
    assert!(
        root.events_of("task_started")
            .iter()
            .all(|e| e["task_id"] != queued.as_str()),
        "the second task had not started before the stop"
    );
    let d = Daemon::start(&root);
    d.wait_finished(&queued);
    let spans = receiver.trace(TRACE);
    let agent = one(&spans, "invoke_agent");
    assert_eq!(agent["parent_span_id"], PARENT);
    assert_eq!(agent["attributes"]["harnessd.task_id"], queued.as_str());
    // The first task's run, interrupted by the stop, ended its own trace.
    let interrupted = receiver
        .spans()
        .into_iter()
        .find(|s| s["attributes"]["harnessd.task_id"] == first.as_str())
        .expect("the interrupted run's root span was exported at the stop");
    assert_eq!(
        interrupted["attributes"]["harnessd.stop_reason"],
        "interrupted"
    );
}

/// `harnessd_telemetry_spans_dropped_total` from `/metrics`.
fn dropped(d: &Daemon) -> u64 {
    let (_, text) = d.request_text("GET", "/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("harnessd_telemetry_spans_dropped_total "))
        .unwrap_or_else(|| panic!("no drop counter in {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn with_the_collector_down_tasks_finish_and_the_lost_spans_are_counted() {
    // A port nothing listens on: every export is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "list_dir", json!({"path": "."})),
        Reply::text("done"),
        Reply::text("again"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config(
        "telemetry",
        "otlp_endpoint",
        &format!("\"http://127.0.0.1:{port}\""),
    );
    let d = Daemon::start(&root);
    assert_eq!(dropped(&d), 0);
    let id = d.submit("first");
    assert_eq!(d.wait_finished(&id)["stop_reason"], "end_turn");
    wait_until("the lost spans are counted", || dropped(&d) >= 4);
    let id = d.submit("second");
    assert_eq!(d.wait_finished(&id)["stop_reason"], "end_turn");
    wait_until("the next task's spans are counted too", || dropped(&d) >= 6);
    drop(d);

    // `run` too: it ends as usual and says what was lost.
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    root.set_config(
        "telemetry",
        "otlp_endpoint",
        &format!("\"http://127.0.0.1:{port}\""),
    );
    let out = root.run(&["run", "go"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("spans were not exported"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_telemetry_settings_are_refused_with_where_they_are() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("telemetry", "otlp_endpoint", "\"collector:4318\"");
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out);
    let line = std::fs::read_to_string(root.dir.join("config/config.toml"))
        .unwrap()
        .lines()
        .position(|l| l.starts_with("otlp_endpoint"))
        .unwrap()
        + 1;
    let at = format!("config/config.toml:{line}:");
    for part in [at.as_str(), "telemetry.otlp_endpoint", "not an http(s) URL"] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }

    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("telemetry", "content", "\"yes\"");
    let err = stderr(&root.run(&["check"]));
    assert!(
        err.contains("telemetry.content") && err.contains("config/config.toml"),
        "{err}"
    );

    // The standard variables are checked as strictly, named as where they come from.
    let root = TestRoot::new("http://127.0.0.1:9");
    for (var, value) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_RESOURCE_ATTRIBUTES", "team"),
    ] {
        for cmd in ["check", "run"] {
            let mut args = vec![cmd];
            if cmd == "run" {
                args.push("go");
            }
            let out = root.command(&args).env(var, value).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{cmd} with {var}={value}");
            let err = stderr(&out);
            assert!(
                err.contains(&format!("environment variable {var}")),
                "{err}"
            );
        }
    }
    assert!(root.events_of("task_started").is_empty(), "nothing ran");
}

#[test]
fn the_environment_turns_export_on_and_names_the_service() {
    let receiver = Receiver::start();
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    let out = root
        .command(&["run", "go"])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}/", receiver.port),
        )
        .env("OTEL_SERVICE_NAME", "ops-agent")
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=test,team=ops%2Csre",
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let spans = receiver.spans();
    let resource = &one(&spans, "invoke_agent")["resource"];
    assert_eq!(resource["service.name"], "ops-agent");
    assert_eq!(resource["deployment.environment"], "test");
    assert_eq!(resource["team"], "ops,sre");

    // The traces URL itself, over the file; OTEL_SDK_DISABLED turns it all off.
    let api = FakeApi::start(vec![Reply::text("done"), Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    root.set_config("telemetry", "otlp_endpoint", "\"http://127.0.0.1:9\"");
    let traces = format!("http://127.0.0.1:{}/v1/traces", receiver.port);
    let run = |disabled: &str| {
        let out = root
            .command(&["run", "go"])
            .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &traces)
            .env("OTEL_SDK_DISABLED", disabled)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    let shown = stdout(
        &root
            .command(&["check"])
            .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &traces)
            .output()
            .unwrap(),
    );
    assert!(
        shown.contains(&format!("telemetry  traces to {traces} · content off")),
        "{shown}"
    );
    run("true");
    assert!(root.events_of("task_started")[0].get("trace_id").is_none());
    run("false");
    let trace = root.events_of("task_started")[1]["trace_id"].clone();
    assert_eq!(receiver.trace(trace.as_str().unwrap()).len(), 2);
}

/// The pending approval of call `tool_use_id`, if it is waiting.
fn pending(d: &Daemon, tool_use_id: &str) -> Option<String> {
    let (_, list) = d.request("GET", "/v1/approvals", None);
    list["approvals"]
        .as_array()?
        .iter()
        .find(|a| a["tool_use_id"] == tool_use_id)
        .map(|a| a["approval_id"].as_str().unwrap().to_string())
}

#[test]
fn an_approval_is_a_child_of_its_call_and_a_resumed_run_is_a_trace_of_its_own() {
    let receiver = Receiver::start();
    let write = |id: &str| Reply::tool(id, "write_file", json!({"path": "a.txt", "content": id}));
    let api = FakeApi::start(vec![write("w1"), write("w2"), Reply::text("written")]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| s["tools"]["ask"] = json!(["write_file"]));
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    let d = Daemon::start(&root);
    let id = d.submit("write a file");
    wait_until("the first approval", || pending(&d, "w1").is_some());
    let (status, _) = d.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(status, 202);
    d.wait_finished(&id);
    let (status, _) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
    assert_eq!(status, 202);
    wait_until("the second approval", || pending(&d, "w2").is_some());
    let approval = pending(&d, "w2").unwrap();
    let (status, v) = d.request(
        "POST",
        &format!("/v1/approvals/{approval}"),
        Some(r#"{"decision":"approve"}"#),
    );
    assert_eq!(status, 200, "{v}");
    d.wait_finished(&id);

    let first = root.events_of("task_started")[0]["trace_id"]
        .as_str()
        .unwrap()
        .to_string();
    let second = root.events_of("task_resumed")[0]["trace_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(first, second, "each run of a task is a trace of its own");

    // The cancelled run: its call waited for an approval the cancel answered.
    let spans = receiver.trace(&first);
    let agent = one(&spans, "invoke_agent");
    assert_eq!(agent["attributes"]["harnessd.stop_reason"], "cancelled");
    let call = one(&spans, "execute_tool");
    assert_eq!(call["attributes"]["harnessd.tier"], "ask");
    assert_eq!(
        call["status"]["code"], 2,
        "a call that did not run is an error: {call}"
    );
    let wait = one(&spans, "approval");
    assert_eq!(wait["parent_span_id"], call["span_id"]);
    assert_eq!(wait["attributes"]["harnessd.approval.decision"], "denied");
    assert_eq!(wait["attributes"]["harnessd.approver"], "cancel");

    // The resumed run: approved, and run.
    let spans = receiver.trace(&second);
    let call = one(&spans, "execute_tool");
    assert_eq!(call["attributes"]["gen_ai.tool.call.id"], "w2");
    let resolved = root
        .events_of("approval_resolved")
        .into_iter()
        .find(|e| e["tool_use_id"] == "w2")
        .unwrap();
    assert_eq!(call["attributes"]["harnessd.approver"], resolved["by"]);
    assert_ne!(call["status"]["code"], 2, "{call}");
    let wait = one(&spans, "approval");
    assert_eq!(wait["parent_span_id"], call["span_id"]);
    assert_eq!(wait["attributes"]["harnessd.approval.decision"], "approved");
    assert_eq!(
        wait["attributes"]["harnessd.approval_id"],
        approval.as_str()
    );
}

#[test]
fn a_traceparent_header_is_taken_and_telemetry_changes_wait_for_a_restart() {
    use std::io::{Read, Write};
    let receiver = Receiver::start();
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    let d = Daemon::start(&root);
    let body = r#"{"prompt":"p"}"#;
    let send = |traceparent: &str| -> String {
        let mut s =
            std::os::unix::net::UnixStream::connect(root.dir.join("run/harnessd.sock")).unwrap();
        let request = format!(
            "POST /v1/tasks HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             traceparent: {traceparent}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    };
    let refused = send("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7");
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(refused.contains("traceparent"), "{refused}");
    let accepted = send(&format!("00-{TRACE}-{PARENT}-01"));
    assert!(accepted.starts_with("HTTP/1.1 202"), "{accepted}");
    let agent = one(&receiver.trace(TRACE), "invoke_agent").clone();
    assert_eq!(agent["parent_span_id"], PARENT);

    // The exporter is set up at start: a change is said to need a restart.
    root.set_config("telemetry", "content", "true");
    unsafe { libc::kill(d.pid(), libc::SIGHUP) };
    wait_until("the reload is recorded", || {
        root.events_of("config_loaded")
            .iter()
            .any(|e| e["trigger"] != "start" && e["restart_needed"] == json!(["telemetry"]))
    });
}

#[test]
fn failures_are_error_spans() {
    let receiver = Receiver::start();
    // A call of a tool that is not offered is refused; then the model's 400 ends
    // the task with an error.
    let api = FakeApi::start(vec![
        Reply::tool("tu_x", "no_such_tool", json!({})),
        Reply::error(400, "invalid_request_error", "the request is malformed"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let spans = receiver.spans();
    // `run` has exited: what it lost it said on stderr.
    assert!(
        named(&spans, "invoke_agent").len() == 1,
        "no root span; run said: {}",
        stderr(&out)
    );
    let call = one(&spans, "execute_tool no_such_tool");
    assert_eq!(call["status"]["code"], 2, "{call}");
    let mut chats = named(&spans, "chat ");
    chats.sort_by_key(|c| c["attributes"]["harnessd.turn"].as_i64());
    assert_eq!(chats.len(), 2);
    assert_eq!(chats[0]["status"]["code"], 0, "the first request succeeded");
    let failed = chats[1];
    assert_eq!(failed["status"]["code"], 2, "{failed}");
    let attempt = &failed["events"][0];
    assert_eq!(attempt["name"], "model_error");
    assert_eq!(attempt["attributes"]["http.response.status_code"], 400);
    let agent = one(&spans, "invoke_agent");
    assert_eq!(agent["status"]["code"], 2);
    let error = root.events_of("task_finished")[0]["error"].clone();
    assert_eq!(agent["status"]["message"], error, "{agent}");
}

#[test]
fn a_hooks_run_is_an_event_of_its_calls_span() {
    let receiver = Receiver::start();
    let api = two_turns();
    let root = TestRoot::new(&api.url);
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    root.edit_settings(|s| {
        s["hooks"]["pre_tool"] = json!([{
            "name": "noop",
            "command": ["/bin/echo", r#"{"decision": "continue", "reason": "secret words"}"#]
        }]);
    });
    let out = root.run(&["run", "list the workspace"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let trace_id = root.events_of("task_started")[0]["trace_id"]
        .as_str()
        .unwrap()
        .to_string();
    let spans = receiver.trace(&trace_id);
    let tool = one(&spans, "execute_tool ");
    let events = tool["events"].as_array().unwrap();
    let hook = events
        .iter()
        .find(|e| e["name"] == "hook_decision")
        .unwrap_or_else(|| panic!("no hook_decision event: {tool:#}"));
    let a = &hook["attributes"];
    assert_eq!(a["harnessd.hook.name"], "noop");
    assert_eq!(a["harnessd.hook.point"], "pre_tool");
    assert_eq!(a["harnessd.hook.decision"], "continue");
    assert!(a["harnessd.hook.duration_ms"].is_i64() || a["harnessd.hook.duration_ms"].is_u64());
    assert!(
        !serde_json::to_string(&spans)
            .unwrap()
            .contains("secret words"),
        "a hook's reason is content"
    );
}

#[test]
fn a_tool_name_the_model_made_up_is_not_exported_without_content() {
    let receiver = Receiver::start();
    // The name is the model's text: it can carry what the prompt said.
    let made_up = "the_password_is hunter2 \u{1b}]0;x\u{7}";
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", made_up, json!({})),
        Reply::tool("tu_2", "mcp__srv__ok", json!({})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("telemetry", "otlp_endpoint", &receiver.endpoint());
    let out = root.run(&["run", "list the workspace"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let trace_id = root.events_of("task_started")[0]["trace_id"]
        .as_str()
        .unwrap()
        .to_string();
    let spans = receiver.trace(&trace_id);
    let tools = named(&spans, "execute_tool");
    assert_eq!(tools.len(), 2, "{spans:#?}");
    let text = serde_json::to_string(&spans).unwrap();
    assert!(
        !text.contains("hunter2"),
        "a made-up tool name was exported: {text}"
    );
    // A name of the form the API accepts for a tool is kept.
    assert!(text.contains("execute_tool mcp__srv__ok"), "{text}");
    assert!(
        tools.iter().any(|t| t["name"] == "execute_tool unknown"
            && t["attributes"]["gen_ai.tool.name"] == "unknown"),
        "{text}"
    );
}

#[test]
fn a_later_versions_traceparent_is_kept_as_version_00_without_its_extra_fields() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    // A later version may carry more after a '-': here a terminal escape and
    // padding, which the task's transcript must not keep.
    let given = format!("01-{TRACE}-{PARENT}-01-\u{1b}]0;x\u{7}{}", "z".repeat(1000));
    let id = submit_traced(&d, &given);
    let id = id.as_str();
    let path = root.dir.join(format!("transcripts/{id}.json"));
    let transcript: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(
        transcript["traceparent"],
        format!("00-{TRACE}-{PARENT}-01").as_str()
    );
    let started = root.events_of("task_started")[0].clone();
    assert_eq!(started["trace_id"], TRACE);
}
