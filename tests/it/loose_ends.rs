//! Every task the audit log shows begun gets its `task_finished`: a kill
//! between `task_queued` and the save of the queued transcript, and a task whose
//! `task_finished` a full disk refused after its transcript said `finished`, are
//! closed on the record at the next start. The on-disk states are built by hand:
//! the log a crashed daemon leaves, with no daemon running.

use std::io::Write;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot};
use crate::queue::{check_log, kill9};

/// Appends `event` to the root's log with the next seq, as a daemon would have.
fn append(root: &TestRoot, mut event: Value) {
    let path = root.dir.join("transcripts/events.jsonl");
    let seq = root
        .events()
        .last()
        .and_then(|e| e["seq"].as_u64())
        .unwrap_or(0)
        + 1;
    event["seq"] = seq.into();
    event["ts"] = "2026-01-01T00:00:00.000Z".into();
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    writeln!(f, "{event}").unwrap();
}

/// The `task_finished` lines of `id`.
fn finished_of(root: &TestRoot, id: &str) -> Vec<Value> {
    root.events_of("task_finished")
        .into_iter()
        .filter(|e| e["task_id"] == id)
        .collect()
}

#[test]
fn a_task_killed_before_its_transcript_was_saved_is_closed_as_not_accepted() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    kill9(Daemon::start(&root));
    // The kill landed after `task_queued` was written, before the transcript save.
    let id = "t-20260101T000000Z-00dead";
    append(
        &root,
        json!({"type": "task_queued", "task_id": id, "prompt": "p", "source": "api", "by": "uid:0"}),
    );
    let d = Daemon::start(&root);
    let closed = finished_of(&root, id);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["stop_reason"], "error");
    assert!(
        closed[0]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("not accepted")),
        "{closed:?}"
    );
    // Never answered 202, never to run: unknown to the API.
    let (code, _) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!(code, 404);
    check_log(&root);
    // Closed once: the next start finds nothing open.
    kill9(d);
    let _d = Daemon::start(&root);
    assert_eq!(finished_of(&root, id).len(), 1);
}

#[test]
fn a_finished_task_whose_task_finished_was_refused_gets_it_at_the_next_start() {
    let api = FakeApi::start(vec![Reply::text("the answer")]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let id = d.submit("x");
    d.wait_finished(&id);
    kill9(d);
    // As if the disk had been full when the task ended: its transcript says
    // finished, the log has no `task_finished`.
    let path = root.dir.join("transcripts/events.jsonl");
    let kept: String = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("\"task_finished\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, kept).unwrap();
    assert!(finished_of(&root, &id).is_empty());
    let d = Daemon::start(&root);
    let closed = finished_of(&root, &id);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["stop_reason"], "end_turn");
    assert_eq!(closed[0]["turns"], 1);
    let (code, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!((code, t["status"].as_str()), (200, Some("finished")), "{t}");
}
