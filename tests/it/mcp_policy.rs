//! MCP tools under the tiers, through the real binary: a bad `mcp` section or lock
//! file is refused with its file, line and key; `policy test` and `replay` decide
//! MCP calls from the root's settings and lock file. No server is started.

use serde_json::{Value, json};

use harnessd::config::{lock_file, pin_server, save_pins};
use harnessd::protocol::mcp::{PinFile, ToolAnnotations, ToolDefinition};

use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

fn def(name: &str, properties: &[&str], destructive: bool) -> ToolDefinition {
    let props: serde_json::Map<String, Value> = properties
        .iter()
        .map(|p| (p.to_string(), json!({"type": "string"})))
        .collect();
    ToolDefinition {
        name: name.into(),
        title: None,
        description: Some(format!("the {name} tool")),
        input_schema: json!({"type": "object", "properties": props}),
        output_schema: None,
        annotations: destructive.then(|| ToolAnnotations {
            destructive_hint: Some(true),
            ..ToolAnnotations::default()
        }),
    }
}

/// A root with [`add_git`].
fn root_with_git(api_url: &str) -> TestRoot {
    let root = TestRoot::new(api_url);
    add_git(&root);
    root
}

/// Adds a `git` server (never started) and pins its `git_log`, `git_reset`
/// (destructive) and `git_push` in the root's lock file.
fn add_git(root: &TestRoot) {
    root.edit_settings(|s| {
        s["mcp"] = json!({"servers": {"git": {"command": ["/bin/false"]}}});
    });
    let mut pins = PinFile::default();
    pin_server(
        &mut pins,
        "git",
        &[
            def("git_log", &["repo_path", "max_count"], false),
            def("git_reset", &["repo_path"], true),
            def("git_push", &["remote"], false),
        ],
    );
    save_pins(&lock_file(&root.dir), &pins).unwrap();
}

fn set_rules(root: &TestRoot, deny: &[&str], ask: &[&str], allow: &[&str]) {
    root.edit_settings(|s| {
        s["tools"]["deny"] = json!(deny);
        s["tools"]["ask"] = json!(ask);
        s["tools"]["allow"] = json!(allow);
    });
}

/// (exit code, the JSON report) of `policy test --json TOOL INPUT`.
fn policy_test(root: &TestRoot, tool: &str, input: &str) -> (Option<i32>, Value) {
    let out = root.run(&["policy", "test", "--json", tool, input]);
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), report)
}

/// The 1-based line and column where `needle` starts in `text`.
fn position(text: &str, needle: &str) -> (usize, usize) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle} in {text}"));
    let line = text[..at].matches('\n').count() + 1;
    let column = text[..at].rfind('\n').map_or(at, |nl| at - nl - 1) + 1;
    (line, column)
}

#[test]
fn policy_test_decides_mcp_calls_with_the_lock_file() {
    let root = root_with_git("http://127.0.0.1:9");
    set_rules(
        &root,
        &["mcp__git__git_push", "mcp__git__git_log(repo_path=/etc*)"],
        &["mcp__git"],
        &[
            "mcp__git__git_log(repo_path=workspace/*, !)",
            "mcp__git__git_reset",
        ],
    );
    let (code, v) = policy_test(
        &root,
        "mcp__git__git_log",
        r#"{"repo_path": "workspace/r"}"#,
    );
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["rule"], "mcp__git__git_log(repo_path=workspace/*, !)");
    assert_eq!(v["server"], "git");
    assert_eq!(
        v["pinned"],
        def("git_log", &["repo_path", "max_count"], false).sha256()
    );
    // One more key: the closed pattern no longer applies, the server rule asks.
    let input = r#"{"repo_path": "workspace/r", "max_count": "3"}"#;
    let (code, v) = policy_test(&root, "mcp__git__git_log", input);
    assert_eq!(
        (code, v["rule"].as_str()),
        (Some(3), Some("mcp__git")),
        "{v}"
    );
    // A deny key pattern beats the allow.
    let (code, v) = policy_test(&root, "mcp__git__git_log", r#"{"repo_path": "/etc/x"}"#);
    assert_eq!(code, Some(4), "{v}");
    assert_eq!(v["rule"], "mcp__git__git_log(repo_path=/etc*)");
    let (code, v) = policy_test(&root, "mcp__git__git_push", r#"{"remote": "origin"}"#);
    assert_eq!(
        (code, v["rule"].as_str()),
        (Some(4), Some("mcp__git__git_push"))
    );
    // Allowed, but the server marks it destructive: asked.
    let (code, v) = policy_test(&root, "mcp__git__git_reset", "{}");
    assert_eq!(code, Some(3), "{v}");
    assert_eq!(v["raised"], "the server marks git_reset destructive");
    // Not pinned: denied whatever the rules say.
    let (code, v) = policy_test(&root, "mcp__git__git_status", "{}");
    assert_eq!(
        (code, v["rule"].as_str()),
        (Some(4), Some("mcp:unpinned")),
        "{v}"
    );
    // The text report names the rule and the pin.
    let out = root.run(&[
        "policy",
        "test",
        "mcp__git__git_log",
        r#"{"repo_path": "workspace/r"}"#,
    ]);
    let text = stdout(&out);
    assert!(
        text.starts_with("allow  (rule: mcp__git__git_log(repo_path=workspace/*, !))\n"),
        "{text}"
    );
    assert!(text.contains("pinned: sha256 "), "{text}");
    // Unknown server, input that is not an object: not judged.
    let out = root.run(&["policy", "test", "mcp__nope__x", "{}"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown MCP server \"nope\""),
        "{}",
        stderr(&out)
    );
    let out = root.run(&["policy", "test", "mcp__git__git_log", "workspace/r"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("a JSON object"), "{}", stderr(&out));
}

#[test]
fn a_bad_mcp_section_is_refused_with_file_line_and_key() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("api", "api_key_env", "\"MY_KEY\"");
    root.edit_settings(|s| {
        s["mcp"] =
            json!({"servers": {"git": {"command": ["git-mcp"], "env": {"TOKEN": "MY_KEY"}}}});
    });
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let text = std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap();
    let (line, column) = position(&text, "\"MY_KEY\"");
    let err = stderr(&out);
    let at = format!("policies/settings.json:{line}:{column}: key `mcp.servers.git.env.TOKEN`");
    assert!(err.contains(&at) && err.contains("API key"), "{err}");
    // A rule naming a key the pinned schema does not have.
    let root = root_with_git("http://127.0.0.1:9");
    set_rules(&root, &["mcp__git__git_log(path=*)"], &[], &[]);
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("key `tools.deny[0]`") && err.contains("not a property of git_log"),
        "{err}"
    );
    // A lock file of another format.
    let root = root_with_git("http://127.0.0.1:9");
    let lock = lock_file(&root.dir);
    let text = std::fs::read_to_string(&lock)
        .unwrap()
        .replace("\"version\": 1", "\"version\": 9");
    std::fs::write(&lock, &text).unwrap();
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let (line, column) = position(&text, "\"version\": 9");
    let column = column + "\"version\": ".len();
    let err = stderr(&out);
    let at = format!("policies/mcp.lock.json:{line}:{column}: key `version`");
    assert!(err.contains(&at), "{err}");
}

