//! Files dropped in `transcripts/` under a transcript's name — a FIFO, a link to
//! `/dev/zero`, a 2 GiB sparse file, a torn or foreign JSON file — are named and
//! skipped by `tasks` without a daemon and by the daemon's start, which still comes
//! up: never blocked on, never read whole, never skipped silently. Each test
//! reproduces a bug found against the real binary.

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};
use crate::forged_log_files::{RemoveOnDrop, ends_within_30s};

/// `harnessd tasks` with no daemon reads every `*.json` of transcripts/, the
/// directory that also holds the audit log. A FIFO dropped there with that name
/// made it block for ever in open, and a link to /dev/zero made it read without
/// end — the same forgeries the log's readers refuse. Only regular files are read
/// now; anything else is named and the command exits 1. A regular transcript whose
/// task_id names the FIFO led the prompt's read there too: the prompt is now read
/// from the file the head came from.
#[test]
fn tasks_without_a_daemon_refuses_a_fifo_or_link_named_json() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let forged = root.dir.join("transcripts/t-forged.json");
    let _remove = RemoveOnDrop(forged.clone());
    let mut copy = root.transcript();
    copy["task_id"] = "t-forged".into();
    let copy_path = root.dir.join("transcripts/t-copy.json");
    let _remove_copy = RemoveOnDrop(copy_path.clone());
    std::fs::write(&copy_path, copy.to_string()).unwrap();
    let fifo = root.dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for target in [None, Some(std::path::Path::new("/dev/zero"))] {
        let _ = std::fs::remove_file(&forged);
        match target {
            None => std::fs::rename(&fifo, &forged).unwrap(),
            Some(t) => std::os::unix::fs::symlink(t, &forged).unwrap(),
        }
        let out = ends_within_30s(&root, &["tasks"]);
        assert_eq!(out.status.code(), Some(1), "{target:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("t-forged.json"), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
}

/// The daemon reads every `*.json` of transcripts/ at start (its tasks, and the
/// loose ends of tasks left open in the log): a FIFO dropped there with that name
/// made `harnessd serve` block in open and never come up. It is now skipped as
/// not a regular file, named in the diagnostic log, and the daemon serves.
#[test]
fn the_daemon_starts_past_a_fifo_named_json() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let forged = root.dir.join("transcripts/t-forged.json");
    let _remove = RemoveOnDrop(forged.clone());
    nix::unistd::mkfifo(&forged, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let daemon = Daemon::start(&root);
    let out = root.run(&["tasks", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["tasks"].as_array().unwrap().len(), 1, "{list}");
    drop(daemon);
    let log = std::fs::read_to_string(root.dir.join("daemon.log")).unwrap();
    assert!(log.contains("t-forged.json"), "{log}");
    assert!(log.contains("not a regular file"), "{log}");
}

/// A sparse 2 GiB file named like a transcript (no disk used) is refused by its
/// size, named, and never read whole — by `tasks` without a daemon and by the
/// daemon's start, which comes up.
#[test]
fn a_huge_file_named_json_is_refused_not_read() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "one"]).status.code(), Some(0));
    let huge = root.dir.join("transcripts/t-huge.json");
    let _remove = RemoveOnDrop(huge.clone());
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let out = ends_within_30s(&root, &["tasks"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("t-huge.json") && err.contains("larger than any transcript"),
        "{err}"
    );
    // stdout is not kept by the bounded run: listed again, now that it is known
    // to end.
    let listed = stdout(&root.run(&["tasks"]));
    assert_eq!(
        listed.lines().count(),
        2,
        "the real task is still listed: {listed}"
    );
    let daemon = Daemon::start(&root);
    let (status, _) = daemon.request("GET", "/healthz", None);
    assert_eq!(status, 200);
}

/// A transcript that does not parse (a torn file, a foreign file) does not stop the
/// daemon, and is never skipped silently: its task would vanish from the API, so
/// the daemon's log names the file.
#[test]
fn an_unreadable_transcript_is_reported_not_silently_skipped() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let transcripts = root.dir.join("transcripts");
    std::fs::create_dir_all(&transcripts).unwrap();
    std::fs::write(
        transcripts.join("t-torn.json"),
        "{\"task_id\": \"t-torn\", \"sta",
    )
    .unwrap();
    let d = Daemon::start(&root);
    let (status, _) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200);
    let log = std::fs::read_to_string(root.dir.join("daemon.log")).unwrap();
    assert!(
        log.contains("skipping transcript") && log.contains("t-torn.json"),
        "{log}"
    );
}
