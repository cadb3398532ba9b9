//! A driver for the sandbox alone: `harnessd sandbox [--read-only] -- CMD…` on a
//! test root, as root or as an unprivileged daemon, for tests of what the kernel
//! lets a tool process do.

use std::os::unix::process::CommandExt;
use std::process::Output;

use super::TestRoot;

/// Runs `argv` confined as a tool, with the read-only profile when `read_only`, and
/// with harnessd itself running as `as_uid` when given (the root's tree must then be
/// that uid's: see [`super::chown_tree`]).
pub fn run(root: &TestRoot, read_only: bool, as_uid: Option<u32>, argv: &[&str]) -> Output {
    let mut args = vec!["sandbox"];
    if read_only {
        args.push("--read-only");
    }
    args.push("--");
    args.extend_from_slice(argv);
    let mut cmd = root.command(&args);
    if let Some(uid) = as_uid {
        cmd.uid(uid).gid(uid);
    }
    cmd.output().unwrap()
}

/// `bash -c script`, confined (see [`run`]).
pub fn bash(root: &TestRoot, read_only: bool, as_uid: Option<u32>, script: &str) -> Output {
    run(root, read_only, as_uid, &["bash", "-c", script])
}
