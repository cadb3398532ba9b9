//! The real reference servers, installed from the registries (npm and PyPI), run
//! in the sandbox through `harnessd run`: their tools listed, pinned and called,
//! their results reaching the model; node's server speaks the `initialize`
//! handshake, the python SDK's servers the stateless revision of 2026-07-28.

use serde_json::{Value, json};

use crate::common::mcp::{everything, offered, python_servers, text};
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr};

fn started(root: &TestRoot) -> Vec<(String, String)> {
    root.events_of("mcp_server_started")
        .iter()
        .map(|e| {
            (
                e["server"].as_str().unwrap().to_string(),
                e["protocol"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_everything_server_lists_and_answers_and_sees_only_named_variables() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            (
                "e1",
                "mcp__everything__echo",
                json!({"message": "through the sandbox"}),
            ),
            ("e2", "mcp__everything__get-env", json!({})),
            ("e3", "mcp__everything__get-sum", json!({"a": 2, "b": 40})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    everything(&root);
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__everything"]));
    let out = root
        .command(&["run", "x"])
        .env("EVERYTHING_TOKEN_SRC", "token-for-the-server")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    let tools = offered(&reqs[0].body);
    for t in [
        "mcp__everything__echo",
        "mcp__everything__get-env",
        "mcp__everything__get-sum",
    ] {
        assert!(tools.contains(&t.to_string()), "{t} not offered: {tools:?}");
    }
    let r = last_results(&reqs[1].body);
    assert!(
        text(&r[0]).contains("through the sandbox"),
        "{}",
        text(&r[0])
    );
    let env: Value = serde_json::from_str(&text(&r[1])).expect("get-env returns JSON");
    let env = env.as_object().unwrap();
    assert_eq!(env["EVERYTHING_TOKEN"], "token-for-the-server");
    assert!(!env.contains_key("ANTHROPIC_API_KEY"), "{env:?}");
    assert!(!env.contains_key("EVERYTHING_TOKEN_SRC"), "{env:?}");
    assert!(!text(&r[1]).contains(crate::common::SECRET_KEY));
    assert!(text(&r[2]).contains("42"), "{}", text(&r[2]));
    assert_eq!(started(&root), [("everything".into(), "2025-11-25".into())]);
}

#[test]
fn the_python_servers_answer_over_the_stateless_revision() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            (
                "t1",
                "mcp__time__get_current_time",
                json!({"timezone": "UTC"}),
            ),
            (
                "g1",
                "mcp__git__git_status",
                json!({"repo_path": "workspace/repo"}),
            ),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let repo = root.workspace().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&repo)
        .status()
        .unwrap();
    assert!(git.success());
    std::fs::write(repo.join("new.txt"), "x").unwrap();
    // A module a tool could plant under the name `python -m` runs: never imported,
    // since a server's working directory is the root, which tools do not write.
    let planted = root.workspace().join("mcp_server_time");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(
        planted.join("__init__.py"),
        "raise SystemExit('hijacked')\n",
    )
    .unwrap();
    std::fs::write(
        planted.join("__main__.py"),
        "raise SystemExit('hijacked')\n",
    )
    .unwrap();
    python_servers(&root);
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__time", "mcp__git__git_status"]));
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    let r = last_results(&reqs[1].body);
    let time = text(&r[0]);
    assert!(
        time.contains("\"timezone\"") && time.contains("UTC"),
        "{time}"
    );
    assert_ne!(r[0]["is_error"], true, "{time}");
    let mut protocols = started(&root);
    protocols.sort();
    assert!(
        protocols.contains(&("time".into(), "2026-07-28".into())),
        "{protocols:?}"
    );
    let status = text(&r[1]);
    assert!(status.contains("new.txt"), "{status}");
    assert_ne!(r[1]["is_error"], true, "{status}");
}
