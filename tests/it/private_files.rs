//! What harnessd writes under `transcripts/` is private to the daemon's user: the
//! audit log, its rotated files and a torn tail moved aside, the transcripts, each
//! call's output, the histories saved by compaction and a task's run lock are not
//! readable (nor, for the lock, lockable) by other local accounts. Each test
//! reproduces a bug found against the real binary.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

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

/// The control API refuses the log and the transcripts to anyone but the daemon's
/// user, root and the operators group (403), yet both were created 0644 in a
/// 0755 `transcripts/`: any local account read every prompt, answer and tool
/// input straight from the files. (The full tool outputs were already 0600.)
#[test]
fn the_log_and_transcripts_are_not_readable_by_other_accounts() {
    // Every kind of file harnessd writes under transcripts/: the log and its
    // rotated files, the transcript, each call's `.out` and, after a compaction,
    // the saved `history-<n>.json` (the whole conversation).
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "list_dir", json!({"path": "."})),
        Reply::tool("tu_2", "list_dir", json!({"path": "."})),
        Reply::tool("tu_3", "get_time", json!({})),
        Reply::error(400, "invalid_request_error", "prompt is too long"),
        Reply::text("Summary: a private summary."),
        Reply::text("the secret answer"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("context", "keep_recent_messages", "2");
    root.set_config("audit", "rotate_mb", "0.003");
    let out = root.run(&["run", "a private prompt"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut kinds = std::collections::BTreeSet::new();
    for path in files_under(&root.dir.join("transcripts")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == ".gitignore" {
            continue; // init's, no data
        }
        let kind = match name.split_once('-') {
            Some((k, _)) if k == "events" || k == "history" => k.to_string(),
            _ => name.rsplit('.').next().unwrap().to_string(),
        };
        kinds.insert(kind);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode & 0o007,
            0,
            "{} is {mode:o}: readable by every account",
            path.display()
        );
    }
    for kind in ["events", "history", "json", "jsonl", "out"] {
        assert!(kinds.contains(kind), "no {kind} file among {kinds:?}");
    }
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}
