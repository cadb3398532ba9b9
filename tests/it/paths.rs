//! File-tool paths are judged on the file the tool process actually opens (docs/policy.md):
//! links are followed to their final target (dangling ones and chains too), links
//! through `/proc` are refused, and a link swapped in after the decision cannot
//! redirect the open. Each attack is one the model could mount with `run_bash` in an
//! earlier turn; the tests plant the links directly.

use std::os::unix::fs::symlink;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, wait_until};

fn text(result: &Value) -> &str {
    result["content"].as_str().unwrap_or("")
}

/// Appends `rule` to `tools.<tier>` of the root's settings.
fn add_rule(root: &TestRoot, tier: &str, rule: &str) {
    root.edit_settings(|s| s["tools"][tier].as_array_mut().unwrap().push(json!(rule)));
}

/// A root whose policy allows writes under `workspace/docs/` and denies them under
/// `workspace/secrets/`, with `secrets/k` holding `secret` and `docs/` present.
fn docs_and_secrets(api: &FakeApi, secret: &str) -> TestRoot {
    let root = TestRoot::new(&api.url);
    add_rule(&root, "allow", "write_file(workspace/docs/**)");
    add_rule(&root, "deny", "write_file(workspace/secrets/*)");
    let ws = root.workspace();
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::create_dir_all(ws.join("secrets")).unwrap();
    std::fs::write(ws.join("secrets/k"), secret).unwrap();
    root
}

/// Runs `calls` in one turn through `harnessd run` (no `--yes`: an `ask` is denied);
/// returns the tool_results the fake API received and the bodies of every request.
fn run_turn(root: &TestRoot, api: &FakeApi) -> (Vec<Value>, String) {
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2, "{}", stderr(&out));
    let all: String = reqs.iter().map(|r| r.body.to_string()).collect();
    (last_results(&reqs[1].body), all)
}

#[test]
fn a_dangling_link_into_a_denied_dir_is_judged_on_its_target() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "w",
            "write_file",
            json!({"path": "docs/readme.md", "content": "ssh-ed25519 AAAA attacker"}),
        ),
        Reply::text("done"),
    ]);
    let root = docs_and_secrets(&api, "unused");
    let ws = root.workspace();
    symlink("../secrets/authorized_keys", ws.join("docs/readme.md")).unwrap();
    let (results, _) = run_turn(&root, &api);
    assert_eq!(results[0]["is_error"], true, "{}", results[0]);
    assert!(
        text(&results[0]).contains("denied by policy (rule `write_file(workspace/secrets/*)`)"),
        "{}",
        text(&results[0])
    );
    assert!(
        std::fs::symlink_metadata(ws.join("secrets/authorized_keys")).is_err(),
        "the write went through the dangling link"
    );
    let decision = &root.events_of("policy_decision")[0];
    assert_eq!(decision["subject"], "workspace/secrets/authorized_keys");
}

#[test]
fn a_link_through_proc_self_cwd_is_refused_and_the_secret_stays_unread() {
    const SECRET: &str = "proc-magic-secret-31f2a";
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("viaLink", "read_file", json!({"path": "magic"})),
            (
                "direct",
                "read_file",
                json!({"path": "/proc/self/cwd/secrets/k"}),
            ),
            ("listed", "list_dir", json!({"path": "proc-dir"})),
        ]),
        Reply::text("done"),
    ]);
    let root = docs_and_secrets(&api, SECRET);
    let ws = root.workspace();
    symlink("/proc/self/cwd/secrets/k", ws.join("magic")).unwrap();
    symlink("/proc/thread-self/cwd/secrets", ws.join("proc-dir")).unwrap();
    let (results, everything) = run_turn(&root, &api);
    for r in &results {
        assert_eq!(r["is_error"], true, "{r}");
        assert!(text(r).contains("/proc"), "{}", text(r));
    }
    assert!(
        !everything.contains(SECRET),
        "the secret reached the model: {results:?}"
    );
    assert!(
        !everything.contains("\"k\\n"),
        "the denied directory was listed: {results:?}"
    );
    for d in root.events_of("policy_decision") {
        assert_eq!(d["tier"], "deny", "{d}");
    }
}

