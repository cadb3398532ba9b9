//! Attacks on the audit log, streaming, compaction and cost of issues 11 and 13,
//! each one a bug found against the real binary.

use std::os::unix::fs::PermissionsExt;

use crate::common::{FakeApi, Reply, TestRoot, stderr};

/// A crash mid-write leaves a torn last line: a piece of an event, which can hold
/// a prompt or a tool input. The repair moved it aside into
/// `events.jsonl.torn-<ts>` with `fs::write`, 0644: readable by every account
/// while the log it came from is 0600.
#[test]
fn the_torn_tail_moved_aside_is_as_private_as_the_log() {
    let api = FakeApi::start(vec![Reply::text("a"), Reply::text("b")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let log = root.dir.join("transcripts/events.jsonl");
    let before = std::fs::read_to_string(&log).unwrap();
    let n = before.lines().count();
    let torn = format!("{{\"seq\":{},\"prompt\":\"a private pro", n + 1);
    std::fs::write(&log, format!("{before}{torn}")).unwrap();
    let out = root.run(&["run", "two"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = root.events();
    assert_eq!(events[n]["type"], "events_repaired");
    let torn_file = root.dir.join(events[n]["torn_file"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(&torn_file).unwrap(), torn);
    let mode = std::fs::metadata(&torn_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "the torn line is {mode:o}");
}

/// A server that answers every request with `head` (status line, headers, the
/// start of a body) and then goes silent, the connection left open.
fn stalling_api(head: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 65536];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(head.as_bytes());
            open.push(conn);
        }
    });
    url
}

/// With `api.stream` on, only the headers and each event were timed: an answer
/// that is not an event stream (an error status, or a server ignoring `stream`)
/// was read with no timeout at all, so a body that stalls after its headers
/// hung the task forever instead of timing out after `api.timeout_secs`.
#[test]
fn a_plain_body_that_stalls_under_streaming_times_out() {
    for head in [
        "HTTP/1.1 529 Overloaded\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"type\"",
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"id\"",
    ] {
        let url = stalling_api(head);
        let root = TestRoot::new(&url);
        root.set_config("api", "timeout_secs", "1");
        root.set_config("api", "max_retries", "0");
        // Not a speed figure: a bound far above the 1 s timeout, so that only a
        // hang fails it.
        let out = ends_within(&root, &["run", "hello"], 60);
        assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    }
}

/// `audit verify` with its address space capped at 1 GiB, so a reader that would
/// hold a huge "line" whole fails here instead of taking the machine's memory.
fn verify_capped(root: &TestRoot) -> std::process::Output {
    capped(root, &["audit", "verify"])
}

/// `harnessd ARGS` on `root` with its address space capped at 1 GiB.
fn capped(root: &TestRoot, args: &[&str]) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576; exec \"$@\"")
        .arg("sh")
        .arg(crate::common::bin())
        .arg("--root")
        .arg(&root.dir)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// A file dropped in the log's directory with a rotated file's name, holding one
/// 2 GiB "line" (sparse: no disk used): `audit verify`, `events` and the daemon's
/// `/v1/events` read a line whole, however long, so they took 4 GiB of memory or
/// died trying ("Streams; bounded memory"). A line longer than any harnessd writes
/// is now reported as foreign with its file and line, after reading only its start.
#[test]
fn a_forged_file_with_a_huge_line_is_reported_not_read_whole() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let forged = root.dir.join("transcripts/events-0-1.jsonl");
    std::fs::File::create(&forged)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let out = verify_capped(&root);
    // A time range reads each rotated file's first line to skip it: no less capped.
    let query = capped(&root, &["events", "--since", "1d"]);
    let _ = std::fs::remove_file(&forged);
    assert_eq!(query.status.code(), Some(1), "{}", stderr(&query));
    assert!(
        stderr(&query).contains("events-0-1.jsonl"),
        "{}",
        stderr(&query)
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("events-0-1.jsonl:1:"), "{err}");
    assert!(err.contains("longer than"), "{err}");
}

/// A FIFO, or a symlink to one or to a device, dropped with a rotated file's name:
/// every reader of the log opened it and blocked for ever (`audit verify` hung,
/// and so would `events` and the daemon's `/v1/events`). Only regular files are
/// read now, opened without following a link; anything else is named as such.
#[test]
fn a_fifo_or_link_with_a_rotated_name_is_refused_not_read() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let forged = root.dir.join("transcripts/events-0-1.jsonl");
    // Gone before the root's drop reads every file of transcripts/ (the schema check).
    let _remove = RemoveOnDrop(forged.clone());
    let fifo = root.dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for target in [
        None,
        Some(fifo.as_path()),
        Some(std::path::Path::new("/dev/zero")),
    ] {
        let _ = std::fs::remove_file(&forged);
        match target {
            None => std::fs::rename(&fifo, &forged).unwrap(),
            Some(t) => std::os::unix::fs::symlink(t, &forged).unwrap(),
        }
        for args in [&["audit", "verify"][..], &["events", "--since", "1d"]] {
            let out = ends_within_30s(&root, args);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("not a regular file"),
                "{}",
                stderr(&out)
            );
        }
        if target.is_none() {
            std::fs::rename(&forged, &fifo).unwrap();
        }
    }
}

/// Removes a file when dropped, so that even a failed test leaves no FIFO behind.
pub(crate) struct RemoveOnDrop(pub(crate) std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `harnessd ARGS` on `root`; fails the test if it has not ended after 30 s
/// (not a speed figure: a bound far above any command on a tiny log).
pub(crate) fn ends_within_30s(root: &TestRoot, args: &[&str]) -> std::process::Output {
    ends_within(root, args, 30)
}

/// Runs `harnessd ARGS` on `root` (stdout discarded); fails the test if it has not
/// ended after `secs` seconds, killing it.
fn ends_within(root: &TestRoot, args: &[&str], secs: u64) -> std::process::Output {
    let mut child = root
        .command(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut ended = false;
    while !ended && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        ended = child.try_wait().unwrap().is_some();
    }
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
        panic!("harnessd {args:?} still running after {secs} s");
    }
    child.wait_with_output().unwrap()
}

/// A task's run lock `transcripts/<task>.lock` was created 0644: any local account
/// could open it read-only and `flock` it (a read-only descriptor is enough), for
/// example the lock a `kill -9`'d daemon left behind, and then every resume of
/// that task failed as "being run by another process" for as long as it liked.
/// Created 0600 now, so only the daemon's user (and root) can open it.
#[test]
fn a_tasks_run_lock_cannot_be_opened_by_other_accounts() {
    use crate::common::daemon::Daemon;
    let api = FakeApi::start(vec![
        Reply::tool(
            "tu1",
            "run_bash",
            serde_json::json!({"command": "python3 < check.py"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    let out = root.run(&["submit", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    crate::common::wait_until("the approval", || {
        !root.events_of("approval_requested").is_empty()
    });
    let locks: Vec<_> = std::fs::read_dir(root.dir.join("transcripts"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "lock"))
        .collect();
    assert_eq!(locks.len(), 1, "the running task's lock");
    let mode = std::fs::metadata(&locks[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "{} is {mode:o}", locks[0].display());
}