#[test]
fn replay_decides_recorded_mcp_calls() {
    let input = json!({"repo_path": "workspace/r"});
    let api = FakeApi::start(vec![
        Reply::tools(&[("m1", "mcp__git__git_log", input.clone())]),
        Reply::text("done"),
    ]);
    // Recorded with no server configured; judged with one, pinned.
    let root = TestRoot::new(&api.url);
    root.run(&["run", "x"]);
    add_git(&root);
    set_rules(
        &root,
        &[],
        &[],
        &["mcp__git__git_log(repo_path=workspace/*)"],
    );
    let replay = |root: &TestRoot| {
        let out = root.run(&["replay", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let changed = v["changed"].as_array().unwrap().clone();
        changed
            .into_iter()
            .find(|c| c["tool_use_id"] == "m1")
            .map(|c| c["now"].as_str().unwrap_or("").to_string())
    };
    assert_eq!(
        replay(&root).as_deref(),
        Some("allow (mcp__git__git_log(repo_path=workspace/*))")
    );
    set_rules(&root, &["mcp__git"], &[], &[]);
    assert_eq!(replay(&root).as_deref(), Some("deny (mcp__git)"));
}

/// The shipped settings schema covers `mcp`: editors accept the documented
/// servers and flag a bad server name or an unknown key, as harnessd does.
#[test]
fn the_settings_schema_covers_mcp() {
    let schema: Value =
        serde_json::from_str(include_str!("../../policies/settings.schema.json")).unwrap();
    let mut compiler = boon::Compiler::new();
    let mut schemas = boon::Schemas::new();
    compiler
        .add_resource("file:///settings.schema.json", schema)
        .unwrap();
    let index = compiler
        .compile("file:///settings.schema.json", &mut schemas)
        .unwrap();
    let valid = |mcp: Value| schemas.validate(&json!({ "mcp": mcp }), index).is_ok();
    assert!(valid(json!({"timeout_secs": 30, "servers": {
        "git": {"command": ["python3", "-m", "mcp_server_git"]},
        "every-thing_2": {"command": ["node", "x.js"], "env": {"T": "V"}, "network": false,
                          "read": ["/usr/lib/node_modules"], "write": [], "shared": true, "timeout_secs": 5},
        "remote": {"url": "https://mcp.example.com/mcp", "headers_env": {"Authorization": "V"},
                   "headers_file": {"X-Key": "/run/k"}}
    }})));
    for bad in ["Git", "a__b", "x_", "_x", "a.b"] {
        assert!(
            !valid(json!({"servers": {bad: {"command": ["x"]}}})),
            "{bad}"
        );
    }
    assert!(!valid(
        json!({"servers": {"git": {"command": ["x"], "cmd": 1}}})
    ));
    assert!(!valid(json!({"servers": {"git": {"command": "x"}}})));
    assert!(!valid(json!({"timeout": 1})));
}
