//! The fail-closed writer driven by failpoints (`HARNESSD_FAILPOINTS`, debug
//! builds only) rather than a full filesystem: a failed `fdatasync` fails closed
//! exactly like a failed write (no action without its record; docs/events.md, docs/api.md). The fault is raised
//! while a task waits on the model, whose answer is a `write_file` allowed without
//! asking: only the record can stop it. Raised, the tool does not run, the task
//! stops with `error`, `/healthz` is 503, a new task and a resume are refused with
//! 507; cleared, both are accepted again and the stopped task has its one
//! `task_finished`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, wait_until};
use crate::queue::check_log;

/// Faults the daemon reads at every append and sync: the file named by
/// `HARNESSD_FAILPOINTS=@<file>`.
pub(crate) struct Faults(pub(crate) PathBuf);

impl Faults {
    pub(crate) fn new(root: &TestRoot) -> Faults {
        let f = Faults(root.dir.join("failpoints"));
        f.clear();
        f
    }

    pub(crate) fn env(&self) -> String {
        format!("@{}", self.0.display())
    }

    pub(crate) fn raise(&self, spec: &str) {
        std::fs::write(&self.0, spec).unwrap();
    }

    pub(crate) fn clear(&self) {
        std::fs::write(&self.0, "").unwrap();
    }
}

/// A root whose model holds its first answer (see [`held_model`]) and where
/// `write_file` runs without asking: only the record can stop it.
pub(crate) struct Held {
    /// Set when the model has been asked.
    pub(crate) asked: Arc<AtomicBool>,
    /// Set to let the model answer.
    pub(crate) go: Arc<AtomicBool>,
    /// The fake API (kept alive with the root).
    pub(crate) api: FakeApi,
    /// The root.
    pub(crate) root: TestRoot,
}

pub(crate) fn held_root() -> Held {
    let (asked, go) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let api = held_model(asked.clone(), go.clone());
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["write_file", "get_time"]);
        s["tools"]["ask"] = json!([]);
    });
    Held {
        asked,
        go,
        api,
        root,
    }
}

/// A fake model whose first answer (a `write_file` of `marker.txt`) waits until
/// `go` is set; every later request gets a plain answer.
pub(crate) fn held_model(asked: Arc<AtomicBool>, go: Arc<AtomicBool>) -> FakeApi {
    let count = AtomicUsize::new(0);
    FakeApi::with_responder(Box::new(move |_| {
        if count.fetch_add(1, Ordering::SeqCst) > 0 {
            return Reply::text("done");
        }
        asked.store(true, Ordering::SeqCst);
        while !go.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Reply::tool(
            "w",
            "write_file",
            json!({"path": "marker.txt", "content": "ran"}),
        )
    }))
}

fn of_task<'a>(events: &'a [Value], kind: &str, id: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind && e["task_id"] == id)
        .collect()
}

