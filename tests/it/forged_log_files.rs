//! Files dropped in the audit log's directory under a rotated file's name — a
//! 2 GiB "line", a FIFO, a link to a FIFO or a device — are reported by every
//! reader of the log (`audit verify`, `events`, `/v1/events`) with their file and
//! line, never read whole and never blocked on. Each test reproduces a bug found
//! against the real binary.

use crate::common::{FakeApi, Reply, TestRoot, stderr};

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
pub(crate) fn ends_within(root: &TestRoot, args: &[&str], secs: u64) -> std::process::Output {
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
