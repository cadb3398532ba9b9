//! The daemon's one shutdown: on SIGTERM (or `serve`'s trigger) every connection
//! it serves ends before it exits, cleanly and at once once `daemon_stopping` is on
//! the record: a `/v1/events` follower is sent that line and then the end of its
//! stream, an idle kept-alive connection is closed, and nothing waits for the grace
//! period to run out.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::TestRoot;
use crate::common::daemon::{Daemon, InProcess};

/// The end of a chunked body: the last chunk, of length 0, and its empty trailer.
const LAST_CHUNK: &[u8] = b"\r\n0\r\n\r\n";

/// Starts reading `s` to its end on a thread: the bytes read, and how long after
/// `since` the end came (`None` if it did not come within 30 s).
fn read_to_end(
    mut s: UnixStream,
    since: std::sync::Arc<std::sync::OnceLock<Instant>>,
) -> std::thread::JoinHandle<(Vec<u8>, Option<Duration>)> {
    std::thread::spawn(move || {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut raw = Vec::new();
        let ended = match s.read_to_end(&mut raw) {
            Ok(_) => since.get().map(|t| t.elapsed()),
            Err(_) => None,
        };
        (raw, ended)
    })
}

/// The JSON lines of a chunked `/v1/events` response.
fn lines_of(raw: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(raw);
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A follower of `/v1/events` on `socket`: the request sent, nothing read yet.
fn follow(socket: &std::path::Path) -> UnixStream {
    let mut s = UnixStream::connect(socket).unwrap();
    s.write_all(b"GET /v1/events?follow=1 HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .unwrap();
    s
}

/// A connection that made one request, got its answer and stays open, idle.
fn idle_keep_alive(socket: &std::path::Path) -> UnixStream {
    let mut s = UnixStream::connect(socket).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    s
}

#[test]
fn sigterm_ends_a_follower_stream_after_daemon_stopping_and_closes_idle_connections_at_once() {
    let root = TestRoot::new("http://127.0.0.1:9");
    // Long, so that waiting for it shows.
    root.set_config("daemon", "shutdown_grace_secs", "20");
    let mut d = Daemon::start(&root);
    let since = std::sync::Arc::new(std::sync::OnceLock::new());
    let follower = read_to_end(follow(&d.socket), since.clone());
    let idle = read_to_end(idle_keep_alive(&d.socket), since.clone());
    // The follower is past the lines on file and waits for new ones.
    std::thread::sleep(Duration::from_millis(500));
    since.set(Instant::now()).unwrap();
    unsafe { libc::kill(d.pid(), libc::SIGTERM) };
    let status = d.child.wait().unwrap();
    let took = since.get().unwrap().elapsed();
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(5), "the stop took {took:?}");
    let log = root.events();
    let last = log.last().unwrap();
    assert_eq!(last["type"], "daemon_stopping");
    let (raw, ended) = follower.join().unwrap();
    assert!(ended.is_some(), "the follower's stream did not end");
    assert!(
        raw.ends_with(LAST_CHUNK),
        "the follower's response was cut, not ended: {}",
        String::from_utf8_lossy(&raw)
    );
    let lines = lines_of(&raw);
    assert_eq!(
        lines.last(),
        Some(last),
        "the follower's last line is the log's"
    );
    assert_eq!(lines.len(), log.len(), "the follower missed lines");
    let (rest, ended) = idle.join().unwrap();
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert!(
        ended.is_some_and(|t| t < Duration::from_secs(5)),
        "the idle connection was held: {ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_returns_only_once_its_connections_have_ended() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "shutdown_grace_secs", "20");
    let d = InProcess::start(&root).await;
    let since = std::sync::Arc::new(std::sync::OnceLock::new());
    let follower = read_to_end(follow(&d.socket), since.clone());
    let idle = read_to_end(idle_keep_alive(&d.socket), since.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    since.set(Instant::now()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), d.stop("test"))
        .await
        .expect("serve did not return within 10 s");
    // In this process, a connection task nobody waited for would still be
    // running, its client waiting: both ended before `serve` returned.
    let deadline = Instant::now() + Duration::from_secs(1);
    while !(follower.is_finished() && idle.is_finished()) {
        assert!(
            Instant::now() < deadline,
            "serve returned with a connection still open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (raw, _) = follower.join().unwrap();
    assert!(
        raw.ends_with(LAST_CHUNK),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert_eq!(lines_of(&raw).last().unwrap()["type"], "daemon_stopping");
    let (_, ended) = idle.join().unwrap();
    assert!(ended.is_some(), "the idle connection was left open");
}

/// A request whose head came before SIGTERM and whose body comes only once
/// `daemon_stopping` is on the record is refused (503), not accepted: nothing is
/// written after that line, and no task is accepted by a daemon that has stopped.
#[test]
fn a_submission_finished_after_daemon_stopping_is_refused_and_writes_nothing() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "shutdown_grace_secs", "5");
    let mut d = Daemon::start(&root);
    let body = r#"{"prompt": "late"}"#;
    let mut s = UnixStream::connect(&d.socket).unwrap();
    write!(
        s,
        "POST /v1/tasks HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(d.pid(), libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while root.events().last().unwrap()["type"] != "daemon_stopping" {
        assert!(Instant::now() < deadline, "no daemon_stopping");
        std::thread::sleep(Duration::from_millis(20));
    }
    s.write_all(body.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let answer = String::from_utf8_lossy(&raw);
    assert!(d.child.wait().unwrap().success());
    assert!(!answer.starts_with("HTTP/1.1 202"), "accepted: {answer}");
    assert_eq!(root.events().last().unwrap()["type"], "daemon_stopping");
    assert!(root.events_of("task_queued").is_empty());
}

/// An approval whose task ended without an answer (cancelled, or interrupted by
/// the stop) is no longer pending: it is not listed, and answering it (with
/// `remember`, which would edit settings.json) is refused.
#[test]
fn an_approval_of_a_cancelled_task_is_no_longer_pending() {
    use crate::common::{FakeApi, Reply, wait_until};
    let write = Reply::tool(
        "w1",
        "write_file",
        serde_json::json!({"path": "x.txt", "content": "x"}),
    );
    let api = FakeApi::start(vec![write, Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let id = d.submit("write");
    let pending = || {
        d.request("GET", "/v1/approvals", None).1["approvals"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    wait_until("the approval", || !pending().is_empty());
    let approval = pending()[0]["approval_id"].as_str().unwrap().to_string();
    let (code, body) = d.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(code, 202, "{body}");
    assert_eq!(d.wait_finished(&id)["stop_reason"], "cancelled");
    assert!(pending().is_empty(), "still listed: {:?}", pending());
    let settings = std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap();
    let (code, body) = d.request(
        "POST",
        &format!("/v1/approvals/{approval}"),
        Some(r#"{"decision": "approve", "remember": true}"#),
    );
    assert_eq!(code, 404, "{body}");
    let now = std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap();
    assert_eq!(settings, now, "a dead task's approval edited the rules");
}
