//! A peer the control API refuses (the tool uid) cannot take the connection slots
//! (`daemon.max_connections`) that operators need, even with the socket opened to
//! every user.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::TestRoot;
use crate::common::daemon::Daemon;

/// Opens the socket and its directory to every user (docs/api.md: the tool uid is
/// refused "whatever the file permissions say").
fn open_to_all(root: &TestRoot, socket: &Path) {
    let perm = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    perm(&root.dir, 0o755).unwrap();
    perm(&root.dir.join("run"), 0o777).unwrap();
    perm(socket, 0o666).unwrap();
}

/// A process running as `uid` that holds `n` connections to `socket` open (it
/// connects them before it execs `sleep`, which keeps the descriptors).
fn hold_connections_as(uid: u32, socket: &Path, n: usize) -> std::process::Child {
    // Built before the fork: pre_exec may not allocate.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(socket.as_os_str().as_bytes()) {
        *d = *s as libc::c_char;
    }
    let mut cmd = Command::new("sleep");
    cmd.arg("20").stdin(Stdio::null());
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            for _ in 0..n {
                // Not close-on-exec: `sleep` inherits and holds it.
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
                if fd < 0 || libc::connect(fd, (&raw const addr).cast(), len) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

/// A peer the API refuses (the tool uid) must not be able to take the
/// connection slots (`daemon.max_connections`) that operators need: with every
/// slot held by refused connections, root's `/healthz` still gets its answer.
#[test]
fn refused_peers_cannot_take_the_operators_connection_slots() {
    assert!(nix::unistd::Uid::effective().is_root(), "CI runs as root");
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "max_connections", "4");
    let d = Daemon::start(&root);
    open_to_all(&root, &d.socket);
    let mut tool = hold_connections_as(root.tool_uid(), &d.socket, 8);
    // Let the daemon accept them.
    std::thread::sleep(Duration::from_millis(500));
    let answers: Vec<Option<u16>> = (0..3)
        .map(|_| std::panic::catch_unwind(|| d.request("GET", "/healthz", None).0).ok())
        .collect();
    let _ = tool.kill();
    let _ = tool.wait();
    assert!(
        answers.iter().all(|a| *a == Some(200)),
        "root's /healthz while the tool uid holds connections: {answers:?} \
         (None: closed without an answer)"
    );
}
