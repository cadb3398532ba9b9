//! `daemon.memory_mb` bounds the daemon: four tasks whose answers are each near
//! `api.max_response_mb` arrive at once, with the daemon started inside a cgroup
//! whose `memory.max` is twice `daemon.memory_mb`. Without a shared budget every
//! answer is read at once and the whole daemon is OOM-killed; with it, the answers
//! wait for room, the daemon runs in its own cgroup limited to `daemon.memory_mb`
//! (tools beside it), and all four tasks finish.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot};

/// The default `daemon.memory_mb`.
const MEMORY_MB: u64 = 256;
const MAX_RESPONSE_MB: u64 = 48;
/// Each answer: 45 MiB of text, streamed.
const ANSWER_BYTES: usize = 45 * 1024 * 1024;

/// This process's directory in the cgroup v1 `memory` hierarchy or, failing
/// that, in the unified one when it offers the memory controller.
fn memory_parent() -> Option<(PathBuf, &'static str)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path_of = |want: &str| crate::cgroup_cleanup::own_cgroup_path(&own, want);
    if let Some(p) = path_of("memory") {
        let dir = PathBuf::from("/sys/fs/cgroup/memory").join(p);
        if dir.join("memory.limit_in_bytes").exists() {
            return Some((dir, "memory.limit_in_bytes"));
        }
    }
    let p = path_of("")?;
    for top in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let dir = PathBuf::from(top).join(&p);
        let ctl = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
        if ctl.split_whitespace().any(|c| c == "memory") {
            return Some((dir, "memory.max"));
        }
    }
    None
}

/// A cgroup made for the test, removed (after what is left in it is killed) on drop.
struct TestCgroup {
    dir: PathBuf,
}

impl TestCgroup {
    fn new(limit_mb: u64) -> Result<TestCgroup, String> {
        let (parent, limit_file) = memory_parent().ok_or("no memory controller found")?;
        let dir = parent.join(format!("harnessd-test-memory-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cg = TestCgroup { dir };
        let bytes = (limit_mb * 1024 * 1024).to_string();
        std::fs::write(cg.dir.join(limit_file), bytes).map_err(|e| format!("{limit_file}: {e}"))?;
        let _ = std::fs::write(cg.dir.join("memory.swap.max"), "0");
        Ok(cg)
    }

    /// Makes `cmd`'s process join this cgroup before it execs, so all of its
    /// memory is charged here.
    fn enter_before_exec(&self, cmd: &mut std::process::Command) {
        let procs = std::ffi::CString::new(
            self.dir
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: only async-signal-safe calls (open, write, close) on memory
        // prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if written != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Every cgroup below this one, recursively, deepest first.
    fn below(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                    out.push(e.path());
                }
            }
        }
        out.reverse();
        out
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let mut dirs = self.below();
        dirs.push(self.dir.clone());
        for d in dirs {
            for _ in 0..100 {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                if std::fs::remove_dir(&d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn four_near_cap_answers_at_once_leave_the_daemon_alive() {
    let cgroup = match TestCgroup::new(2 * MEMORY_MB) {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!(
                "SKIPPED four_near_cap_answers_at_once_leave_the_daemon_alive: no usable \
                 memory cgroup to start the daemon in ({why})"
            );
            return;
        }
    };
    let answer = "x".repeat(ANSWER_BYTES);
    let api = FakeApi::with_responder(Box::new(move |_| Reply::text(&answer)));
    api.stream_chunks_of(64 * 1024);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "max_response_mb", &MAX_RESPONSE_MB.to_string());
    root.set_config("daemon", "max_concurrent_tasks", "4");
    let mut daemon = Daemon::start_with(&root, |cmd| cgroup.enter_before_exec(cmd));
    let pid = daemon.pid();
    let started = root.events_of("daemon_started");
    let own = started[0]["enforced"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == "daemon_cgroup"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        own["enforced"], true,
        "the daemon runs in its own cgroup: {own}"
    );
    let ids: Vec<String> = (0..4)
        .map(|i| daemon.submit(&format!("answer {i}")))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(240);
    for id in &ids {
        loop {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                panic!(
                    "the daemon died ({status}) with its answers in flight: {}",
                    std::fs::read_to_string(&daemon.log).unwrap_or_default()
                );
            }
            let (_, task) = daemon.request("GET", &format!("/v1/tasks/{id}"), None);
            if task["status"] == "finished" {
                assert_eq!(task["stop_reason"], "end_turn", "{task}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} never finished: {task}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon is still running"
    );
    // Its own cgroup sits beside the call cgroups, inside the test's.
    let mine = cgroup.dir.join(format!("harnessd-{pid}-daemon"));
    assert!(
        std::fs::read_to_string(mine.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.trim() == pid.to_string()),
        "the daemon is in {}",
        mine.display()
    );
    let limit = ["memory.limit_in_bytes", "memory.max"]
        .iter()
        .find_map(|f| std::fs::read_to_string(mine.join(f)).ok())
        .unwrap_or_default();
    assert_eq!(limit.trim(), (MEMORY_MB * 1024 * 1024).to_string());
    drop(daemon);
}

/// A request waiting for room in the budget has not been sent yet, or is not
/// being read: that wait is the daemon's, not the peer's, and must not count
/// against `api.timeout_secs`. With `api.max_response_mb` at the most the budget
/// holds, one answer is read at a time; each stalls 3 s before its end, so the
/// last of four waits about 9 s for room, well past a 5 s timeout.
#[test]
fn waiting_for_room_in_the_budget_is_no_timeout() {
    let api = FakeApi::with_responder(Box::new(|_| {
        Reply::text("done").stall_stream_after(3, Duration::from_secs(3))
    }));
    let root = TestRoot::new(&api.url);
    // 4 × 9 + 32 = 68: the budget (68 MiB less the daemon's 32) is one response's
    // claim.
    root.set_config("api", "max_response_mb", "9");
    root.set_config("daemon", "memory_mb", "68");
    root.set_config("api", "timeout_secs", "5");
    root.set_config("api", "max_retries", "0");
    root.set_config("daemon", "max_concurrent_tasks", "4");
    let daemon = Daemon::start(&root);
    let ids: Vec<String> = (0..4)
        .map(|i| daemon.submit(&format!("task {i}")))
        .collect();
    for id in &ids {
        let done = daemon.wait_finished(id);
        assert_eq!(done["stop_reason"], "end_turn", "{done}");
    }
    assert!(
        root.events_of("model_error").is_empty(),
        "{:?}",
        root.events_of("model_error")
    );
}
