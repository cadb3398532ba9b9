//! The audit log watched (docs/events.md, `events_gap`): an events.jsonl removed under
//! the running daemon, while tasks run, is noticed before the next line is written.
//! The daemon starts a new file whose first line is `events_gap` (the seq and hash of
//! the last line it wrote), `/healthz` names the gap until restart, and
//! `audit verify` reports a recorded gap, not only a broken chain.

use serde_json::Value;

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout, wait_until};

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_removed_log_is_noticed_and_the_gap_recorded() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let log = root.dir.join("transcripts/events.jsonl");
    let d = Daemon::start(&root);
    let first: Vec<String> = (0..5).map(|i| d.submit(&format!("task {i}"))).collect();
    // Removed while some of them still run.
    let before = lines(&log);
    let last = before.last().unwrap().clone();
    std::fs::remove_file(&log).unwrap();
    let later: Vec<String> = (0..5).map(|i| d.submit(&format!("later {i}"))).collect();
    for id in first.iter().chain(&later) {
        d.wait_finished(id);
    }
    wait_until("the new log", || log.exists());
    let after = lines(&log);
    let gap = &after[0];
    assert_eq!(gap["type"], "events_gap", "{after:?}");
    let last_seq = gap["last_seq"].as_u64().unwrap();
    assert!(
        last_seq >= last["seq"].as_u64().unwrap(),
        "{gap} after {last}"
    );
    assert_eq!(gap["seq"].as_u64(), Some(last_seq + 1));
    assert_eq!(gap["prev"], gap["last_hash"]);
    assert_eq!(
        after.iter().filter(|e| e["type"] == "events_gap").count(),
        1
    );

    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(
        health["gap"]["last_seq"].as_u64(),
        Some(last_seq),
        "{health}"
    );
    assert!(
        health["reason"]
            .as_str()
            .unwrap()
            .contains("removed or replaced"),
        "{health}"
    );

    let out = root.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("recorded gap"), "{err}");
    assert!(err.contains(&format!("seq {}", last_seq + 1)), "{err}");
    assert!(err.contains("events_gap"), "{err}");
    let out = root.run(&["audit", "verify", "--json"]);
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["gaps"][0]["last_missing"].as_u64(), Some(last_seq), "{v}");
    assert_eq!(v["gaps"][0]["first_missing"].as_u64(), Some(1), "{v}");
}

#[test]
fn a_log_removed_while_idle_is_recreated_with_the_gap_first() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let log = root.dir.join("transcripts/events.jsonl");
    let d = Daemon::start(&root);
    let id = d.submit("one");
    d.wait_finished(&id);
    std::fs::remove_file(&log).unwrap();
    // No request: the writer looks by itself.
    wait_until("events_gap in a new file", || {
        lines(&log)
            .first()
            .is_some_and(|e| e["type"] == "events_gap")
    });
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200, "{health}");
    assert!(health["gap"].is_object(), "{health}");
}

#[test]
fn rotation_is_no_gap() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    root.set_config("audit", "rotate_mb", "0.002");
    let d = Daemon::start(&root);
    for i in 0..6 {
        let id = d.submit(&format!("task {i}"));
        d.wait_finished(&id);
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!((status, &health["status"]), (200, &"ok".into()), "{health}");
    let rotated = std::fs::read_dir(root.dir.join("transcripts"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("events-"))
        .count();
    assert!(rotated > 0, "the log never rotated");
    let out = root.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(root.events_of("events_gap").is_empty());
}

/// An older copy moved over the live file (a restore from backup): the lines after
/// the copy are missing, and `events_gap` follows the copy's last line.
#[test]
fn a_log_replaced_by_an_older_copy_is_a_recorded_gap() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let log = root.dir.join("transcripts/events.jsonl");
    let copy = root.dir.join("transcripts/copy.jsonl");
    let d = Daemon::start(&root);
    d.wait_finished(&d.submit("one"));
    std::fs::copy(&log, &copy).unwrap();
    let copied = lines(&copy).last().unwrap()["seq"].as_u64().unwrap();
    d.wait_finished(&d.submit("two"));
    let written = lines(&log).last().unwrap()["seq"].as_u64().unwrap();
    std::fs::rename(&copy, &log).unwrap();
    d.wait_finished(&d.submit("three"));
    let after = lines(&log);
    let gap = after.iter().find(|e| e["type"] == "events_gap").unwrap();
    assert_eq!(after[copied as usize - 1]["seq"].as_u64(), Some(copied));
    assert_eq!(after[copied as usize]["type"], "events_gap", "{after:?}");
    assert!(gap["last_seq"].as_u64().unwrap() >= written, "{gap}");
    let out = root.run(&["audit", "verify", "--json"]);
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(
        v["gaps"][0]["first_missing"].as_u64(),
        Some(copied + 1),
        "{v}"
    );
}

/// Runs `cmd` for at most 15 s; `None` if it was still running (then killed).
fn finishes(mut cmd: std::process::Command) -> Option<std::process::ExitStatus> {
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_fifo_put_where_the_log_was_hangs_no_reader() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let log = root.dir.join("transcripts/events.jsonl");
    let d = Daemon::start(&root);
    let id = d.submit("before");
    d.wait_finished(&id);
    std::fs::remove_file(&log).unwrap();
    nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // A reader that opens a FIFO with no writer waits for one for ever: through the
    // daemon (one of its threads and the connection held) and offline alike.
    let through_daemon = finishes(root.command(&["events"]));
    let verify = finishes(root.command(&["audit", "verify"]));
    let _ = std::fs::remove_file(&log);
    assert!(through_daemon.is_some(), "`events` hung on a FIFO log");
    let verify = verify.expect("`audit verify` hung on a FIFO log");
    assert!(!verify.success(), "a FIFO is no log to verify");
    drop(d);
}
