//! The worked examples of docs/ run for real: the OPA-style hook of
//! docs/hooks.md (`docs/examples/opa-hook.py`) as a confined pre_tool hook
//! asking a policy server on a loopback port — its deny reaches the record, its
//! ask the approval path, and with the server down the call is denied.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr};

const OPA_HOOK: &str = include_str!("../../docs/examples/opa-hook.py");

/// A stand-in for OPA on a loopback port answering
/// `POST /v1/data/harnessd/pre_tool` as docs/examples/harnessd.rego decides (the
/// same three branches, in Rust: no OPA binary comes from the registries).
fn fake_opa() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut line, mut length) = (String::new(), 0usize);
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                line.clear();
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let call: Value = serde_json::from_slice(&body).unwrap();
            let command = call["input"]["input"]["command"].as_str().unwrap_or("");
            let result = if call["input"]["tool"] == "run_bash" && command.contains("prod-") {
                json!({"decision": "deny", "reason": "production hosts are off limits"})
            } else if command.contains("git push") {
                json!({"decision": "ask", "reason": "pushes are reviewed by a human"})
            } else {
                json!({"decision": "continue", "reason": ""})
            };
            let answer = json!({ "result": result }).to_string();
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    port
}

/// A root whose one pre_tool hook is the documented OPA hook, reaching `port`
/// through its own `env` and `network` (the port alone).
fn root_with_opa_hook(api: &FakeApi, port: u16) -> TestRoot {
    let root = TestRoot::new(&api.url);
    let dir = root.dir.join("hooks");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("opa-hook.py"), OPA_HOOK).unwrap();
    let script = dir.join("opa-hook.py").display().to_string();
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["run_bash(echo *)"]);
        s["hooks"]["pre_tool"] = json!([{
            "name": "opa",
            "command": ["python3", script],
            "tools": ["run_bash", "mcp__*"],
            "timeout_secs": 5,
            "network": [port],
            "read": ["hooks"],
            "env": {"OPA_URL": "TEST_OPA_URL"}
        }]);
    });
    root
}

fn run_with_opa(root: &TestRoot, port: u16) -> std::process::Output {
    root.command(&["run", "x"])
        .env(
            "TEST_OPA_URL",
            format!("http://127.0.0.1:{port}/v1/data/harnessd/pre_tool"),
        )
        .output()
        .unwrap()
}

/// A task of one `run_bash(command)` call under the OPA hook reaching `port`,
/// run to its end; its first `policy_decision` is `(tier, hook:opa)`.
fn one_call_decided(command: &str, port: u16, tier: &str) -> (TestRoot, FakeApi) {
    let api = FakeApi::start(vec![
        Reply::tool("a", "run_bash", json!({ "command": command })),
        Reply::text("done"),
    ]);
    let root = root_with_opa_hook(&api, port);
    let out = run_with_opa(&root, port);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decided = &root.events_of("policy_decision")[0];
    assert_eq!(
        (&decided["tier"], &decided["rule"]),
        (&json!(tier), &json!("hook:opa"))
    );
    (root, api)
}

#[test]
fn the_documented_opa_hook_denies_what_the_policy_server_denies() {
    let port = fake_opa();
    let api = FakeApi::start(vec![
        Reply::tool("a", "run_bash", json!({"command": "echo prod-db-1"})),
        Reply::tool("b", "run_bash", json!({"command": "echo staging"})),
        Reply::text("done"),
    ]);
    let root = root_with_opa_hook(&api, port);
    let out = run_with_opa(&root, port);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decided = root.events_of("policy_decision");
    assert_eq!(
        (&decided[0]["tier"], &decided[0]["rule"]),
        (&json!("deny"), &json!("hook:opa"))
    );
    assert_eq!(
        (&decided[1]["tier"], &decided[1]["rule"]),
        (&json!("allow"), &json!("run_bash(echo *)"))
    );
    let hooks = root.events_of("hook_decision");
    assert_eq!(hooks[0]["reason"], "production hosts are off limits");
    assert_eq!(hooks[1]["decision"], "continue");
    let results = last_results(&api.requests()[2].body);
    assert!(
        results[0]["content"].as_str().unwrap().contains("staging"),
        "{results:?}"
    );
}

#[test]
fn the_documented_opa_hook_asks_and_without_a_tty_the_ask_is_denied() {
    let (_root, api) = one_call_decided("echo git push origin", fake_opa(), "ask");
    let result = &last_results(&api.requests()[1].body)[0];
    assert_eq!(result["is_error"], true, "{result}");
}

#[test]
fn with_the_policy_server_down_the_documented_hook_fails_closed() {
    // A port that was just bound and released: nothing listens there.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (root, api) = one_call_decided("echo staging", port, "deny");
    assert_eq!(root.events_of("hook_decision")[0]["decision"], "deny");
    let result = &last_results(&api.requests()[1].body)[0];
    assert!(
        !result["content"].as_str().unwrap().contains("staging\n"),
        "the command ran: {result}"
    );
}
