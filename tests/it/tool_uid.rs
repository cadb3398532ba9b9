//! `sandbox.user = "auto"` (the default): each root's tools run as a uid of the
//! root's own, kept in `config/sandbox-uid`, so roots on one host share no files —
//! with `nobody` for both, a tool of one root could chmod the files another
//! root's tools had made. An explicit account name still works.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, stdout, wait_until};

fn assert_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "CI runs as root; this test needs it"
    );
}

/// Runs one task on `root` whose model calls `run_bash` with `cmd` once, allowed
/// without asking, and returns the tool result's text.
fn run_tool(root: &TestRoot, cmd: &str) -> String {
    let api = FakeApi::start(vec![
        Reply::tool("b0", "run_bash", json!({ "command": cmd })),
        Reply::text("done"),
    ]);
    root.set_config("api", "base_url", &format!("{:?}", api.url));
    root.edit_settings(|s| {
        s["tools"]["ask"] = json!([]);
        s["tools"]["allow"] = json!(["run_bash"]);
        // No deny pattern: with one, the `python3 -c` and `$(…)` these tests run
        // would be raised to ask (a deny rule cannot see into them).
        s["tools"]["deny"] = json!([]);
    });
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r: Value = last_results(&api.requests()[1].body)[0].clone();
    r["content"].as_str().unwrap_or_default().to_string()
}

/// The uid a tool printed with `id -u`.
fn printed_uid(text: &str) -> u32 {
    let line = text
        .split("stdout:\n")
        .nth(1)
        .and_then(|s| s.lines().next())
        .unwrap_or_else(|| panic!("no stdout in {text}"));
    line.trim().parse().unwrap_or_else(|_| panic!("{text}"))
}

#[test]
fn two_roots_with_auto_get_uids_of_their_own_that_survive_a_restart() {
    assert_root();
    let (a, b) = (
        TestRoot::new("http://127.0.0.1:9"),
        TestRoot::new("http://127.0.0.1:9"),
    );
    let ua = printed_uid(&run_tool(&a, "id -u"));
    let ub = printed_uid(&run_tool(&b, "id -u"));
    assert_ne!(ua, ub, "two roots share the tool uid {ua}");
    for (root, uid) in [(&a, ua), (&b, ub)] {
        assert!((61184..=65519).contains(&uid), "{uid}");
        assert_eq!(root.tool_uid(), uid, "the tool ran as a uid not kept");
        let kept = std::fs::metadata(root.dir.join("config/sandbox-uid")).unwrap();
        assert_eq!(kept.uid(), 0);
        assert_eq!(
            kept.mode() & 0o022,
            0,
            "tools' uid must not be writable by others"
        );
        let entry = std::fs::read_to_string(format!("/var/lib/harnessd/uids/{uid}")).unwrap();
        assert_eq!(
            Path::new(entry.trim_end()),
            root.dir.canonicalize().unwrap()
        );
    }
    // The next start (a new process) reads it back.
    assert_eq!(printed_uid(&run_tool(&a, "id -u")), ua);
    // `check` says which uid and where it is kept.
    let out = a.run(&["check"]);
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "tool user  uid {ua} (sandbox.user \"auto\"), kept in config/sandbox-uid"
        )),
        "{text}"
    );
}

