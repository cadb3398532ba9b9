//! What a hostile MCP server says, through the real binary (tests/fixtures/mcp/proto.py):
//! annotations that contradict each other, an input schema that refers to a file of
//! the daemon's host, hostile text in names and results.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde_json::json;

use crate::common::daemon::Daemon;
use crate::common::mcp::{add_server, offered, text};
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr};

/// Installs proto.py as server `proto`, its `fileref` schema referring to `reference`.
fn proto(root: &TestRoot) -> PathBuf {
    let code = root.dir.join("mcp-code");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::set_permissions(&code, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/proto.py");
    let script = code.join("proto.py");
    std::fs::copy(src, &script).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    add_server(
        root,
        "proto",
        json!({
            "command": ["python3", script.display().to_string()],
            "read": [code.display().to_string()],
            "env": {
                "PROTO_REF": "PROTO_REF_SRC",
                "PROTO_MANY": "PROTO_MANY_SRC",
                "PROTO_DUP": "PROTO_DUP_SRC",
                "PROTO_FLIP": "PROTO_FLIP_SRC",
            },
        }),
    );
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__proto"]));
    script
}

fn pin(root: &TestRoot, reference: &str) {
    let out = root
        .command(&["mcp", "pin", "proto"])
        .env("PROTO_REF_SRC", reference)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_tool_claiming_read_only_and_destructive_is_still_asked() {
    let root = TestRoot::new("http://127.0.0.1:9");
    proto(&root);
    pin(&root, "file:///nonexistent.json");
    let out = root.run(&["policy", "test", "mcp__proto__sneaky", "{}"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("ask"), "{said}{}", stderr(&out));
}

#[test]
fn an_input_schema_never_makes_the_daemon_read_a_file() {
    let api = FakeApi::start(vec![
        Reply::tool("c1", "mcp__proto__fileref", json!({"x": "guess"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    proto(&root);
    // A file only the daemon's user may read, which happens to be a schema.
    let secret = root.dir.join("secret.json");
    std::fs::write(&secret, r#"{"const": "TOPSECRET-4711"}"#).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let reference = format!("file://{}", secret.display());
    pin(&root, &reference);
    let out = root
        .command(&["run", "x"])
        .env("PROTO_REF_SRC", &reference)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = &last_results(&api.requests()[1].body)[0];
    let said = text(result);
    assert!(!said.contains("TOPSECRET"), "the file was read: {said}");
    assert_eq!(result["is_error"], true, "{said}");
}

#[test]
fn a_lock_file_replaced_by_a_fifo_withholds_the_tools_and_hangs_nothing() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    proto(&root);
    pin(&root, "file:///nonexistent.json");
    let d = Daemon::start(&root);
    let lock = root.dir.join("policies/mcp.lock.json");
    std::fs::remove_file(&lock).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&lock)
        .status()
        .unwrap();
    assert!(made.success());
    let id = d.submit("x");
    let task = d.wait_finished(&id);
    assert_eq!(task["stop_reason"], "end_turn", "{task}");
    let tools = offered(&api.requests()[0].body);
    assert!(!tools.iter().any(|t| t.starts_with("mcp__")), "{tools:?}");
    // Not pinned again over it at first use.
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&lock).unwrap().file_type().is_fifo());
    let pinned = root.events_of("mcp_tools_pinned");
    assert!(pinned.iter().all(|e| e["by"] == "cli"), "{pinned:?}");
    std::fs::remove_file(&lock).unwrap();
}

#[test]
fn a_lock_file_edited_by_hand_is_not_pinned_over_at_first_use() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    proto(&root);
    pin(&root, "file:///nonexistent.json");
    let d = Daemon::start(&root);
    let lock = root.dir.join("policies/mcp.lock.json");
    let edited = std::fs::read_to_string(&lock).unwrap().replace(
        "returns terminal escapes",
        "returns terminal escapes, reviewed",
    );
    std::fs::write(&lock, &edited).unwrap();
    let id = d.submit("x");
    let task = d.wait_finished(&id);
    assert_eq!(task["stop_reason"], "end_turn", "{task}");
    let tools = offered(&api.requests()[0].body);
    assert!(!tools.iter().any(|t| t.starts_with("mcp__")), "{tools:?}");
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), edited);
    let pinned = root.events_of("mcp_tools_pinned");
    assert!(pinned.iter().all(|e| e["by"] == "cli"), "{pinned:?}");
}

#[test]
fn a_server_listing_too_many_tools_is_refused_not_pinned() {
    let root = TestRoot::new("http://127.0.0.1:9");
    proto(&root);
    let out = root
        .command(&["mcp", "list", "--json"])
        .env("PROTO_MANY_SRC", "1500")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let server = &list["servers"][0];
    let error = server["error"].as_str().unwrap_or_default();
    assert!(error.contains("1000 tools"), "{}", server["error"]);
    assert_eq!(server["tools"], json!([]));
    let out = root
        .command(&["mcp", "pin", "proto"])
        .env("PROTO_MANY_SRC", "1500")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(!root.dir.join("policies/mcp.lock.json").exists());
    // Within the bound it is listed whole, page by page.
    let out = root
        .command(&["mcp", "list", "--json"])
        .env("PROTO_MANY_SRC", "986")
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        list["servers"][0]["tools"].as_array().map(Vec::len),
        Some(996)
    );
}

#[test]
fn a_tool_whose_input_is_not_an_object_is_not_offered() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    proto(&root);
    pin(&root, "file:///nonexistent.json");
    let out = root.command(&["run", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let body = &api.requests()[0].body;
    let tools = offered(body);
    assert!(
        tools.contains(&"mcp__proto__escapes".to_string()),
        "{tools:?}"
    );
    assert!(
        !tools.contains(&"mcp__proto__stringly".to_string()),
        "{tools:?}"
    );
    for t in body["tools"].as_array().unwrap() {
        if let Some(schema) = t.get("input_schema") {
            assert_eq!(schema["type"], "object", "{t}");
        }
    }
}

#[test]
fn a_list_naming_a_tool_twice_is_refused() {
    let root = TestRoot::new("http://127.0.0.1:9");
    proto(&root);
    for many in ["0", "700"] {
        let out = root
            .command(&["mcp", "pin", "proto"])
            .env("PROTO_DUP_SRC", "1")
            .env("PROTO_MANY_SRC", many)
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0), "{many}");
        assert!(stderr(&out).contains("twice"), "{}", stderr(&out));
        assert!(!root.dir.join("policies/mcp.lock.json").exists());
    }
}

