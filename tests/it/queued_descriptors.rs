//! A queued task holds no descriptor (docs/operating.md): its run lock is taken when it
//! starts. 300 tasks queued behind one slot, in a daemon limited to 128 open files,
//! are all accepted and all finish, and the daemon's descriptors do not grow with
//! the queue.

use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, TestRoot, wait_until};
use crate::restart_keeps_queue::holding_model;

/// Descriptors the process has open.
fn fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
fn three_hundred_queued_tasks_fit_under_128_descriptors() {
    let hold = Arc::new(AtomicBool::new(true));
    let api = FakeApi::with_responder(holding_model(vec![("hold", hold)]));
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "max_concurrent_tasks", "1");
    let d = Daemon::start_with(&root, |cmd| {
        let limit = libc::rlimit {
            rlim_cur: 128,
            rlim_max: 128,
        };
        // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    });
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max open files") && l.contains(" 128 ")),
        "{limits}"
    );
    let held = d.submit("hold");
    wait_until("the held model request", || api.requests().len() == 1);
    let before = fds(d.pid());
    // `submit` asserts 202 for each.
    let ids: Vec<String> = (0..300).map(|i| d.submit(&format!("queued {i}"))).collect();
    let queued = fds(d.pid());
    assert!(
        queued <= before + 4,
        "{before} descriptors with no task queued, {queued} with 300"
    );
    let (code, _) = d.request("POST", &format!("/v1/tasks/{held}/cancel"), None);
    assert_eq!(code, 202);
    for id in &ids {
        let t = d.wait_finished(id);
        assert_eq!(t["stop_reason"], "end_turn", "{t}");
    }
}
