//! docs/policy.md `sandbox.user` and docs/sandbox.md: Landlock does not govern mode, owner, timestamps
//! or extended attributes. A daemon that is not root runs tools under its own uid,
//! so seccomp refuses the path-based changes for every path — a tool cannot open up
//! the daemon's own files — while the fd-based ones (for files it could open for
//! writing) stay; a read-only process may change none by path either.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::common::sandbox;
use crate::common::{TestRoot, chown_tree, stderr, stdout};

/// Mode and mtime of a file, to compare before and after.
fn stamp(path: &Path) -> (u32, i64, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.mode(), m.mtime(), m.mtime_nsec())
}

const PY_METADATA: &str = r#"
import os
for name, f in [
    ("chmod", lambda: os.chmod("../config/key", 0o644)),
    ("utime", lambda: os.utime("../policies/settings.json", (0, 0))),
    ("utime_now", lambda: os.utime("../policies/settings.json")),
    ("setxattr", lambda: os.setxattr("../policies/settings.json", "user.x", b"1")),
    ("removexattr", lambda: os.removexattr("../policies/settings.json", "user.x")),
    ("chown", lambda: os.chown("../config/key", os.getuid(), os.getgid())),
    ("lchown", lambda: os.lchown("../policies", os.getuid(), os.getgid())),
]:
    try:
        f()
        print(name, "ESCAPED")
    except OSError as e:
        print(name, e.errno == 1)
"#;

#[test]
fn an_unprivileged_daemons_tools_cannot_change_metadata_by_path() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let key = root.dir.join("config/key");
    std::fs::write(&key, "sk-secret").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let uid = 61014;
    chown_tree(&root.dir, uid);
    let guarded = [
        key.clone(),
        root.dir.join("policies"),
        root.dir.join("policies/settings.json"),
    ];
    let before: Vec<_> = guarded.iter().map(|p| stamp(p)).collect();
    for attempt in [
        "chmod 644 ../config/key",
        "chmod 777 ../policies",
        "touch -d 2000-01-01 ../policies/settings.json",
        "echo > x && chmod +x x",
    ] {
        let out = sandbox::bash(&root, false, Some(uid), attempt);
        assert_ne!(out.status.code(), Some(0), "{attempt} succeeded");
    }
    let out = sandbox::run(&root, false, Some(uid), &["python3", "-c", PY_METADATA]);
    assert_eq!(
        stdout(&out),
        "chmod True\nutime True\nutime_now True\nsetxattr True\nremovexattr True\n\
         chown True\nlchown True\n",
        "{}",
        stderr(&out)
    );
    let after: Vec<_> = guarded.iter().map(|p| stamp(p)).collect();
    assert_eq!(before, after, "a guarded file's mode or mtime changed");
    let x = std::fs::metadata(root.workspace().join("x")).unwrap();
    assert_eq!(x.mode() & 0o111, 0, "chmod +x worked in the workspace");
    // open + futimens: touch still creates and updates workspace files.
    let out = sandbox::bash(&root, false, Some(uid), "touch newfile && touch newfile");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(root.workspace().join("newfile").exists());
    // check says what it costs.
    use std::os::unix::process::CommandExt;
    let check = root.command(&["check"]).uid(uid).gid(uid).output().unwrap();
    assert!(
        stdout(&check).contains("metadata   path-based chmod/chown/utimes/setxattr refused")
            && stdout(&check).contains("`chmod +x` in the workspace fails"),
        "{}",
        stdout(&check)
    );
}

#[test]
fn a_read_only_process_cannot_change_metadata_by_path_as_root() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let f = root.workspace().join("f");
    std::fs::write(&f, "x").unwrap();
    // The tool uid may write it (as any workspace file, through its ACL): only
    // the filter stops the timestamp change.
    let out = sandbox::bash(&root, false, None, "touch f && echo y > g && chmod +x g");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let before = (stamp(&f), stamp(&root.workspace().join("g")));
    std::thread::sleep(std::time::Duration::from_millis(20));
    for attempt in ["touch f", "touch -d 2000-01-01 f", "chmod 600 g"] {
        let out = sandbox::bash(&root, true, None, attempt);
        assert_ne!(out.status.code(), Some(0), "{attempt} succeeded");
    }
    assert_eq!(before, (stamp(&f), stamp(&root.workspace().join("g"))));
    // As root the write profile is as before: the tool's own files are its to chmod.
    let out = sandbox::bash(&root, false, None, "chmod 600 g && stat -c %a g");
    assert_eq!(stdout(&out), "600\n", "{}", stderr(&out));
    let check = root.run(&["check"]);
    assert!(
        !stdout(&check).contains("metadata   "),
        "{}",
        stdout(&check)
    );
}
