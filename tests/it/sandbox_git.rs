//! docs/policy.md: every git call trusts the workspace as a safe directory (the tool uid
//! does not own an operator's checkout), and under the read-only profile the
//! programs a repository's own config could make git run are switched off.

use std::path::Path;
use std::process::Command;

use crate::common::sandbox;
use crate::common::{TestRoot, stderr, stdout};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.email=op@example.com", "-c", "user.name=op"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
}

/// A repository at `dir`, owned by root (the operator, not the tool uid), with one
/// commit, a modified file, and a config that runs programs on `git status`.
fn operators_repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "."]);
    std::fs::write(dir.join("a"), "one\n").unwrap();
    git(dir, &["add", "a"]);
    git(dir, &["commit", "-qm", "first"]);
    std::fs::write(dir.join("a"), "two\n").unwrap();
    let hooks = dir.join(".git/evil-hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    git(
        dir,
        &[
            "config",
            "core.fsmonitor",
            "echo FSMON-RAN >&2; touch FSMON",
        ],
    );
    git(dir, &["config", "core.hooksPath", hooks.to_str().unwrap()]);
}

#[test]
fn git_trusts_the_workspace_and_read_only_calls_run_none_of_the_repos_programs() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let ws = root.workspace();
    // The workspace itself a repository, and one below it.
    operators_repo(&ws);
    operators_repo(&ws.join("sub/inner"));
    let index = std::fs::read(ws.join(".git/index")).unwrap();
    for dir in [".", "sub/inner"] {
        let script = format!(
            "cd {dir} && git status --short --untracked-files=no && git log --oneline | wc -l \
             && git config core.hooksPath && git var GIT_PAGER"
        );
        let out = sandbox::bash(&root, true, None, &script);
        assert_eq!(out.status.code(), Some(0), "{dir}: {}", stderr(&out));
        assert_eq!(
            stdout(&out),
            " M a\n1\n/dev/null\ncat\n",
            "{dir}: {}",
            stderr(&out)
        );
        assert!(
            !stderr(&out).contains("dubious ownership"),
            "{}",
            stderr(&out)
        );
        assert!(
            !stderr(&out).contains("FSMON-RAN"),
            "fsmonitor ran in {dir}"
        );
        assert!(!ws.join(dir).join("FSMON").exists());
        assert!(!ws.join(dir).join(".git/index.lock").exists());
    }
    // No optional lock: the index was not rewritten.
    assert_eq!(std::fs::read(ws.join(".git/index")).unwrap(), index);
    // Under the write profile git trusts the workspace too (the repository's own
    // config is then the operator's to answer for: see docs/sandbox.md).
    let out = sandbox::bash(
        &root,
        false,
        None,
        "git status --short --untracked-files=no; cd sub/inner && git status --short --untracked-files=no",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), " M a\n M a\n", "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("dubious ownership"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn git_does_not_trust_a_repository_outside_the_workspace() {
    let root = TestRoot::new("http://127.0.0.1:9");
    // A repository in an allowed read path outside the workspace (beside it).
    let outside = root.dir.join("outside");
    operators_repo(&outside);
    root.edit_settings(|s| {
        s["allowed_paths"]["read"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!("outside"))
    });
    let out = sandbox::bash(&root, true, None, "cd ../outside && git status --short");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("dubious ownership"),
        "{}",
        stderr(&out)
    );
}
