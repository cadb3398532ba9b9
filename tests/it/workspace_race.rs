//! docs/sandbox.md, docs/api.md against a hostile tool, through the real binary as root: nothing
//! a tool leaves in the workspace (a swapped directory, a planted `.tmp`) makes
//! harnessd act outside it or stops it from starting; the socket directory is
//! checked at start; and a tool's uid gets 403 from the control API even when the
//! socket's mode would let it in.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, chown_tree, stderr, stdout};
use crate::workspace_owners::xattr;

/// `nobody`'s uid (and gid): a stranger to the API, or the explicit sandbox.user.
const NOBODY: u32 = 65534;

pub(crate) fn assert_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "CI runs as root; this test needs it"
    );
}

/// A directory outside every test root, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        Scratch(crate::common::fresh_dir(&format!("harnessd-it-{tag}-")))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every entry under `dir` (itself included, links not followed) whose owner is
/// not `uid:gid` or that has an ACL.
fn not_owned_by(dir: &Path, uid: u32, gid: u32) -> Vec<String> {
    let mut bad = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.uid() != uid || m.gid() != gid {
            bad.push(format!("{} ({}:{})", p.display(), m.uid(), m.gid()));
        }
        for acl in ["system.posix_acl_access", "system.posix_acl_default"] {
            if xattr(&p, acl).is_some() {
                bad.push(format!("{} ({acl})", p.display()));
            }
        }
        if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    bad
}

