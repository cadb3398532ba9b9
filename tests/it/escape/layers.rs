//! The sandbox's layers as a whole: `require = "full"` refuses when a layer cannot be
//! had, `best_effort` says what it lacks, and `harnessd sandbox` confines a command
//! exactly as a tool.

use std::time::Duration;

use serde_json::json;

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, stdout};

#[test]
fn a_sandbox_that_cannot_be_had_refuses_tools_when_full() {
    // As root, an account that does not exist makes the privilege drop impossible.
    let api = FakeApi::start(vec![
        Reply::tool("t", "run_bash", json!({"command": "touch ran"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| s["sandbox"]["user"] = json!("no-such-harnessd-user"));
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("tools will be refused"),
        "{}",
        stderr(&out)
    );
    let result = &last_results(&api.requests()[1].body)[0];
    let text = result["content"].as_str().unwrap();
    assert_eq!(result["is_error"], true);
    assert!(text.contains("privilege_drop cannot be enforced"), "{text}");
    assert!(text.contains("no-such-harnessd-user"), "{text}");
    assert!(!root.workspace().join("ran").exists());
    let check = root.run(&["check"]);
    assert!(
        stdout(&check).contains("NO  privilege_drop"),
        "{}",
        stdout(&check)
    );
}

#[test]
fn best_effort_runs_weakened_and_says_so_in_every_tool_finished() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "t",
            "run_bash",
            json!({"command": "cat /etc/shadow; touch ran"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["sandbox"]["user"] = json!("no-such-harnessd-user");
        s["sandbox"]["require"] = json!("best_effort");
    });
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(root.workspace().join("ran").exists());
    // Never root, even weakened: the drop fell back to nobody's uid.
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(root.workspace().join("ran")).unwrap(),
    );
    assert_eq!(owner, 65534);
    // Still confined by the other layers: Landlock keeps /etc/shadow out.
    let text = last_results(&api.requests()[1].body)[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("Permission denied"), "{text}");
    let fin = &root.events_of("tool_finished")[0];
    let note = fin["sandbox"]
        .as_str()
        .expect("tool_finished states the weaker sandbox");
    assert!(
        note.starts_with("best_effort: ") && note.contains("privilege_drop"),
        "{note}"
    );
}

#[test]
fn sandbox_command_runs_confined_with_the_commands_exit_code() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root.run(&[
        "sandbox",
        "--",
        "bash",
        "-c",
        "id -u; cat /etc/shadow; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7));
    let uid = stdout(&out).trim().to_string();
    assert_ne!(uid, "0", "the command ran as root");
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    root.edit_settings(|s| s["sandbox"]["timeout_secs"] = json!(1));
    let started = std::time::Instant::now();
    let out = root.run(&["sandbox", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(started.elapsed() < Duration::from_secs(10));
    let out = root.run(&[
        "sandbox",
        "--",
        "python3",
        "-c",
        "import socket; socket.socket(socket.AF_INET6)",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("Operation not permitted"),
        "{}",
        stderr(&out)
    );
}
