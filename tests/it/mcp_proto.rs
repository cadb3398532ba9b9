//! What a hostile MCP server says, through the real binary (tests/fixtures/mcp/proto.py):
//! annotations that contradict each other, an input schema that refers to a file of
//! the daemon's host, hostile text in names and results.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde_json::json;

use crate::common::mcp::{add_server, text};
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
            "env": {"PROTO_REF": "PROTO_REF_SRC"},
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
