//! The workspace's `AGENTS.md`: in the system prompt after the operator's,
//! labelled as the workspace's; cut past 32 KiB at a character boundary with the
//! marker; the whole file's sha256 in `task_started`; a symbolic link not followed.

use serde_json::Value;

use crate::audit::sha256_hex;
use crate::common::{FakeApi, Reply, TestRoot, stderr};

/// Runs one task; returns the first request's system prompt and `task_started`.
fn first_prompt(setup: impl FnOnce(&TestRoot)) -> (TestRoot, String, Value) {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    setup(&root);
    let out = root.run(&["run", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let prompt = api.requests()[0].body["system"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let started = root.events_of("task_started")[0].clone();
    (root, prompt, started)
}

#[test]
fn agents_md_follows_the_operators_prompt_labelled_and_recorded() {
    let content = "Always run the tests with `make check`.\n";
    let (_root, prompt, started) = first_prompt(|r| {
        r.set_config("api", "system_prompt_file", "\"config/operator.md\"");
        std::fs::write(r.dir.join("config/operator.md"), "OPERATOR RULES FIRST\n").unwrap();
        std::fs::write(r.workspace().join("AGENTS.md"), content).unwrap();
    });
    assert!(prompt.starts_with("OPERATOR RULES FIRST"), "{prompt}");
    let label = prompt.find("# Workspace instructions (AGENTS.md)").unwrap();
    let body = prompt.find("Always run the tests").unwrap();
    assert!(label < body, "{prompt}");
    assert!(prompt[label..].contains("ranks below"), "{prompt}");
    assert_eq!(started["agents_md_sha256"], sha256_hex(content.as_bytes()));
}

#[test]
fn a_long_agents_md_is_cut_at_a_character_boundary_with_the_marker() {
    // 1 + 2 × 20 000 bytes, then a tail: byte 32 768 falls inside an "é".
    let content = format!("a{}TAIL-NOT-SENT", "é".repeat(20_000));
    let (_root, prompt, started) = first_prompt(|r| {
        std::fs::write(r.workspace().join("AGENTS.md"), &content).unwrap();
    });
    let head = format!("a{}", "é".repeat(16_383));
    let omitted = 20_000 - 16_383 + "TAIL-NOT-SENT".len();
    let want = format!("{head}\n[… {omitted} chars omitted …]");
    assert!(prompt.contains(&want), "no cut head + marker");
    assert!(
        !prompt.contains(&format!("{head}é")),
        "more than 32 KiB sent"
    );
    assert!(!prompt.contains("TAIL-NOT-SENT"));
    assert_eq!(started["agents_md_sha256"], sha256_hex(content.as_bytes()));
}

#[test]
fn a_symlinked_agents_md_is_not_read() {
    let (root, prompt, started) = first_prompt(|r| {
        let outside = r.dir.join("outside.md");
        std::fs::write(&outside, "SECRET-INSTRUCTIONS\n").unwrap();
        std::os::unix::fs::symlink(&outside, r.workspace().join("AGENTS.md")).unwrap();
    });
    assert!(!prompt.contains("SECRET-INSTRUCTIONS"), "{prompt}");
    assert!(!prompt.contains("Workspace instructions"), "{prompt}");
    assert!(started.get("agents_md_sha256").is_none(), "{started}");
    let out = root
        .command(&["check"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("AGENTS.md: a symbolic link, which is not followed"),
        "{}",
        stderr(&out)
    );
}
