//! docs/policy.md "What an allow grants: a read-only process": under the read-only profile
//! a tool reads `read ∪ write` and writes nothing but `/dev/null` and a private
//! tmpfs — whatever the program, whatever its options — while everyday read-only
//! commands still work. Driven through `harnessd sandbox --read-only`, as root and
//! as an unprivileged daemon, with the root under `/tmp` (the tmpfs must mount the
//! workspace back) and outside it.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::json;

use crate::common::sandbox;
use crate::common::{TestRoot, bin, chown_tree, stderr, stdout};

/// A root outside `/tmp`, so the tool's `/tmp` is the tmpfs itself.
fn root_outside_tmp(tag: &str) -> TestRoot {
    let dir = Path::new("/var/tmp").join(format!("harnessd-it-ro-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(bin()).arg("init").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    TestRoot { dir }
}

fn ro(root: &TestRoot, as_uid: Option<u32>, script: &str) -> Output {
    sandbox::run(root, true, as_uid, &["bash", "-c", script])
}

/// Every way of writing the workspace fails with EACCES, and nothing changed.
fn assert_workspace_unwritable(root: &TestRoot, as_uid: Option<u32>) {
    let ws = root.workspace();
    std::fs::write(ws.join("f"), "original\n").unwrap();
    if let Some(uid) = as_uid {
        chown_tree(&root.dir, uid);
    }
    let attempts = [
        "sed -n '1e touch pwned' f",
        "find . -maxdepth 0 -fprintf x '%p'",
        "echo x > f",
        "echo x >> f",
        "rm f",
        "mv f g",
        "mkdir d",
        "ln -s f l",
        "truncate -s 0 f",
        "echo x > .tmp/y",
    ];
    for attempt in attempts {
        let out = ro(root, as_uid, attempt);
        // sed's `e` reports nothing of the command it ran in its own status.
        if !attempt.starts_with("sed") {
            assert_ne!(out.status.code(), Some(0), "{attempt} succeeded");
        }
        assert!(
            stderr(&out).contains("Permission denied"),
            "{attempt}: {}",
            stderr(&out)
        );
    }
    for code in [
        "open('f', 'w')",
        "open('new', 'w')",
        "import os; os.mkdir('d')",
    ] {
        let out = sandbox::run(root, true, as_uid, &["python3", "-c", code]);
        assert_eq!(out.status.code(), Some(1), "{code}");
        assert!(
            stderr(&out).contains("PermissionError"),
            "{code}: {}",
            stderr(&out)
        );
    }
    assert_eq!(std::fs::read_to_string(ws.join("f")).unwrap(), "original\n");
    for name in ["pwned", "x", "g", "d", "l", "new", ".tmp/y"] {
        assert!(!ws.join(name).exists(), "{name} was created");
    }
    // The same writes succeed under the write profile: it is the profile, not the
    // test's setup, that refused them.
    let out = sandbox::bash(root, false, as_uid, "echo x > f && cat f");
    assert_eq!(stdout(&out), "x\n", "{}", stderr(&out));
}

#[test]
fn read_only_profile_cannot_write_the_workspace_as_root() {
    assert_workspace_unwritable(&TestRoot::new("http://127.0.0.1:9"), None);
    assert_workspace_unwritable(&root_outside_tmp("w"), None);
}

#[test]
fn read_only_profile_cannot_write_the_workspace_as_an_unprivileged_daemon() {
    assert_workspace_unwritable(&TestRoot::new("http://127.0.0.1:9"), Some(61012));
}

/// `/tmp` (or what TMPDIR names) is writable, bounded by `tmp_mb` and the call's
/// own: a second call does not see it, nor does the host.
fn assert_private_tmp(root: &TestRoot, as_uid: Option<u32>, expected_tmpdir: &str) {
    root.edit_settings(|s| s["sandbox"]["tmp_mb"] = json!(8));
    if let Some(uid) = as_uid {
        chown_tree(&root.dir, uid);
    }
    let marker = format!("harnessd-ro-marker-{}", std::process::id());
    let out = ro(
        root,
        as_uid,
        &format!(
            "echo $TMPDIR $HOME; echo kept > $TMPDIR/{marker} && cat $TMPDIR/{marker} && \
             head -c 16M /dev/zero > $TMPDIR/fill"
        ),
    );
    assert_eq!(
        stdout(&out),
        format!("{expected_tmpdir} {expected_tmpdir}\nkept\n"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("No space left on device"),
        "{}",
        stderr(&out)
    );
    let out = ro(
        root,
        as_uid,
        &format!("ls -A $TMPDIR; cat $TMPDIR/{marker}"),
    );
    assert_eq!(stdout(&out), "", "the second call saw the first's /tmp");
    assert!(stderr(&out).contains("No such file"), "{}", stderr(&out));
    assert!(!Path::new("/tmp").join(&marker).exists());
    assert!(!Path::new("/tmp/harnessd-tmp").join(&marker).exists());
}

#[test]
fn read_only_profile_has_a_private_bounded_tmp_as_root() {
    let root = root_outside_tmp("t");
    assert_private_tmp(&root, None, "/tmp");
    // A root under /tmp: the workspace is mounted back on the tmpfs, so the
    // writable directory is one beneath it.
    let root = TestRoot::new("http://127.0.0.1:9");
    assert_private_tmp(&root, None, "/tmp/harnessd-tmp");
}

#[test]
fn read_only_profile_has_a_private_bounded_tmp_as_an_unprivileged_daemon() {
    let root = TestRoot::new("http://127.0.0.1:9");
    assert_private_tmp(&root, Some(61013), "/tmp/harnessd-tmp");
}

#[test]
fn everyday_read_only_commands_work_under_the_read_only_profile() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.edit_settings(|s| s["sandbox"]["timeout_secs"] = json!(120));
    let ws = root.workspace();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/x"), "needle\n").unwrap();
    // 50 MB of numbers in reverse order: sort with a 1 MiB buffer must spill into
    // TMPDIR.
    let big: String = (0..5_000_000u32)
        .rev()
        .map(|i| format!("{i:09}\n"))
        .collect();
    std::fs::write(ws.join("big"), big).unwrap();
    let out = ro(
        &root,
        None,
        "set -e; ls -la >/dev/null; cat sub/x; grep -r needle sub; find . -name x; \
         sort -S 1M big | head -1; du -sh sub | cut -f2; df . >/dev/null; echo done",
    );
    assert_eq!(
        stdout(&out),
        "needle\nsub/x:needle\n./sub/x\n000000000\nsub\ndone\n",
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_read_only_profile_whose_tmp_cannot_be_made_is_refused_when_full() {
    // As an unprivileged daemon, an allowed path under /tmp that the daemon cannot
    // reach cannot be mounted back on the tmpfs: the profile cannot be had.
    let root = TestRoot::new("http://127.0.0.1:9");
    let closed = Path::new("/tmp").join(format!("harnessd-it-closed-{}", std::process::id()));
    std::fs::create_dir_all(closed.join("inner")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let inner = closed.join("inner").display().to_string();
    root.edit_settings(|s| {
        s["allowed_paths"]["read"]
            .as_array_mut()
            .unwrap()
            .push(json!(inner))
    });
    let uid = 61015;
    chown_tree(&root.dir, uid);
    let out = ro(&root, Some(uid), "touch ran");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("profile cannot be enforced"),
        "{}",
        stderr(&out)
    );
    // best_effort runs it, and it is still read-only.
    root.edit_settings(|s| s["sandbox"]["require"] = json!("best_effort"));
    chown_tree(&root.dir, uid);
    let out = ro(&root, Some(uid), "echo x > /dev/null && touch ran");
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    assert!(!root.workspace().join("ran").exists());
    let _ = std::fs::remove_dir_all(&closed);
}

#[test]
fn check_reports_the_read_only_profile_as_this_host_gives_it() {
    let root = root_outside_tmp("c");
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "  yes profile         read-only: writes only /dev/null and a private 256 MiB /tmp\n"
        ),
        "{}",
        stdout(&out)
    );
    // As an unprivileged daemon, in its user namespace.
    let root = TestRoot::new("http://127.0.0.1:9");
    chown_tree(&root.dir, 61016);
    use std::os::unix::process::CommandExt;
    let out = root
        .command(&["check"])
        .uid(61016)
        .gid(61016)
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("  yes profile         read-only: writes only /dev/null"),
        "{}",
        stdout(&out)
    );
}
