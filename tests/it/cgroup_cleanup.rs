//! The pooled call cgroups a `harnessd run` made are
//! removed when it exits cleanly, not left in the host's cgroup tree.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::common::{FakeApi, Reply, TestRoot, stderr, wait_until};

/// This process's path (no leading `/`) in the hierarchy whose line of
/// `/proc/self/cgroup` (`own`) names `controller` ("" for the unified one).
pub(crate) fn own_cgroup_path(own: &str, controller: &str) -> Option<String> {
    harnessd::exec::cgroup::path_in(own, controller).map(|p| p.trim_start_matches('/').to_string())
}

/// The directories call cgroups are made in, found the way `exec/cgroup.rs` finds
/// them: this process's own cgroups (a child inherits them), v2 when the unified
/// hierarchy delegates memory and pids, otherwise the v1 memory and pids trees.
pub(crate) fn call_cgroup_parents() -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let path_of = |want: &str| own_cgroup_path(&own, want);
    let v2 = PathBuf::from("/sys/fs/cgroup/unified").join(path_of("").unwrap_or_default());
    let v2_top = PathBuf::from("/sys/fs/cgroup").join(path_of("").unwrap_or_default());
    for base in [v2, v2_top] {
        let ctl = std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
        if ctl.contains("memory") && ctl.contains("pids") {
            return vec![base];
        }
    }
    ["memory", "pids"]
        .iter()
        .filter_map(|c| Some(PathBuf::from("/sys/fs/cgroup").join(c).join(path_of(c)?)))
        .collect()
}

/// The call cgroups of the harnessd with `pid` under `parents`.
pub(crate) fn cgroups_of(parents: &[PathBuf], pid: u32) -> Vec<PathBuf> {
    let prefix = format!("harnessd-{pid}-");
    parents
        .iter()
        .flat_map(|p| std::fs::read_dir(p).into_iter().flatten().flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// Whether a cgroup directory can be made under every parent (as root on a host
/// with a writable tree).
fn writable(parents: &[PathBuf]) -> Result<(), String> {
    if parents.is_empty() {
        return Err("no cgroup hierarchy with memory and pids found".into());
    }
    for p in parents {
        let probe = p.join(format!("harnessd-test-probe-{}", std::process::id()));
        std::fs::create_dir(&probe).map_err(|e| format!("{}: {e}", probe.display()))?;
        let _ = std::fs::remove_dir(&probe);
    }
    Ok(())
}

#[test]
fn a_clean_run_leaves_no_call_cgroup_behind() {
    let mut done = Reply::text("done");
    // Long enough to look at the pool while the run waits for its last answer.
    done.delay = Duration::from_millis(1500);
    let api = FakeApi::start(vec![
        Reply::tool("t1", "run_bash", json!({"command": "echo hi"})),
        done,
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("run_bash(echo *)"))
    });
    let parents = call_cgroup_parents();
    let usable = writable(&parents);
    let child = root
        .command(&["run", "x"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_until("the tool call", || {
        !root.events_of("tool_finished").is_empty()
    });
    let during = cgroups_of(&parents, pid);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    match &usable {
        Ok(()) => assert!(
            !during.is_empty(),
            "the tool call ran in a pooled cgroup under {parents:?}"
        ),
        // Said out loud: what is left to check is that nothing was left.
        Err(why) => eprintln!(
            "no writable cgroup tree on this machine ({why}): only checking that no \
             call cgroup of pid {pid} remains"
        ),
    }
    let after = cgroups_of(&parents, pid);
    assert!(
        after.is_empty(),
        "left behind after a clean exit: {after:?}"
    );
}

#[test]
fn a_sandbox_command_leaves_no_call_cgroup_behind() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let parents = call_cgroup_parents();
    let usable = writable(&parents);
    // Long enough to see its call cgroup while it runs.
    let child = root
        .command(&["sandbox", "--", "sleep", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    if usable.is_ok() {
        wait_until("the command's call cgroup", || {
            !cgroups_of(&parents, pid).is_empty()
        });
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    if let Err(why) = &usable {
        eprintln!(
            "no writable cgroup tree on this machine ({why}): only checking that no \
             call cgroup of pid {pid} remains"
        );
    }
    let after = cgroups_of(&parents, pid);
    assert!(after.is_empty(), "left behind after `sandbox`: {after:?}");
}

#[test]
fn the_next_start_removes_a_dead_harnessd_s_call_cgroups() {
    let parents = call_cgroup_parents();
    if let Err(why) = writable(&parents) {
        // Said out loud: nothing can be planted, so there is nothing to sweep.
        eprintln!("no writable cgroup tree on this machine ({why}): no stale cgroup to plant");
        return;
    }
    // A pid that cannot be running: above the kernel's largest. (A reaped child's
    // pid could be reused at once by a harnessd this test or another starts, whose
    // fresh cgroup a concurrent sweep would then take for the dead one's.)
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let dead = pid_max + 1;
    let planted: Vec<PathBuf> = parents
        .iter()
        .map(|p| p.join(format!("harnessd-{dead}-0")))
        .collect();
    for p in &planted {
        std::fs::create_dir(p).unwrap();
    }
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root.run(&["sandbox", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let left: Vec<&PathBuf> = planted.iter().filter(|p| p.exists()).collect();
    for p in &left {
        let _ = std::fs::remove_dir(p);
    }
    assert!(
        left.is_empty(),
        "stale cgroups of dead pid {dead} left: {left:?}"
    );
}

#[test]
fn a_serve_stopped_by_sigterm_leaves_no_call_cgroup_behind() {
    let api = FakeApi::start(vec![
        Reply::tool("t1", "run_bash", json!({"command": "echo hi"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("run_bash(echo *)"))
    });
    let parents = call_cgroup_parents();
    let usable = writable(&parents);
    let mut daemon = crate::common::daemon::Daemon::start(&root);
    let pid = daemon.child.id();
    let id = daemon.submit("x");
    daemon.wait_finished(&id);
    let during = cgroups_of(&parents, pid);
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = daemon.child.wait().unwrap();
    let log = std::fs::read_to_string(&daemon.log).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{log}");
    match &usable {
        Ok(()) => assert!(!during.is_empty(), "the tool call ran in a pooled cgroup"),
        Err(why) => eprintln!(
            "no writable cgroup tree on this machine ({why}): only checking that no \
             call cgroup of pid {pid} remains"
        ),
    }
    let after = cgroups_of(&parents, pid);
    assert!(after.is_empty(), "left behind after SIGTERM: {after:?}");
}
