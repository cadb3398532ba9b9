//! `serve` as root leaves the owner of the operator's files alone
//! and still lets tools (running as `nobody`) edit them, through POSIX ACLs —
//! also for files the operator adds after the start — while a hard link to a file
//! outside the workspace gets nothing.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr};

fn assert_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "CI runs as root; this test needs it"
    );
}

/// The raw value of extended attribute `name` of `p` (links not followed).
pub fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let path = CString::new(p.as_os_str().as_bytes()).unwrap();
    let name = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: NUL-terminated strings; `buf` is valid for its length.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    buf.truncate(usize::try_from(n).ok()?);
    Some(buf)
}

/// The perm of the first entry with `tag` (and `id`, for named entries) in the
/// access ACL of `p`, decoded by hand (version 2 header, then 8-byte entries of
/// tag, perm, id) so the test does not trust harnessd's encoder.
fn acl_perm(p: &Path, tag: u16, id: Option<u32>) -> Option<u16> {
    let value = xattr(p, "system.posix_acl_access")?;
    assert_eq!(value[..4], 2u32.to_le_bytes(), "{}", p.display());
    value[4..].chunks_exact(8).find_map(|e| {
        let t = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let i = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        (t == tag && id.is_none_or(|id| id == i)).then_some(perm)
    })
}

/// What `uid` is granted on `p` by a named entry, within the mask.
fn granted(p: &Path, uid: u32) -> u16 {
    let named = acl_perm(p, 0x02, Some(uid)).unwrap_or(0);
    named & acl_perm(p, 0x10, None).unwrap_or(0)
}

/// Owner, group and mode of everything under `ws` but `.tmp`.
fn snapshot(ws: &Path) -> BTreeMap<PathBuf, (u32, u32, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![ws.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        out.insert(p.clone(), (m.uid(), m.gid(), m.mode() & 0o7777));
        if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                let e = e.unwrap();
                if e.file_name() != ".tmp" {
                    stack.push(e.path());
                }
            }
        }
    }
    out
}

/// A root whose policy runs `run_bash` without asking, each command in `cmds` one
/// turn, then an answer.
fn root_running(cmds: &[&str]) -> (FakeApi, TestRoot) {
    let mut script: Vec<Reply> = cmds
        .iter()
        .enumerate()
        .map(|(i, c)| Reply::tool(&format!("b{i}"), "run_bash", json!({"command": c})))
        .collect();
    script.push(Reply::text("done"));
    let api = FakeApi::start(script);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["ask"] = json!([]);
        s["tools"]["allow"] = json!(["run_bash"]);
    });
    (api, root)
}

/// The text of the tool result the model got in request `n`.
fn result(api: &FakeApi, n: usize) -> (bool, String) {
    let r: Value = last_results(&api.requests()[n].body)[0].clone();
    let text = r["content"].as_str().unwrap_or_default().to_string();
    (r["is_error"] == true, text)
}

fn mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

#[test]
fn serve_keeps_owners_and_a_tool_still_edits_and_creates() {
    assert_root();
    let (api, root) = root_running(&[
        "id -u && echo tool >> scores.csv && echo made > sub/new.txt && mkdir sub/dir",
    ]);
    let ws = root.workspace();
    mode(&ws.join("scores.csv"), 0o644);
    std::fs::create_dir(ws.join("sub")).unwrap();
    mode(&ws.join("sub"), 0o755);
    std::fs::write(ws.join("sub/data.txt"), "x").unwrap();
    mode(&ws.join("sub/data.txt"), 0o640);
    let before = snapshot(&ws);
    let d = Daemon::start(&root);
    let id = d.submit("edit");
    d.wait_finished(&id);
    let (is_error, text) = result(&api, 1);
    assert!(!is_error, "{text}");
    // sandbox.user "auto": the root's own uid, not nobody's.
    let tool = root.tool_uid();
    assert_ne!(tool, 65534);
    assert!(text.contains(&format!("stdout:\n{tool}\n")), "{text}");
    assert!(
        std::fs::read_to_string(ws.join("scores.csv"))
            .unwrap()
            .ends_with("tool\n")
    );
    let new = std::fs::metadata(ws.join("sub/new.txt")).unwrap();
    assert_eq!((new.uid(), new.gid()), (tool, tool));
    for (p, (uid, gid, m)) in &before {
        let now = std::fs::symlink_metadata(p).unwrap();
        assert_eq!((now.uid(), now.gid()), (*uid, *gid), "{}", p.display());
        // Owner and other bits as they were; the group bits of an inode with an
        // ACL show its mask, and the owning group keeps its own permission.
        assert_eq!(now.mode() & 0o7707, m & 0o7707, "{}", p.display());
        let group = u32::from(acl_perm(p, 0x04, None).unwrap());
        assert_eq!(group, (m >> 3) & 0o7, "{}", p.display());
        let want = if now.is_dir() { 0o7 } else { 0o6 };
        assert_eq!(granted(p, tool), want, "{}", p.display());
    }
    drop(d);
}

