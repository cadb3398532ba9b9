//! MCP servers for the tests: the hostile stdlib server of tests/fixtures/mcp and
//! the real reference servers `tests/fixtures/mcp/install.sh` installs (npm and
//! PyPI), each configured into a test root with the read set it needs.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::TestRoot;

/// Where install.sh put the reference servers.
pub fn installed() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("HARNESSD_TEST_MCP").unwrap_or_else(|_| "/opt/harnessd-test/mcp".into()),
    );
    assert!(
        dir.join("venv/.done").exists() && dir.join("npm").exists(),
        "the MCP test servers are not installed in {}: run tests/fixtures/mcp/install.sh \
         (.ci/run does)",
        dir.display()
    );
    dir
}

/// A directory of the root the tool uid may read (and, for `state`, write).
fn shared_dir(root: &TestRoot, name: &str, mode: u32) -> PathBuf {
    let dir = root.dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

/// Adds server `name` with `config` to the root's settings.
pub fn add_server(root: &TestRoot, name: &str, config: Value) {
    root.edit_settings(|s| {
        s["mcp"]["servers"][name] = config;
    });
}

/// Installs the hostile server in the root as server `hostile` (its run counter
/// in `<root>/mcp-state/runs`, passed through the daemon variable
/// `HOSTILE_STATE_SRC`, which the test sets); returns the state file's path.
pub fn hostile(root: &TestRoot, extra: Value) -> PathBuf {
    let code = shared_dir(root, "mcp-code", 0o755);
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/hostile.py");
    let script = code.join("hostile.py");
    std::fs::copy(src, &script).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let state = shared_dir(root, "mcp-state", 0o777);
    let mut config = json!({
        "command": ["python3", script.display().to_string()],
        "read": [code.display().to_string()],
        "write": [state.display().to_string()],
        "env": {"HOSTILE_STATE": "HOSTILE_STATE_SRC"},
    });
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    add_server(root, "hostile", config);
    state.join("runs")
}

/// The reference server "everything" (node), with what node needs to read.
pub fn everything(root: &TestRoot) {
    let dir = installed().join("npm");
    let main = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    add_server(
        root,
        "everything",
        json!({
            "command": ["node", main.display().to_string(), "stdio"],
            "read": [dir.display().to_string(), "/etc/ssl/openssl.cnf"],
            "env": {"EVERYTHING_TOKEN": "EVERYTHING_TOKEN_SRC"},
        }),
    );
    // V8 reserves more address space than the default 1024 MiB (docs/mcp.md).
    root.edit_settings(|s| s["sandbox"]["memory_mb"] = json!(2048));
}

/// The reference servers `time` and `git` (python, from PyPI, in the venv); git's
/// repository is `workspace/repo`.
pub fn python_servers(root: &TestRoot) {
    let venv = installed().join("venv");
    let python = venv.join("bin/python").display().to_string();
    add_server(
        root,
        "time",
        json!({"command": [python, "-m", "mcp_server_time", "--local-timezone", "UTC"], "read": [venv.display().to_string()]}),
    );
    let repo = root.workspace().join("repo");
    add_server(
        root,
        "git",
        json!({
            "command": [python, "-m", "mcp_server_git", "--repository", repo.display().to_string()],
            "read": [venv.display().to_string()],
        }),
    );
}

/// The text of a tool_result block.
pub fn text(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The names of the tools a recorded request offered.
pub fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

/// Violations of docs/mcp.lock.schema.json by the root's lock file (which must exist).
pub fn lock_violations(root: &TestRoot) -> Option<String> {
    let text = std::fs::read_to_string(root.dir.join("policies/mcp.lock.json")).unwrap();
    let lock: Value = serde_json::from_str(&text).unwrap();
    let schema: Value =
        serde_json::from_str(include_str!("../../../docs/mcp.lock.schema.json")).unwrap();
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler
        .add_resource("file:///mcp.lock.schema.json", schema)
        .unwrap();
    let index = compiler
        .compile("file:///mcp.lock.schema.json", &mut schemas)
        .unwrap();
    schemas
        .validate(&lock, index)
        .err()
        .map(|e| format!("{e:#}"))
}