#[test]
fn a_chain_of_links_is_judged_on_its_final_target() {
    const SECRET: &str = "chained-secret-8d7c6b";
    let api = FakeApi::start(vec![
        Reply::tools(&[
            (
                "w",
                "write_file",
                json!({"path": "docs/a.md", "content": "attacker"}),
            ),
            ("r", "read_file", json!({"path": "docs/c.md"})),
        ]),
        Reply::text("done"),
    ]);
    let root = docs_and_secrets(&api, SECRET);
    let ws = root.workspace();
    // a.md -> /abs/docs/b.md -> ../secrets/authorized_keys (missing): a dangling chain.
    symlink(ws.join("docs/b.md"), ws.join("docs/a.md")).unwrap();
    symlink("../secrets/authorized_keys", ws.join("docs/b.md")).unwrap();
    // c.md -> d.md -> ../e -> secrets/k: a chain to a denied file that exists.
    symlink("d.md", ws.join("docs/c.md")).unwrap();
    symlink("../e", ws.join("docs/d.md")).unwrap();
    symlink("secrets/k", ws.join("e")).unwrap();
    let (results, everything) = run_turn(&root, &api);
    assert!(
        text(&results[0]).contains("rule `write_file(workspace/secrets/*)`"),
        "{}",
        text(&results[0])
    );
    assert!(
        text(&results[1]).contains("rule `read_file(workspace/secrets/*)`"),
        "{}",
        text(&results[1])
    );
    assert!(!everything.contains(SECRET));
    assert!(std::fs::symlink_metadata(ws.join("secrets/authorized_keys")).is_err());
    let subjects: Vec<Value> = root
        .events_of("policy_decision")
        .iter()
        .map(|d| d["subject"].clone())
        .collect();
    assert_eq!(
        subjects,
        [
            json!("workspace/secrets/authorized_keys"),
            json!("workspace/secrets/k")
        ]
    );
}

/// Waits for the `n`th approval request, runs `swap`, then approves it.
fn swap_then_approve(root: &TestRoot, d: &Daemon, n: usize, swap: impl FnOnce()) {
    wait_until("an approval", || {
        root.events_of("approval_requested").len() >= n
    });
    swap();
    let id = root.events_of("approval_requested")[n - 1]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = d.request(
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(r#"{"decision": "approve"}"#),
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_link_swapped_in_while_the_call_waits_for_approval_cannot_redirect_it() {
    const SECRET: &str = "swapped-secret-4e3d2c";
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("r", "read_file", json!({"path": "docs/r.md"})),
            (
                "w",
                "write_file",
                json!({"path": "docs/new/w.md", "content": "attacker"}),
            ),
        ]),
        Reply::text("done"),
    ]);
    let root = docs_and_secrets(&api, SECRET);
    // Both calls ask, so each waits for a human after it was judged.
    add_rule(&root, "ask", "read_file(workspace/docs/*)");
    add_rule(&root, "ask", "write_file(workspace/docs/new/*)");
    let ws = root.workspace();
    std::fs::write(ws.join("docs/r.md"), "harmless").unwrap();
    let d = Daemon::start(&root);
    let task = d.submit("swap");
    // Each call is judged, then waits for a human; meanwhile its judged name is made
    // to lead into secrets/: a file swapped for a link, and a directory the write
    // would create planted as a link.
    swap_then_approve(&root, &d, 1, || {
        std::fs::remove_file(ws.join("docs/r.md")).unwrap();
        symlink("../secrets/k", ws.join("docs/r.md")).unwrap();
    });
    swap_then_approve(&root, &d, 2, || {
        symlink("../secrets", ws.join("docs/new")).unwrap();
    });
    d.wait_finished(&task);
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2);
    let results = last_results(&reqs[1].body);
    for r in &results {
        assert_eq!(r["is_error"], true, "{r}");
        assert!(
            text(r).contains("changed after it was checked"),
            "{}",
            text(r)
        );
    }
    assert!(!reqs[1].body.to_string().contains(SECRET));
    assert!(std::fs::symlink_metadata(ws.join("secrets/w.md")).is_err());
    let decisions = root.events_of("policy_decision");
    assert_eq!(decisions[0]["subject"], "workspace/docs/r.md");
    assert_eq!(decisions[1]["subject"], "workspace/docs/new/w.md");
}

#[test]
fn hostile_path_strings_are_answered_not_crashed_on() {
    let long = "a/".repeat(50_000);
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("empty", "read_file", json!({"path": ""})),
            ("nul", "read_file", json!({"path": "a\u{0}b"})),
            ("long", "read_file", json!({"path": long})),
            ("esc", "list_dir", json!({"path": "\u{1b}[2J\u{fffd}/.."})),
            (
                "loop",
                "write_file",
                json!({"path": "docs/loop", "content": "x"}),
            ),
        ]),
        Reply::text("done"),
    ]);
    let root = docs_and_secrets(&api, "unused");
    let ws = root.workspace();
    symlink("loop2", ws.join("docs/loop")).unwrap();
    symlink("loop", ws.join("docs/loop2")).unwrap();
    let started = std::time::Instant::now();
    let (results, _) = run_turn(&root, &api);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(results.len(), 5);
    for r in &results[..3] {
        assert_eq!(r["is_error"], true, "{r}");
    }
    assert!(text(&results[1]).contains("NUL"), "{}", text(&results[1]));
    assert!(text(&results[2]).contains("long"), "{}", text(&results[2]));
    assert!(
        text(&results[4]).contains("symbolic links"),
        "{}",
        text(&results[4])
    );
}