/// The whole scenario with `fault` (e.g. `events.sync=eio`) as the failure.
fn fails_closed_and_recovers(fault: &str) {
    let Held {
        asked,
        go,
        api: _api,
        root,
    } = held_root();
    let faults = Faults::new(&root);
    let d = Daemon::start_with_env(&root, &[("HARNESSD_FAILPOINTS", &faults.env())]);
    let id = d.submit("write the marker");
    wait_until("the model request", || asked.load(Ordering::SeqCst));
    faults.raise(fault);
    go.store(true, Ordering::SeqCst);

    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "error", "{t}");
    assert!(
        !root.workspace().join("marker.txt").exists(),
        "the tool ran although its record failed"
    );
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(
        (status, &health["status"]),
        (503, &json!("degraded")),
        "{health}"
    );
    let reason = health["reason"].as_str().unwrap_or("");
    assert!(reason.contains("events.jsonl"), "{health}");
    let (status, body) = d.request("POST", "/v1/tasks", Some(r#"{"prompt": "p"}"#));
    assert_eq!(status, 507, "{body}");
    let resume = format!("/v1/tasks/{id}/resume");
    let (status, body) = d.request("POST", &resume, None);
    assert_eq!(status, 507, "{body}");
    // Refused, not half-claimed: still a stopped task.
    let (_, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!(t["status"], "finished", "{t}");
    check_log(&root);

    faults.clear();
    let id2 = d.submit("again");
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200, "{health}");
    assert_eq!(d.wait_finished(&id2)["stop_reason"], "end_turn");
    let (status, body) = d.request("POST", &resume, None);
    assert_eq!(status, 202, "{body}");
    assert_eq!(d.wait_finished(&id)["stop_reason"], "end_turn");
    let events = root.events();
    check_log(&root);
    assert!(
        of_task(&events, "tool_finished", &id)
            .iter()
            .all(|e| e["is_error"] == true),
        "no tool ran"
    );
    // The resume's line is written before the 202. A failed write leaves no line of
    // the refused resume; after a failed sync its line may stay (written, never
    // confirmed on disk), and is then closed with its own task_finished.
    let refused_left = usize::from(fault.starts_with("events.sync"));
    let resumed = of_task(&events, "task_resumed", &id).len();
    assert_eq!(resumed, 1 + refused_left, "{fault}");
    // One task_finished for the stopped run, one for the resumed one, and one for
    // the refused resume whose line stayed.
    let finished = of_task(&events, "task_finished", &id);
    assert_eq!(finished.len(), 2 + refused_left, "{finished:?}");
    // The refused new task is closed on the record either way: no line at all, or
    // its task_queued followed by a task_finished saying it was not accepted.
    for queued in events.iter().filter(|e| e["type"] == "task_queued") {
        let qid = queued["task_id"].as_str().unwrap();
        let ends = of_task(&events, "task_finished", qid);
        assert!(!ends.is_empty(), "task {qid} left open on the record");
    }
}

#[test]
fn a_failed_fdatasync_fails_closed_like_a_failed_write() {
    fails_closed_and_recovers("events.sync=eio");
}

#[test]
fn a_failed_write_fails_closed_and_the_stopped_task_is_closed_once_space_returns() {
    fails_closed_and_recovers("events.append=enospc");
}

/// A half-written line is cut back: the file holds whole lines only, even while
/// the fault is raised.
#[test]
fn a_write_cut_short_leaves_only_whole_lines() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    let faults = Faults::new(&root);
    let d = Daemon::start_with_env(&root, &[("HARNESSD_FAILPOINTS", &faults.env())]);
    let log: &Path = &root.dir.join("transcripts/events.jsonl");
    let before = std::fs::read(log).unwrap();
    faults.raise("events.append=enospc");
    let (status, body) = d.request("POST", "/v1/tasks", Some(r#"{"prompt": "p"}"#));
    assert_eq!(status, 507, "{body}");
    assert_eq!(
        std::fs::read(log).unwrap(),
        before,
        "the half line was cut back"
    );
    faults.clear();
    d.wait_finished(&d.submit("q"));
    check_log(&root);
}

/// A task stopped by the failing log whose `task_finished` is still owed when the
/// daemon is stopped gets it before `daemon_stopping`: a clean stop leaves nothing
/// open, which is why the next start need not read the whole log.
#[test]
fn a_clean_stop_writes_the_owed_task_finished_first() {
    let Held {
        asked,
        go,
        api: _api,
        root,
    } = held_root();
    let faults = Faults::new(&root);
    let mut d = Daemon::start_with_env(&root, &[("HARNESSD_FAILPOINTS", &faults.env())]);
    let id = d.submit("write the marker");
    wait_until("the model request", || asked.load(Ordering::SeqCst));
    faults.raise("events.append=enospc");
    go.store(true, Ordering::SeqCst);
    assert_eq!(d.wait_finished(&id)["stop_reason"], "error");
    faults.clear();
    unsafe { libc::kill(d.pid(), libc::SIGTERM) };
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    let events = root.events();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "daemon_stopping", "{last}");
    assert_eq!(of_task(&events, "task_finished", &id).len(), 1);
}
