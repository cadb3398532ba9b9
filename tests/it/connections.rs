//! Hostile peers on the control socket: connections
//! that send nothing, a body that never arrives, a line of the audit log that does
//! not parse (docs/config.md, docs/events.md, docs/api.md).

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::daemon::Daemon;
use crate::common::{TestRoot, stderr, stdout};

/// Whether the daemon closed `s`: a read sees EOF (or a reset) within `wait`.
fn closed_within(mut s: &UnixStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

#[test]
fn silent_connections_give_way_to_new_ones_and_drop_after_the_header_timeout() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "max_connections", "50");
    let d = Daemon::start(&root);
    let silent: Vec<UnixStream> = (0..300)
        .map(|_| UnixStream::connect(&d.socket).unwrap())
        .collect();
    // Beyond the limit, the oldest connections that sent nothing are closed at
    // once to make room: none is held past its turn.
    let early = silent
        .iter()
        .take(250)
        .filter(|s| closed_within(s, Duration::from_secs(2)))
        .count();
    assert_eq!(
        early, 250,
        "the first 250 of 300 silent connections gave way"
    );
    // While 50 silent connections hold every slot, /healthz still answers at once.
    let start = Instant::now();
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200, "{health}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // The ones left are dropped once the 10 s for a request head are over.
    std::thread::sleep(Duration::from_secs(11));
    let open = silent
        .iter()
        .skip(250)
        .filter(|s| !closed_within(s, Duration::from_millis(500)))
        .count();
    assert_eq!(
        open, 0,
        "silent connections still open after the header timeout"
    );
}

#[test]
fn connections_in_the_middle_of_a_request_keep_their_slots() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "max_connections", "10");
    let d = Daemon::start(&root);
    let busy: Vec<UnixStream> = (0..10)
        .map(|_| {
            let mut s = UnixStream::connect(&d.socket).unwrap();
            // A whole request answered first proves the daemon has heard this
            // connection (a sleep cannot, on a loaded machine); then the head of
            // a second one, left unfinished: the connection is mid-request.
            s.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
                .unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = [0u8; 512];
            let n = s.read(&mut buf).unwrap();
            assert!(
                buf[..n].starts_with(b"HTTP/1.1 200"),
                "no answer to a whole request"
            );
            s.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n")
                .unwrap();
            s
        })
        .collect();
    let late = UnixStream::connect(&d.socket).unwrap();
    assert!(
        closed_within(&late, Duration::from_secs(2)),
        "an 11th connection was served while 10 were busy"
    );
    let kept = busy
        .iter()
        .filter(|s| !closed_within(s, Duration::from_millis(200)))
        .count();
    assert_eq!(kept, 10, "a busy connection was closed to make room");
}

#[test]
fn a_removed_socket_is_bound_again_within_5_s() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = Daemon::start(&root);
    std::fs::remove_file(&d.socket).unwrap();
    let start = Instant::now();
    loop {
        if let Ok(mut s) = UnixStream::connect(&d.socket) {
            s.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no socket at {} 5 s after it was removed",
            d.socket.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A file planted in its place is replaced by the daemon's socket too.
    std::fs::remove_file(&d.socket).unwrap();
    std::fs::write(&d.socket, "not a socket").unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let (status, _) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200);
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(log.contains("was removed or replaced"), "{log}");
}

#[test]
fn idle_keep_alive_and_trickled_heads_are_closed_after_10_s() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = Daemon::start(&root);
    // A kept-alive connection that made one request, then fell silent.
    let mut kept = UnixStream::connect(&d.socket).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 512];
    let n = kept.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // A head sent one byte a second, never finished.
    let start = Instant::now();
    let mut trickle = UnixStream::connect(&d.socket).unwrap();
    let mut trickle_closed = None;
    for b in b"GET /healthz HTTP/1.1\r\nhost: xxxxxxxxxxxxxxxxxxxx".iter() {
        if trickle.write_all(&[*b]).is_err() || closed_within(&trickle, Duration::from_secs(1)) {
            trickle_closed = Some(start.elapsed());
            break;
        }
    }
    let took = trickle_closed.expect("a trickled head is never finished, yet was held");
    assert!(took < Duration::from_secs(12), "held for {took:?}");
    assert!(
        closed_within(&kept, Duration::from_secs(2)),
        "keep-alive still open"
    );
}

