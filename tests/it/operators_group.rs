//! Who may connect to the control socket, as a client sees it (docs/config.md, docs/api.md): a user
//! the socket's permissions keep out is told it is not an operator and how to
//! become one, not asked whether the daemon is running.

use std::os::unix::process::CommandExt;

use crate::common::daemon::Daemon;
use crate::common::{TestRoot, stderr};

/// A uid and gid no account or group on the host has.
const STRANGER: u32 = 4242;

fn tasks_as_stranger(root: &TestRoot) -> std::process::Output {
    root.command(&["tasks"])
        .uid(STRANGER)
        .gid(STRANGER)
        .output()
        .unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_client_outside_the_operators_group_is_told_so_not_asked_if_serve_runs() {
    assert!(
        is_root(),
        "this test starts the daemon as root and a client as another uid"
    );
    let root = TestRoot::new("http://127.0.0.1:9");
    // `adm` exists on every Debian-like host and the stranger is not in it.
    root.set_config("daemon", "operators_group", "\"adm\"");
    let _d = Daemon::start(&root);
    let out = tasks_as_stranger(&root);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("permission denied: you are not in the operators group \"adm\"")
            && err.contains("usermod -aG adm"),
        "{err}"
    );
    assert!(!err.contains("is `harnessd serve` running"), "{err}");
}

#[test]
fn without_an_operators_group_the_client_is_told_who_may_connect() {
    assert!(
        is_root(),
        "this test starts the daemon as root and a client as another uid"
    );
    let root = TestRoot::new("http://127.0.0.1:9");
    let _d = Daemon::start(&root);
    let out = tasks_as_stranger(&root);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("permission denied: you are not in the operators group")
            && err.contains("none is set, so only root may connect")
            && err.contains("daemon.operators_group"),
        "{err}"
    );
}
