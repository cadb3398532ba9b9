//! The daemon as a library function (`daemon::serve::serve`) in the test's own
//! current-thread runtime, its timeouts passed under tokio's paused clock: ten
//! minutes of `daemon.approval_timeout_secs` or `daemon.shutdown_grace_secs` take
//! milliseconds, with no sleeps.
//!
//! Why the clock is paused mid-test and not from the start
//! (`start_paused = true`): a paused clock jumps to the next timer whenever the
//! runtime waits on real I/O, and the daemon always waits on some (the fake model
//! API over HTTP, the audit log's writer thread, the sandbox probe). From the start,
//! the HTTP client's own `api.timeout_secs` would be that next timer and every model
//! request would time out at once. So each test reaches its waiting point in real
//! time, pauses, lets the clock jump over the one timer under test, and resumes
//! before the next model request.

use std::time::Duration;

use serde_json::json;

use crate::common::daemon::InProcess;
use crate::common::{FakeApi, Reply, TestRoot, last_results};

#[tokio::test]
async fn an_unanswered_approval_is_denied_after_approval_timeout_secs_of_paused_time() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "w",
            "write_file",
            json!({"path": "asked.txt", "content": "x"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "approval_timeout_secs", "600");
    let d = InProcess::start(&root).await;
    let id = d.submit("write it").await;
    d.until("the approval", async || {
        let (_, list) = d.request("GET", "/v1/approvals", None).await;
        list["approvals"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await;

    let real = std::time::Instant::now();
    tokio::time::pause();
    // The approval's 600 s timer is the earliest one pending; this sleep's ends
    // one second after it, so the clock jumps over the timeout, then stops here.
    tokio::time::sleep(Duration::from_secs(601)).await;
    tokio::time::resume();
    // Back on the real clock for the model request that carries the denial.
    let t = d.wait_finished(&id).await;
    assert!(
        real.elapsed() < Duration::from_secs(60),
        "ten minutes passed in {:?}",
        real.elapsed()
    );
    assert_eq!(t["stop_reason"], "end_turn");
    let resolved = &root.events_of("approval_resolved")[0];
    assert_eq!(resolved["decision"], "timeout");
    assert_eq!(resolved["by"], "timeout");
    assert!(!root.workspace().join("asked.txt").exists());
    let result = &last_results(&api.requests()[1].body)[0];
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("nobody answered within 600 s"),
        "{result}"
    );
    d.stop("test over").await;
}

#[tokio::test]
async fn shutdown_interrupts_a_running_task_after_shutdown_grace_secs_of_paused_time() {
    // The model takes 30 real seconds to answer: longer than the test may take.
    let mut slow = Reply::text("too late");
    slow.delay = Duration::from_secs(30);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "shutdown_grace_secs", "600");
    // Past the grace, so the HTTP client's timeout is not the timer the paused
    // clock jumps to first.
    root.set_config("api", "timeout_secs", "3600");
    let mut d = InProcess::start(&root).await;
    let id = d.submit("think slowly").await;
    d.until("the model request", async || !api.requests().is_empty())
        .await;

    let real = std::time::Instant::now();
    tokio::time::pause();
    let paused = tokio::time::Instant::now();
    let _ = d.shutdown.take().unwrap().send("SIGTERM (test)".into());
    (&mut d.handle).await.unwrap().unwrap();
    assert!(
        paused.elapsed() >= Duration::from_secs(600),
        "cancelled after {:?} of tokio time, before the grace",
        paused.elapsed()
    );
    assert!(
        real.elapsed() < Duration::from_secs(20),
        "the grace took {:?} of real time",
        real.elapsed()
    );
    tokio::time::resume();
    assert!(!d.socket.exists(), "the socket is removed");
    // Past the grace the task is interrupted, not ended: resumable at the next start.
    assert!(root.events_of("task_finished").is_empty());
    let interrupted = root.events_of("task_interrupted");
    assert_eq!(interrupted[0]["task_id"], id.as_str());
    let t = root.transcript();
    assert_eq!(t["status"], "interrupted", "{t}");
    let events = root.events();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "daemon_stopping");
    assert_eq!(last["reason"], "SIGTERM (test)");
}