#[test]
fn a_tool_of_one_root_cannot_chmod_the_files_another_roots_tools_made() {
    assert_root();
    let (a, b) = (
        TestRoot::new("http://127.0.0.1:9"),
        TestRoot::new("http://127.0.0.1:9"),
    );
    let made = b.workspace().join("made.txt");
    run_tool(&b, "echo b > made.txt && chmod 644 made.txt");
    let before = std::fs::metadata(&made).unwrap();
    assert_eq!(before.uid(), b.tool_uid());
    // A may read B's workspace (so Landlock lets the open through): only the
    // distinct uid stands between A's tool and B's file. Path-based and
    // descriptor-based chmod both; with `nobody` for both roots both succeed.
    let path = b.workspace().canonicalize().unwrap();
    a.edit_settings(|s| {
        s["allowed_paths"]["read"]
            .as_array_mut()
            .unwrap()
            .push(json!(path.display().to_string()));
    });
    let file = path.join("made.txt");
    let text = run_tool(
        &a,
        &format!(
            "chmod 000 '{f}'; chmod 777 '{f}'; python3 -c \"import os; \
             os.fchmod(os.open('{f}', os.O_RDONLY), 0o777)\"; echo x >> '{f}'; echo end",
            f = file.display()
        ),
    );
    assert!(text.contains("end"), "{text}");
    assert!(text.contains("Operation not permitted"), "{text}");
    assert!(
        text.contains("PermissionError"),
        "fchmod was not refused: {text}"
    );
    let after = std::fs::metadata(&made).unwrap();
    assert_eq!(
        after.permissions().mode() & 0o7777,
        0o644,
        "root A's tool changed root B's file: {text}"
    );
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "b\n");
}

#[test]
fn an_explicit_nobody_still_runs_tools_as_65534() {
    assert_root();
    let root = TestRoot::new("http://127.0.0.1:9");
    root.edit_settings(|s| s["sandbox"]["user"] = json!("nobody"));
    assert_eq!(printed_uid(&run_tool(&root, "id -u")), 65534);
    assert_eq!(
        root.kept_tool_uid(),
        None,
        "no uid is chosen for an account name"
    );
}

/// The workspace ACLs are granted to the tool uid at start, so a `sandbox.user`
/// edited while the daemon runs is reported as needing a restart and tools keep
/// the uid they started with.
#[test]
fn a_sandbox_user_edited_live_needs_a_restart_and_tools_keep_their_uid() {
    assert_root();
    let api = FakeApi::start(vec![
        Reply::tool("b0", "run_bash", json!({ "command": "id -u" })),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["ask"] = json!([]);
        s["tools"]["allow"] = json!(["run_bash"]);
    });
    let d = Daemon::start(&root);
    let uid = root.tool_uid();
    root.edit_settings(|s| s["sandbox"]["user"] = json!("nobody"));
    wait_until("the edit is loaded", || {
        root.events_of("config_loaded")
            .iter()
            .any(|e| e["trigger"] != "start" && e["restart_needed"] == json!(["sandbox.user"]))
    });
    let id = d.submit("who");
    d.wait_finished(&id);
    let r: Value = last_results(&api.requests()[1].body)[0].clone();
    let text = r["content"].as_str().unwrap_or_default();
    assert_eq!(printed_uid(text), uid, "{text}");
}

/// A host whose `/var/lib/harnessd` is read-only (ProtectSystem=strict without
/// it writable): "auto" still chooses a uid, by the account and process checks,
/// and `check` says the registry could not be used.
#[test]
fn a_read_only_registry_falls_back_and_check_says_so() {
    assert_root();
    let root = TestRoot::new("http://127.0.0.1:9");
    std::fs::create_dir_all("/var/lib/harnessd/uids").unwrap();
    // In a mount namespace of the command's own: nothing outside the test sees it.
    let script = format!(
        "mount --bind /var/lib/harnessd /var/lib/harnessd && \
         mount -o remount,bind,ro /var/lib/harnessd && exec '{bin}' --root '{root}' check",
        bin = crate::common::bin(),
        root = root.dir.display(),
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("ANTHROPIC_API_KEY", crate::common::SECRET_KEY)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let uid = root.tool_uid();
    assert!(
        text.contains(&format!("tool user  uid {uid} ")) && text.contains("unusable"),
        "{text}"
    );
    // Not registered for this root (the registry is the host's: another test's
    // root may hold the same uid there, under its own path).
    let entry = std::fs::read_to_string(format!("/var/lib/harnessd/uids/{uid}"));
    let root_path = root.dir.canonicalize().unwrap();
    assert!(
        entry
            .as_deref()
            .map_or(true, |owner| owner.trim() != root_path.to_string_lossy()),
        "registered for this root: {entry:?}"
    );
}
