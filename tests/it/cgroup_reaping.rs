//! Call cgroups are never left behind: a successor that has the dead daemon's pid
//! (PID 1 of a PID namespace) reaps its leftovers and still makes its own, and
//! `check`'s probe removes the call cgroup it made.

use crate::common::{TestRoot, stderr};

/// A harnessd killed with -9 while it was PID 1 of its PID namespace (a container
/// entrypoint, `unshare --pid`) leaves `harnessd-1-0`; its successor is PID 1 too.
/// The reaping took a live pid to mean "not stale", so the successor kept the
/// leftover (escaped processes included) and then failed to make its own
/// `harnessd-1-0`, running every tool call of its life with no call cgroup: no
/// memory cap for the call's tree, no process cap, nothing killed at its end.
#[test]
fn a_successor_with_the_dead_daemons_pid_reaps_its_cgroups_and_keeps_its_own() {
    let parents = crate::cgroup_cleanup::call_cgroup_parents();
    assert!(
        !parents.is_empty(),
        "no cgroup hierarchy with memory and pids"
    );
    // `-0` is the name the successor's first cgroup takes; `-7` one it does not,
    // so whether it was reaped can be seen after the successor made its own.
    let stale: Vec<_> = parents
        .iter()
        .flat_map(|p| [p.join("harnessd-1-0"), p.join("harnessd-1-7")])
        .collect();
    for d in &stale {
        std::fs::create_dir(d).unwrap_or_else(|e| panic!("planting {}: {e}", d.display()));
    }
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", crate::common::bin()])
        .arg("--root")
        .arg(&root.dir)
        .arg("check")
        .output()
        .unwrap();
    let left: Vec<_> = stale
        .iter()
        .filter(|d| d.exists() && d.ends_with("harnessd-1-7"))
        .collect();
    for d in &stale {
        let _ = std::fs::remove_dir(d);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let cgroup = text.lines().find(|l| l.contains(" cgroup ")).unwrap_or("");
    assert!(left.is_empty(), "not reaped: {left:?}");
    assert!(
        cgroup.trim_start().starts_with("yes"),
        "{text}{}",
        stderr(&out)
    );
}

/// `check` probes the sandbox through a real call, in a call cgroup, and exited
/// without removing it: every `check` (an operator's routine, a monitoring probe)
/// left one `harnessd-<pid>-0` in the host's cgroup tree, for the next daemon
/// start to sweep.
#[test]
fn check_leaves_no_call_cgroup_behind() {
    let parents = crate::cgroup_cleanup::call_cgroup_parents();
    let root = TestRoot::new("http://127.0.0.1:9");
    let child = root
        .command(&["check"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let left = crate::cgroup_cleanup::cgroups_of(&parents, pid);
    for d in &left {
        let _ = std::fs::remove_dir(d);
    }
    if !text
        .lines()
        .any(|l| l.trim_start().starts_with("yes cgroup"))
    {
        // Said out loud, as in cgroup_cleanup: nothing was made to be left.
        eprintln!("check made no call cgroup on this machine: {text}");
    }
    assert!(left.is_empty(), "left behind by check: {left:?}");
}