#[test]
fn a_file_the_operator_adds_after_the_start_is_editable_by_a_tool() {
    assert_root();
    let (api, root) = root_running(&[
        "echo tool >> later.txt && echo tool >> sub/later.txt && touch sub/deeper/made",
    ]);
    let ws = root.workspace();
    std::fs::create_dir(ws.join("sub")).unwrap();
    mode(&ws.join("sub"), 0o755);
    let d = Daemon::start(&root);
    // Added by the operator (root, umask 022) once serve has started.
    std::fs::write(ws.join("later.txt"), "op\n").unwrap();
    std::fs::write(ws.join("sub/later.txt"), "op\n").unwrap();
    std::fs::create_dir(ws.join("sub/deeper")).unwrap();
    let id = d.submit("edit");
    d.wait_finished(&id);
    let (is_error, text) = result(&api, 1);
    assert!(!is_error, "{text}");
    for rel in ["later.txt", "sub/later.txt"] {
        let p = ws.join(rel);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "op\ntool\n", "{rel}");
        assert_eq!(std::fs::metadata(&p).unwrap().uid(), 0, "{rel}");
    }
    assert_eq!(std::fs::metadata(ws.join("sub/deeper")).unwrap().uid(), 0);
    assert!(ws.join("sub/deeper/made").exists());
    drop(d);
}

/// Removes the test's hard link and any ACL the link let harnessd put on the file
/// it shares an inode with, even when the test fails.
struct Planted(PathBuf);

impl Drop for Planted {
    fn drop(&mut self) {
        let path = CString::new(self.0.as_os_str().as_bytes()).unwrap();
        for name in [c"system.posix_acl_access", c"system.posix_acl_default"] {
            // SAFETY: NUL-terminated strings.
            unsafe { libc::lremovexattr(path.as_ptr(), name.as_ptr()) };
        }
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_hard_link_to_etc_shadow_planted_in_the_workspace_gets_no_acl() {
    assert_root();
    let shadow = Path::new("/etc/shadow");
    let before = std::fs::metadata(shadow).unwrap();
    let acl_before = xattr(shadow, "system.posix_acl_access");
    let (api, root) = root_running(&["cat shadow && echo ESCAPED"]);
    let link = Planted(root.workspace().join("shadow"));
    // The same filesystem as the test roots here; otherwise there is nothing to test.
    std::fs::hard_link(shadow, &link.0).expect("/etc and the temp dir share a filesystem");
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (is_error, text) = result(&api, 1);
    assert!(is_error && !text.contains("ESCAPED"), "{text}");
    assert_eq!(xattr(shadow, "system.posix_acl_access"), acl_before);
    assert!(stderr(&out).contains("hard links"), "{}", stderr(&out));
    let after = std::fs::metadata(shadow).unwrap();
    assert_eq!(
        (after.uid(), after.gid(), after.mode()),
        (before.uid(), before.gid(), before.mode())
    );
}

#[test]
fn without_acls_the_tree_is_given_to_the_tool_user_with_a_warning_naming_the_filesystem() {
    assert_root();
    let root = TestRoot::new("http://127.0.0.1:9");
    let ws = root.workspace();
    // ramfs has no extended attributes at all; mounted in a mount namespace of
    // the command's own, so nothing outside the test sees it.
    let script = format!(
        "mount -t ramfs ramfs '{ws}' && echo op > '{ws}/f' && exec '{bin}' --root '{root}' \
         sandbox -- bash -c 'echo tool >> f && stat -c %u f && cat f'",
        ws = ws.display(),
        bin = crate::common::bin(),
        root = root.dir.display(),
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let tool = root.tool_uid();
    assert_eq!(crate::common::stdout(&out), format!("{tool}\nop\ntool\n"));
    assert!(
        err.contains("ramfs mounted at") && err.contains("does not support POSIX ACLs"),
        "{err}"
    );
}

/// A directory of the same filesystem bind-mounted into the workspace (an
/// operator's shortcut to /etc, say) has the workspace's device: only the mount id
/// tells it apart, and it must get no ACL for the tool user.
#[test]
fn a_bind_mount_inside_the_workspace_gets_no_acl() {
    assert_root();
    let root = TestRoot::new("http://127.0.0.1:9");
    let ws = root.workspace();
    let outside = root.dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "s").unwrap();
    std::fs::create_dir_all(ws.join("bound")).unwrap();
    // In a mount namespace of the command's own: nothing outside the test sees it.
    let script = format!(
        "mount --bind '{outside}' '{ws}/bound' && exec '{bin}' --root '{root}' \
         sandbox -- true",
        outside = outside.display(),
        ws = ws.display(),
        bin = crate::common::bin(),
        root = root.dir.display(),
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The mount is gone with its namespace; the files under it are the outside ones.
    let tool = root.tool_uid();
    for p in [outside.clone(), outside.join("secret")] {
        assert_eq!(
            granted(&p, tool),
            0,
            "{} was opened to the tool user",
            p.display()
        );
    }
}
