//! `api.timeout_secs` bounds the whole of a model request, from sending it to the
//! last byte of the answer (docs/config.md): a peer that keeps a stream alive with
//! `ping` events for ever cannot hold a task past the timeout and its retries,
//! while a stream that is slow but ends within the deadline is still read whole.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

/// Runs `harnessd run go`, killed (and the test failed) if it outlives `limit`:
/// the output and how long it took.
fn run_within(root: &TestRoot, limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = root
        .command(&["run", "go"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "harnessd run still in its request after {limit:?}: {}",
                stderr(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out, started.elapsed())
}

#[test]
fn a_peer_pinging_for_ever_is_given_up_at_the_deadline_and_retried() {
    // Every attempt: the stream starts, then only pings, every 100 ms, for an hour.
    let forever = || {
        Reply::text("never finished").ping_stream_after(
            2,
            Duration::from_millis(100),
            Duration::from_secs(3600),
        )
    };
    let api = FakeApi::start(vec![forever(), forever()]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "timeout_secs", "2");
    root.set_config("api", "max_retries", "1");
    // 2 attempts × 2 s, one backoff (≤ 0.5 s), and the start and stop of a process.
    let (out, took) = run_within(&root, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(took < Duration::from_secs(8), "took {took:?}");
    assert!(took >= Duration::from_secs(4), "took {took:?}");
    assert_eq!(api.requests().len(), 2);
    let errors = root.events_of("model_error");
    assert_eq!(errors.len(), 2, "{errors:?}");
    for e in &errors {
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains("timed out after 2 s") && message.contains("api.timeout_secs"),
            "{message}"
        );
    }
    assert!(errors[0]["retry_in_ms"].is_u64(), "{errors:?}");
    assert!(errors[1]["retry_in_ms"].is_null(), "{errors:?}");
    let finished = root.events_of("task_finished");
    assert_eq!(finished[0]["stop_reason"], "error", "{finished:?}");
    assert!(
        stderr(&out).contains("see api.timeout_secs"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_slow_stream_that_ends_within_the_deadline_is_read_whole() {
    // 1.5 s of pings in the middle of the answer, under a 5 s deadline.
    let slow = Reply::text("lent mais complet").ping_stream_after(
        3,
        Duration::from_millis(100),
        Duration::from_millis(1500),
    );
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "timeout_secs", "5");
    let (out, took) = run_within(&root, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "lent mais complet\n");
    assert!(took >= Duration::from_millis(1500), "took {took:?}");
    assert!(root.events_of("model_error").is_empty());
}

#[test]
fn a_plain_request_is_timed_whole_with_the_same_message() {
    let mut late = Reply::text("trop tard");
    late.delay = Duration::from_secs(4);
    let api = FakeApi::start(vec![late]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "stream", "false");
    root.set_config("api", "timeout_secs", "1");
    root.set_config("api", "max_retries", "0");
    let (out, took) = run_within(&root, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(took < Duration::from_secs(4), "took {took:?}");
    let errors = root.events_of("model_error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    let message = errors[0]["message"].as_str().unwrap();
    assert!(message.contains("timed out after 1 s"), "{message}");
}