fn cstring(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Swaps `a` and `b` atomically, as a tool can inside its workspace.
fn exchange(a: &CString, b: &CString) -> bool {
    // SAFETY: two valid NUL-terminated paths; renameat2 only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    r == 0
}

#[test]
fn a_rename_exchange_race_never_makes_root_change_access_outside_the_workspace() {
    assert_root();
    let root = TestRoot::new("http://127.0.0.1:9");
    // Files only root owns, outside the workspace, a level deep too.
    let outside = Scratch::new("outside");
    std::fs::create_dir_all(outside.0.join("sub")).unwrap();
    for i in 0..64 {
        std::fs::write(outside.0.join(format!("f{i}")), "root's").unwrap();
        std::fs::write(outside.0.join(format!("sub/g{i}")), "root's").unwrap();
    }
    assert!(not_owned_by(&outside.0, 0, 0).is_empty());
    // In the workspace: directories with content, each paired with a symlink to the
    // outside directory, at the top level and one level down.
    let ws = root.workspace();
    let mut pairs = Vec::new();
    for (dir, link) in [("d", "l"), ("n/m", "n/k")] {
        let d = ws.join(dir);
        std::fs::create_dir_all(d.join("inner")).unwrap();
        for i in 0..16 {
            std::fs::write(d.join(format!("w{i}")), "tool's").unwrap();
        }
        std::os::unix::fs::symlink(&outside.0, ws.join(link)).unwrap();
        pairs.push((cstring(&d), cstring(&ws.join(link))));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (a, b) in &pairs {
                    swaps += u64::from(exchange(a, b));
                }
            }
            swaps
        })
    };
    let mut failed = Vec::new();
    for i in 0..40 {
        let out = root.run(&["sandbox", "--", "true"]);
        if !out.status.success() {
            failed.push(format!("start {i}: {:?}: {}", out.status, stderr(&out)));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = flipper.join().unwrap();
    assert!(swaps > 0, "the flipper never swapped anything");
    let changed = not_owned_by(&outside.0, 0, 0);
    assert!(
        changed.is_empty(),
        "root changed the owner or ACL of files outside the workspace ({swaps} swaps):\n{}",
        changed.join("\n")
    );
    assert!(
        failed.is_empty(),
        "a swapping tool stopped harnessd from starting:\n{}",
        failed.join("\n")
    );
}

/// One request over `socket` by a process running as `uid:gid` (curl under
/// setpriv). With `init_groups` it gets the supplementary groups of the account
/// named by `uid`, as a login would; otherwise none. Returns the status and the body
/// (JSON, else Null), or `None` when the connection itself was refused.
pub(crate) fn request_as(
    uid: u32,
    gid: u32,
    init_groups: bool,
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Option<(u16, Value)> {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg(if init_groups {
            "--init-groups"
        } else {
            "--clear-groups"
        })
        .args(["--", "curl", "-sS", "--max-time", "10", "-o", "-"])
        .args(["-w", "\n%{http_code}", "-X", method, "--unix-socket"])
        .arg(socket);
    if let Some(b) = body {
        cmd.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    let out = cmd
        .arg(format!("http://localhost{path}"))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&out);
    let (body, code) = text.rsplit_once('\n')?;
    let code: u16 = code.trim().parse().ok()?;
    if code == 0 {
        return None;
    }
    Some((code, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// Every endpoint of docs/api.md (and one that does not exist), with a body where one
/// is expected.
const EVERY_ENDPOINT: [(&str, &str, Option<&str>); 11] = [
    ("GET", "/healthz", None),
    ("GET", "/metrics", None),
    ("GET", "/v1/tasks", None),
    ("POST", "/v1/tasks", Some(r#"{"prompt": "take over"}"#)),
    ("GET", "/v1/tasks/t-x", None),
    ("POST", "/v1/tasks/t-x/cancel", None),
    ("POST", "/v1/tasks/t-x/resume", None),
    ("GET", "/v1/approvals", None),
    (
        "POST",
        "/v1/approvals/ap-x",
        Some(r#"{"decision": "approve"}"#),
    ),
    ("GET", "/v1/events", None),
    ("GET", "/v2/nothing", None),
];

fn assert_forbidden(who: &str, answer: Option<(u16, Value)>, method: &str, path: &str) {
    let Some((status, v)) = answer else {
        panic!("{who} could not connect at all to {method} {path}; the test opened the socket");
    };
    assert_eq!(status, 403, "{who}: {method} {path}: {v}");
    assert_eq!(
        v["error"]["type"], "forbidden",
        "{who}: {method} {path}: {v}"
    );
    assert!(v["error"]["message"].is_string(), "{v}");
}

/// Opens the socket and its directory to every user, as the chown attack of issue
/// 8 did.
fn open_to_all(root: &TestRoot, socket: &Path) {
    let perm = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    perm(&root.dir, 0o755).unwrap();
    perm(&root.dir.join("run"), 0o777).unwrap();
    perm(socket, 0o666).unwrap();
}

#[test]
fn a_tool_users_connection_gets_403_even_with_the_socket_opened_to_all() {
    assert_root();
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    open_to_all(&root, &d.socket);
    // sandbox.user "auto": the uid of this root's own.
    let tool = root.tool_uid();
    for (method, path, body) in EVERY_ENDPOINT {
        let answer = request_as(tool, tool, false, &d.socket, method, path, body);
        assert_forbidden("the tool uid", answer, method, path);
    }
    // The same from inside the sandbox, as a tool would try it.
    let out = root.run(&[
        "sandbox",
        "--",
        "curl",
        "-sS",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "--unix-socket",
        d.socket.to_str().unwrap(),
        "http://localhost/v1/approvals",
    ]);
    assert!(
        stdout(&out).trim_end().ends_with("\n403"),
        "a tool got an answer from the API: {:?}\n{}\n{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    // Nothing was submitted, and root still gets in.
    let (status, list) = d.request("GET", "/v1/tasks", None);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["tasks"], json!([]));
    assert!(api.requests().is_empty());
}

#[test]
fn root_and_the_daemons_own_user_may_call_the_api_and_no_one_else() {
    assert_root();
    const DAEMON_UID: u32 = 61031;
    const STRANGER: u32 = 61032;
    let root = TestRoot::new("http://127.0.0.1:9");
    chown_tree(&root.dir, DAEMON_UID);
    let d = Daemon::start_with(&root, |cmd| {
        use std::os::unix::process::CommandExt;
        cmd.uid(DAEMON_UID).gid(DAEMON_UID);
    });
    let (status, v) = d.request("GET", "/v1/tasks", None);
    assert_eq!(status, 200, "root: {v}");
    let own = request_as(
        DAEMON_UID,
        DAEMON_UID,
        false,
        &d.socket,
        "GET",
        "/v1/tasks",
        None,
    );
    assert_eq!(own.map(|(s, _)| s), Some(200), "the daemon's own uid");
    // Owner-only: nobody else even connects.
    let run = std::fs::metadata(root.dir.join("run")).unwrap();
    assert_eq!((run.uid(), run.mode() & 0o777), (DAEMON_UID, 0o700));
    let sock = std::fs::symlink_metadata(&d.socket).unwrap();
    assert_eq!((sock.uid(), sock.mode() & 0o777), (DAEMON_UID, 0o600));
    let refused = request_as(
        STRANGER, STRANGER, false, &d.socket, "GET", "/healthz", None,
    );
    assert!(refused.is_none(), "{refused:?}");
    open_to_all(&root, &d.socket);
    for who in [STRANGER, NOBODY] {
        for (method, path, body) in EVERY_ENDPOINT {
            let answer = request_as(who, who, false, &d.socket, method, path, body);
            assert_forbidden(&format!("uid {who}"), answer, method, path);
        }
    }
}

/// A throwaway group with two member accounts, removed on drop: one listed in the
/// group's members, one with it as primary group; `nobody` is listed too.
pub(crate) struct Operators {
    pub(crate) group: String,
    gid: u32,
    pub(crate) listed: (u32, u32),
    primary: (u32, u32),
}

impl Operators {
    /// `None`, with the reason, when accounts cannot be created here.
    fn create() -> Result<Operators, String> {
        Operators::create_tagged("")
    }

    /// As [`Operators::create`], the names tagged so that tests running at once
    /// in one process each get their own group.
    pub(crate) fn create_tagged(tag: &str) -> Result<Operators, String> {
        let group = format!("hdit{}{tag}", std::process::id());
        let listed = format!("{group}l");
        let primary = format!("{group}p");
        let steps: [Vec<&str>; 4] = [
            vec!["groupadd", &group],
            vec![
                "useradd",
                "-M",
                "-N",
                "-s",
                "/usr/sbin/nologin",
                "-G",
                &group,
                &listed,
            ],
            vec![
                "useradd",
                "-M",
                "-s",
                "/usr/sbin/nologin",
                "-g",
                &group,
                &primary,
            ],
            vec!["gpasswd", "-a", "nobody", &group],
        ];
        let mut made = Operators {
            group: group.clone(),
            gid: 0,
            listed: (0, 0),
            primary: (0, 0),
        };
        for step in steps {
            // Other builders on this machine may hold the account database's lock.
            let mut last = String::new();
            let ok = (0..20).any(|_| match Command::new(step[0]).args(&step[1..]).output() {
                Ok(o) if o.status.success() => true,
                Ok(o) => {
                    last = stderr(&o);
                    std::thread::sleep(Duration::from_millis(200));
                    false
                }
                Err(e) => {
                    last = e.to_string();
                    false
                }
            });
            if !ok {
                return Err(format!("{} failed: {last}", step.join(" ")));
            }
        }
        let id = |flag: &str, name: &str| -> u32 {
            let o = Command::new("id").args([flag, name]).output().unwrap();
            stdout(&o).trim().parse().unwrap()
        };
        let group_gid = Command::new("getent")
            .args(["group", &group])
            .output()
            .unwrap();
        made.gid = stdout(&group_gid)
            .split(':')
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        made.listed = (id("-u", &listed), id("-g", &listed));
        made.primary = (id("-u", &primary), id("-g", &primary));
        Ok(made)
    }
}

impl Drop for Operators {
    fn drop(&mut self) {
        for user in [format!("{}l", self.group), format!("{}p", self.group)] {
            let _ = Command::new("userdel").arg(&user).output();
        }
        let _ = Command::new("groupdel").arg(&self.group).output();
    }
}

#[test]
fn members_of_the_operators_group_may_call_the_api_but_never_the_sandbox_user() {
    assert_root();
    let ops = match Operators::create() {
        Ok(ops) => ops,
        Err(why) => {
            println!("skipped: cannot create a throwaway group and users here: {why}");
            return;
        }
    };
    let root = TestRoot::new("http://127.0.0.1:9");
    // Only a named account can be a group member: the explicit "nobody" (an
    // "auto" uid has no passwd entry).
    root.edit_settings(|s| s["sandbox"]["user"] = serde_json::json!("nobody"));
    root.set_config("daemon", "operators_group", &format!("{:?}", ops.group));
    let d = Daemon::start(&root);
    // The group can reach the socket; others cannot.
    let run = std::fs::metadata(root.dir.join("run")).unwrap();
    assert_eq!(
        (run.uid(), run.gid(), run.mode() & 0o777),
        (0, ops.gid, 0o710)
    );
    let sock = std::fs::symlink_metadata(&d.socket).unwrap();
    assert_eq!(
        (sock.uid(), sock.gid(), sock.mode() & 0o777),
        (0, ops.gid, 0o660)
    );
    for (who, (uid, gid)) in [
        ("listed member", ops.listed),
        ("primary member", ops.primary),
    ] {
        let answer = request_as(uid, gid, true, &d.socket, "GET", "/v1/tasks", None);
        assert_eq!(answer.map(|(s, _)| s), Some(200), "{who} uid {uid}");
    }
    // nobody is listed in the group, so file permissions let it in: still 403.
    for (method, path, body) in EVERY_ENDPOINT {
        let answer = request_as(NOBODY, NOBODY, true, &d.socket, method, path, body);
        assert_forbidden("nobody (a group member)", answer, method, path);
    }
}

#[test]
fn an_unknown_operators_group_is_a_config_error_naming_the_key() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "operators_group", "\"no-such-group-hd\"");
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("config/config.toml:") && err.contains("daemon.operators_group"),
        "{err}"
    );
    assert!(err.contains("no-such-group-hd"), "{err}");
}

/// What a tool can leave where `.tmp` should be.
#[derive(Debug, Clone, Copy)]
enum Plant {
    DanglingSymlink,
    Fifo,
    File,
    ForeignDir,
}

const FOREIGN_UID: u32 = 61041;

impl Plant {
    fn make(self, at: &Path) {
        let _ = std::fs::remove_dir_all(at);
        let _ = std::fs::remove_file(at);
        match self {
            Plant::DanglingSymlink => std::os::unix::fs::symlink("/nonexistent/x", at).unwrap(),
            Plant::Fifo => {
                nix::unistd::mkfifo(at, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap()
            }
            Plant::File => std::fs::write(at, "not a directory").unwrap(),
            Plant::ForeignDir => {
                std::fs::create_dir(at).unwrap();
                std::fs::write(at.join("theirs"), "x").unwrap();
                chown_tree(at, FOREIGN_UID);
            }
        }
    }

    /// Whether `m` is what [`Plant::make`] left.
    fn is(self, m: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::FileTypeExt;
        match self {
            Plant::DanglingSymlink => m.file_type().is_symlink(),
            Plant::Fifo => m.file_type().is_fifo(),
            Plant::File => m.file_type().is_file(),
            Plant::ForeignDir => m.is_dir() && m.uid() == FOREIGN_UID,
        }
    }
}

/// The entries moved aside in the workspace.
fn planted_aside(ws: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(ws)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".tmp.planted-"))
        })
        .collect()
}

#[test]
fn a_planted_tmp_is_moved_aside_and_every_start_still_succeeds() {
    assert_root();
    for plant in [
        Plant::DanglingSymlink,
        Plant::Fifo,
        Plant::File,
        Plant::ForeignDir,
    ] {
        let root = TestRoot::new("http://127.0.0.1:9");
        let ws = root.workspace();
        let tmp = ws.join(".tmp");
        plant.make(&tmp);
        let out = root.run(&[
            "sandbox",
            "--",
            "bash",
            "-c",
            "echo ok > \"$TMPDIR/f\" && cat \"$TMPDIR/f\"",
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{plant:?}: {err}");
        assert_eq!(stdout(&out).trim(), "ok", "{plant:?}: {err}");
        assert!(
            err.contains(".tmp.planted-") && err.to_lowercase().contains("warn"),
            "{plant:?}: no warning: {err}"
        );
        let now = std::fs::symlink_metadata(&tmp).unwrap();
        assert!(now.is_dir(), "{plant:?}: .tmp is not a directory");
        assert_eq!(
            now.uid(),
            root.tool_uid(),
            "{plant:?}: .tmp not given to the sandbox user"
        );
        let aside = planted_aside(&ws);
        assert_eq!(aside.len(), 1, "{plant:?}: {aside:?}");
        let m = std::fs::symlink_metadata(&aside[0]).unwrap();
        assert!(
            plant.is(&m),
            "{plant:?}: moved aside as something else: {m:?}"
        );
        // Nothing to move at the next start.
        let out = root.run(&["sandbox", "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{plant:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("planted"), "{}", stderr(&out));
        assert_eq!(planted_aside(&ws).len(), 1);
    }
}

#[test]
fn a_planted_tmp_stops_neither_run_nor_serve() {
    assert_root();
    let api = FakeApi::start(vec![Reply::text("still serving")]);
    let root = TestRoot::new(&api.url);
    let tmp = root.workspace().join(".tmp");
    Plant::DanglingSymlink.make(&tmp);
    let out = root.run(&["run", "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "still serving");
    assert!(stderr(&out).contains(".tmp.planted-"), "{}", stderr(&out));
    Plant::Fifo.make(&tmp);
    let d = Daemon::start(&root);
    assert_eq!(d.request("GET", "/healthz", None).0, 200);
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(log.contains(".tmp.planted-"), "{log}");
    assert!(std::fs::symlink_metadata(&tmp).unwrap().is_dir());
    assert_eq!(planted_aside(&root.workspace()).len(), 2);
}

/// Waits for `serve` to exit by itself; kills it and fails if it starts serving.
fn serve_must_refuse(root: &TestRoot) -> (Option<i32>, String) {
    let mut child = root
        .command(&["serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve started anyway");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), err)
}

#[test]
fn a_symlinked_run_dir_is_refused_and_its_target_left_alone() {
    assert_root();
    let root = TestRoot::new("http://127.0.0.1:9");
    let target = Scratch::new("runtarget");
    std::os::unix::fs::lchown(&target.0, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&target.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    // `init` makes run/; the attack replaces it.
    std::fs::remove_dir(root.dir.join("run")).unwrap();
    std::os::unix::fs::symlink(&target.0, root.dir.join("run")).unwrap();
    let (code, err) = serve_must_refuse(&root);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    let m = std::fs::metadata(&target.0).unwrap();
    assert_eq!(
        (m.uid(), m.gid(), m.mode() & 0o7777),
        (NOBODY, NOBODY, 0o777)
    );
    assert_eq!(std::fs::read_dir(&target.0).unwrap().count(), 0);
}

#[test]
fn a_run_dir_left_to_another_uid_is_taken_back_through_its_descriptor() {
    assert_root();
    let root = TestRoot::new("http://127.0.0.1:9");
    let elsewhere = Scratch::new("victim");
    let victim = elsewhere.0.join("created-by-root");
    // What the reported takeover of run/ left: run/ owned by nobody, open to all, and a
    // lock file that is a link out of it.
    // `init` makes run/ (0700, root's); the takeover left it as below.
    let run = root.dir.join("run");
    std::os::unix::fs::symlink(&victim, run.join("harnessd.lock")).unwrap();
    chown_tree(&run, NOBODY);
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    let d = Daemon::start(&root);
    let m = std::fs::symlink_metadata(&run).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 0, 0o700));
    let sock = std::fs::symlink_metadata(&d.socket).unwrap();
    assert_eq!((sock.uid(), sock.mode() & 0o777), (0, 0o600));
    let lock = std::fs::symlink_metadata(run.join("harnessd.lock")).unwrap();
    assert!(lock.is_file() && lock.uid() == 0, "{lock:?}");
    assert!(!victim.exists(), "root followed the planted lock link");
    assert!(
        std::fs::read_to_string(&d.log)
            .unwrap()
            .contains("owned by uid 65534"),
        "no warning that run/ was taken back"
    );
}

#[test]
fn init_never_writes_through_a_link_left_in_the_workspace() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let elsewhere = Scratch::new("init-victim");
    let victim = elsewhere.0.join("created-by-init");
    let sample = root.workspace().join("scores.csv");
    std::fs::remove_file(&sample).unwrap();
    std::os::unix::fs::symlink(&victim, &sample).unwrap();
    let out = Command::new(crate::common::bin())
        .arg("init")
        .arg(&root.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!victim.exists(), "init wrote through the planted link");
    assert!(std::fs::symlink_metadata(&sample).unwrap().is_symlink());
}
