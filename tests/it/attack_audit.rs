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