/// Sends `head` and `body`, then waits (at most 20 s) for the daemon's answer or
/// its close; returns the raw answer and how long it took.
fn send_and_wait(d: &Daemon, head: &str, body: &[u8]) -> (String, Duration) {
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    // The daemon may answer a head it refuses (a length past the limit) and close
    // before the body is written: a broken pipe here is its answer, not a failure.
    let _ = s.write_all(body);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let start = Instant::now();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    (String::from_utf8_lossy(&raw).into_owned(), start.elapsed())
}

#[test]
fn a_body_that_never_arrives_is_not_held() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = Daemon::start(&root);
    let head = |len: u64| {
        format!(
            "POST /v1/tasks HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             content-length: {len}\r\n\r\n"
        )
    };
    let huge = std::thread::scope(|scope| {
        let huge = scope.spawn(|| send_and_wait(&d, &head(10_000_000_000), b"0123456789"));
        let (text, took) = send_and_wait(&d, &head(100), b"{\"prompt\":");
        assert!(took < Duration::from_secs(12), "held for {took:?}");
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        huge.join().unwrap()
    });
    let (text, took) = huge;
    assert!(took < Duration::from_secs(2), "held for {took:?}");
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(root.events_of("task_queued").is_empty());
}

/// Puts a line that does not parse in the middle of events.jsonl; returns its
/// 1-based line number.
fn corrupt_the_log(root: &TestRoot) -> usize {
    let path = root.dir.join("transcripts/events.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 2, "{text}");
    lines.insert(1, "{\"seq\": 2, \"type\": \"tool_fin");
    // Rewritten in place: a running daemon keeps appending to the same file.
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    2
}

#[test]
fn readers_report_an_unparseable_line_with_its_file_and_number() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = Daemon::start(&root);
    let line = corrupt_the_log(&root);
    let (status, text) = d.request_text("GET", "/v1/events");
    assert_eq!(status, 200, "{text}");
    let objects: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bad: Vec<&Value> = objects
        .iter()
        .filter(|o| o["type"] == "unreadable_line")
        .collect();
    assert_eq!(bad.len(), 1, "{text}");
    assert_eq!(bad[0]["line"], line, "{text}");
    assert!(
        bad[0]["file"].as_str().unwrap().ends_with("events.jsonl"),
        "{text}"
    );
    assert!(
        objects.len() > 2,
        "the lines around it are still there: {text}"
    );
    // The client through the daemon warns and exits 1.
    let out = root.run(&["events"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("events.jsonl:{line}")),
        "{}",
        stderr(&out)
    );
    drop(d);
    // Without the daemon, the file reader says the same.
    let out = root.run(&["events"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("events.jsonl:{line}")),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).lines().count() >= 2, "{}", stdout(&out));
}

#[test]
fn max_connections_is_read_at_start_and_a_change_is_reported() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let _d = Daemon::start(&root);
    root.set_config("daemon", "max_connections", "10");
    crate::common::wait_until("the reload", || {
        root.events_of("config_loaded")
            .iter()
            .any(|e| e["trigger"] != "start")
    });
    let reloaded = root
        .events_of("config_loaded")
        .into_iter()
        .find(|e| e["trigger"] != "start")
        .unwrap();
    assert_eq!(
        reloaded["restart_needed"],
        serde_json::json!(["daemon.max_connections"]),
        "{reloaded}"
    );
}

#[test]
fn a_removed_socket_directory_is_made_again_and_the_root_stays_locked() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = Daemon::start(&root);
    std::fs::remove_dir_all(root.dir.join("run")).unwrap();
    let start = Instant::now();
    while UnixStream::connect(&d.socket).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no socket 5 s after run/ was removed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, _) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200);
    // The lock went with the old directory; the new one holds it again.
    let second = root.run(&["serve"]);
    assert_ne!(second.status.code(), Some(0));
    let err = stderr(&second);
    assert!(err.contains("already serving this root"), "{err}");
    let (status, _) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200, "the second daemon took the socket");
}
