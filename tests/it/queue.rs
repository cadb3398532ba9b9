//! The durable queue (docs/api.md): a task answered 202 is on disk
//! (`task_queued` and a `queued` transcript), survives a kill -9 and is queued again
//! at the next start, oldest first.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::fake_api::check_pairing;
use crate::common::{FakeApi, Reply, TestRoot, last_results, wait_until};

/// Kills the daemon with SIGKILL and reaps it.
pub(crate) fn kill9(mut d: Daemon) {
    d.child.kill().unwrap();
    d.child.wait().unwrap();
}

#[test]
fn queued_tasks_survive_kill_9_and_are_requeued() {
    let mut slow = Reply::text("never seen");
    slow.delay = Duration::from_secs(30);
    let api = FakeApi::start(vec![
        slow,
        Reply::text("done"),
        Reply::text("done"),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "max_concurrent_tasks", "1");
    let d = Daemon::start(&root);
    let ids: Vec<String> = (0..3).map(|i| d.submit(&format!("task {i}"))).collect();
    wait_until("the first model request", || api.requests().len() == 1);
    kill9(d);
    let d = Daemon::start(&root);
    let mut statuses = Vec::new();
    for id in &ids {
        let (code, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
        assert_eq!(
            code, 200,
            "task {id} was accepted, so it must be known: {t}"
        );
        statuses.push(t["status"].as_str().unwrap_or("").to_string());
    }
    // The one holding the slot was interrupted; the queued ones were queued again.
    let interrupted: Vec<&String> = ids
        .iter()
        .zip(&statuses)
        .filter(|(_, s)| *s == "interrupted")
        .map(|(id, _)| id)
        .collect();
    assert_eq!(interrupted.len(), 1, "{statuses:?}");
    let (code, body) = d.request(
        "POST",
        &format!("/v1/tasks/{}/resume", interrupted[0]),
        None,
    );
    assert_eq!(code, 202, "{body}");
    for id in &ids {
        let t = d.wait_finished(id);
        assert_eq!(t["stop_reason"], "end_turn", "{t}");
    }
    let requeued: BTreeSet<String> = root
        .events_of("task_requeued")
        .iter()
        .map(|e| e["task_id"].as_str().unwrap().to_string())
        .collect();
    let expected: BTreeSet<String> = ids
        .iter()
        .filter(|id| *id != interrupted[0])
        .cloned()
        .collect();
    assert_eq!(requeued, expected);
    // A requeued task starts fresh: `task_started`, never `task_resumed`.
    for id in &expected {
        let of = |kind: &str| {
            root.events_of(kind)
                .iter()
                .filter(|e| e["task_id"] == id.as_str())
                .count()
        };
        assert_eq!(of("task_started"), 1, "{id}");
        assert_eq!(of("task_resumed"), 0, "{id}");
    }
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(log.contains("requeued 2 queued task"), "{log}");
}

/// A tool call first, an answer once it has its result; a little slow, so kills
/// land in every phase.
fn loop_model(body: &Value) -> Reply {
    let mut reply = if last_results(body).is_empty() {
        Reply::tool("c1", "run_bash", json!({"command": "sleep 0.1; echo ok"}))
    } else {
        Reply::text("done")
    };
    reply.delay = Duration::from_millis(80);
    reply
}

/// Every line of events.jsonl parses (`events` panics otherwise) and seq strictly
/// increases.
pub(crate) fn check_log(root: &TestRoot) {
    let seqs: Vec<u64> = root
        .events()
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seq not strictly increasing: {seqs:?}"
    );
}

/// Every accepted task is known; the interrupted ones are resumed.
fn check_and_resume(d: &Daemon, accepted: &[String]) {
    for id in accepted {
        let (code, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
        assert_eq!(code, 200, "accepted task {id} lost: {t}");
        if t["status"] == "interrupted" {
            let (code, body) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
            assert_eq!(code, 202, "{body}");
        }
    }
}

#[test]
fn kill_loop_loses_no_accepted_task() {
    let api = FakeApi::with_responder(Box::new(loop_model));
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["run_bash", "read_file", "list_dir"]);
        s["tools"]["ask"] = json!(["write_file", "edit_file"]);
    });
    // One slot: most accepted tasks wait in the queue when a kill lands.
    root.set_config("daemon", "max_concurrent_tasks", "1");
    let mut accepted: Vec<String> = Vec::new();
    for round in 0..5 {
        let d = Daemon::start(&root);
        check_log(&root);
        check_and_resume(&d, &accepted);
        if round < 2 {
            for i in 0..(4 - 2 * round) {
                accepted.push(d.submit(&format!("round {round} task {i}")));
            }
        }
        std::thread::sleep(Duration::from_millis(fastrand::u64(30..500)));
        kill9(d);
    }
    let d = Daemon::start(&root);
    check_log(&root);
    check_and_resume(&d, &accepted);
    for id in &accepted {
        let t = d.wait_finished(id);
        assert_eq!(t["stop_reason"], "end_turn", "{t}");
        let path = root.dir.join(format!("transcripts/{id}.json"));
        let transcript: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        check_pairing(&transcript).unwrap_or_else(|e| panic!("{id}: {e}"));
        let last = transcript["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(last["role"], "assistant", "{id}: ends with the answer");
    }
    check_log(&root);
}

#[test]
fn a_queued_transcript_named_after_another_id_is_refused_once() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let id = d.submit("x");
    d.wait_finished(&id);
    kill9(d);
    // A queued transcript under a name that is not its id (a copy, a rename).
    let dir = root.dir.join("transcripts");
    let mut t: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{id}.json"))).unwrap())
            .unwrap();
    t["task_id"] = "t-20260101T000000Z-0000aa".into();
    t["status"] = "queued".into();
    t["stop_reason"] = Value::Null;
    t["answer"] = Value::Null;
    let misnamed = dir.join("t-20260101T000000Z-0000bb.json");
    std::fs::write(&misnamed, t.to_string()).unwrap();
    for start in 0..2 {
        let d = Daemon::start(&root);
        let refused = root.events_of("transcript_refused");
        assert_eq!(refused.len(), 1, "start {start}: {refused:?}");
        let error = refused[0]["error"].as_str().unwrap();
        assert!(
            error.contains("t-20260101T000000Z-0000bb.json")
                && error.contains("t-20260101T000000Z-0000aa"),
            "{error}"
        );
        assert!(root.events_of("task_requeued").is_empty());
        assert!(!misnamed.exists(), "moved aside");
        let (code, _) = d.request("GET", "/v1/tasks/t-20260101T000000Z-0000aa", None);
        assert_eq!(code, 404);
        kill9(d);
    }
    let aside: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("t-20260101T000000Z-0000bb.json.refused-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
}