#[test]
fn a_definition_changed_by_a_list_change_is_withheld_and_denied_from_then_on() {
    let api = FakeApi::start(vec![
        Reply::tool("c1", "mcp__proto__escapes", json!({})),
        Reply::tool("c2", "mcp__proto__escapes", json!({})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    proto(&root);
    pin(&root, "file:///nonexistent.json");
    let out = root
        .command(&["run", "x"])
        .env("PROTO_FLIP_SRC", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert_ne!(last_results(&reqs[1].body)[0]["is_error"], true);
    let second = &last_results(&reqs[2].body)[0];
    assert_eq!(second["is_error"], true, "{second}");
    assert!(text(second).contains("mcp:drifted"), "{second}");
    // Re-listed at its next use (the call c2): withheld from the turn after it.
    assert!(offered(&reqs[0].body).contains(&"mcp__proto__escapes".to_string()));
    let last = offered(&reqs[2].body);
    assert!(
        !last.contains(&"mcp__proto__escapes".to_string()),
        "{last:?}"
    );
    let changed = root.events_of("mcp_tools_changed");
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["changed"][0]["tool"], "escapes");
}

#[test]
fn an_overlong_line_an_unasked_answer_and_a_bad_line_leave_the_connection_usable() {
    let api = FakeApi::start(vec![
        Reply::tool("c1", "mcp__proto__big", json!({})),
        Reply::tool("c2", "mcp__proto__bigok", json!({})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    proto(&root);
    root.edit_settings(|s| s["mcp"]["servers"]["proto"]["timeout_secs"] = json!(3));
    pin(&root, "file:///nonexistent.json");
    let out = root.command(&["run", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    // The 20 MiB line is dropped, not buffered: its call times out.
    let big = &last_results(&reqs[1].body)[0];
    assert_eq!(big["is_error"], true);
    assert!(text(big).contains("no answer within 3 s"), "{big}");
    // The same process answers the next call; the model's share is capped and the
    // whole text kept.
    let ok = &last_results(&reqs[2].body)[0];
    assert_ne!(ok["is_error"], true, "{}", &text(ok)[..200]);
    assert!(text(ok).len() < 100_000);
    let finished = root.events_of("tool_finished");
    assert_eq!(finished[1]["truncated"], true);
    assert_eq!(finished[1]["output_bytes"], 3 * 1024 * 1024);
    assert_eq!(root.events_of("mcp_server_started").len(), 1);
    assert!(root.events_of("mcp_server_exited").is_empty());
}

#[test]
fn a_float_in_a_schema_reads_back_as_pinned() {
    let api = FakeApi::start(vec![
        Reply::tool("c1", "mcp__proto__floaty", json!({"x": 0})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    proto(&root);
    pin(&root, "file:///nonexistent.json");
    // The lock file as written is one its own hashes hold for.
    let out = root.run(&["policy", "test", "mcp__proto__floaty", "{}"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("allow"), "{said}{}", stderr(&out));
    let out = root.command(&["run", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(offered(&api.requests()[0].body).contains(&"mcp__proto__floaty".to_string()));
    let result = &last_results(&api.requests()[1].body)[0];
    assert_eq!(text(result), "floaty ran", "{result}");
    assert!(root.events_of("mcp_tools_changed").is_empty());
}

#[test]
fn a_lock_file_symlink_is_replaced_without_taking_its_targets_owner_or_mode() {
    use std::os::unix::fs::MetadataExt;
    let root = TestRoot::new("http://127.0.0.1:9");
    proto(&root);
    let target = root.dir.join("elsewhere.json");
    std::fs::write(&target, "{\"servers\": {}, \"version\": 1}\n").unwrap();
    std::os::unix::fs::chown(&target, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o4757)).unwrap();
    let lock = root.dir.join("policies/mcp.lock.json");
    std::os::unix::fs::symlink(&target, &lock).unwrap();
    pin(&root, "file:///nonexistent.json");
    let written = std::fs::symlink_metadata(&lock).unwrap();
    assert!(written.file_type().is_file());
    assert_eq!(written.mode() & 0o7777, 0o644);
    assert_eq!(written.uid(), nix::unistd::geteuid().as_raw());
    // What it pointed to is untouched.
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "{\"servers\": {}, \"version\": 1}\n"
    );
}
