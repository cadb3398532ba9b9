//! The log is the truth (docs/events.md): a full `transcripts/` (a tmpfs this test
//! mounts, as root) makes a task's saves fail while its audit log (kept elsewhere)
//! still takes every line. The task's tool ran, its result was never saved, the
//! log has its `task_finished`. Once space returns the transcript is brought in
//! line — by the running daemon with no request, or at the next start after a
//! kill -9 — and is never left `running` or resumable. A full log recovers its
//! `/healthz` by itself too.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, wait_until};
use crate::disk_full::{Mount, fill};

/// A root whose model asks once for a `run_bash` that marks `started` in the
/// workspace and waits for `go` there, then answers plainly; `transcripts/` is a
/// small tmpfs and the audit log lives outside it.
fn held_tool_root() -> (FakeApi, TestRoot, Mount) {
    let api = FakeApi::with_responder(Box::new(|req| {
        let asked_before = req.to_string().contains("tool_result");
        if asked_before {
            return Reply::text("done");
        }
        Reply::tool(
            "call_1",
            "run_bash",
            json!({"command": "touch started; until [ -e go ]; do sleep 0.05; done; echo ran"}),
        )
    }));
    let (root, mount) = small_transcripts_root(&api);
    (api, root, mount)
}

/// A root for `api` where `run_bash` runs without asking, `transcripts/` is a
/// small tmpfs and the audit log lives outside it.
fn small_transcripts_root(api: &FakeApi) -> (TestRoot, Mount) {
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["run_bash"]);
        s["tools"]["ask"] = json!([]);
    });
    root.set_config("paths", "events", "\"log/events.jsonl\"");
    root.set_config("audit", "reserve_mb", "0");
    let transcripts = root.dir.join("transcripts");
    let _ = std::fs::remove_dir_all(&transcripts);
    let mount = Mount::tmpfs(&transcripts, "1m").expect("mount a tmpfs (run as root)");
    (root, mount)
}

fn events(root: &TestRoot) -> Vec<Value> {
    std::fs::read_to_string(root.dir.join("log/events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn transcript(root: &TestRoot, id: &str) -> Value {
    let path = root.dir.join(format!("transcripts/{id}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Every `tool_use` of the transcript is answered by the next message.
fn open_calls(t: &Value) -> Vec<String> {
    let messages = t["messages"].as_array().unwrap();
    let mut open = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] != "tool_use" {
                continue;
            }
            let id = b["id"].as_str().unwrap();
            let answered = messages.get(i + 1).is_some_and(|n| {
                n["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r["type"] == "tool_result" && r["tool_use_id"] == id)
            });
            if !answered {
                open.push(id.to_string());
            }
        }
    }
    open
}

/// Runs the task until its tool ran with the disk full; returns its id. The
/// filler is `transcripts/filler`.
fn run_with_full_transcripts(d: &Daemon, root: &TestRoot) -> String {
    let id = d.submit("run it");
    // The loop is not provable, so it is asked: approved here.
    let asked = || {
        events(root)
            .iter()
            .find(|e| e["type"] == "approval_requested")
            .map(|e| e["approval_id"].as_str().unwrap().to_string())
    };
    wait_until("the approval request", || asked().is_some());
    let path = format!("/v1/approvals/{}", asked().unwrap());
    let (status, body) = d.request("POST", &path, Some(r#"{"decision": "approve"}"#));
    assert_eq!(status, 200, "{body}");
    let ws = root.workspace();
    wait_until("the tool to start", || ws.join("started").exists());
    fill(&root.dir.join("transcripts/filler"));
    std::fs::write(ws.join("go"), "").unwrap();
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "error", "{t}");
    let log = events(root);
    assert!(
        log.iter().any(|e| e["type"] == "tool_finished"
            && e["task_id"] == id.as_str()
            && e["exit_code"] == 0),
        "the tool ran: {log:?}"
    );
    assert!(
        log.iter()
            .any(|e| e["type"] == "task_finished" && e["task_id"] == id.as_str())
    );
    // What the full disk left: the log and the transcript disagree.
    let on_disk = transcript(root, &id);
    assert_eq!(on_disk["status"], "running", "{on_disk}");
    assert_eq!(open_calls(&on_disk), vec!["call_1".to_string()]);
    id
}

fn assert_in_line(root: &TestRoot, id: &str) {
    let t = transcript(root, id);
    assert_eq!(t["status"], "finished", "{t}");
    assert_eq!(t["stop_reason"], "error", "{t}");
    assert!(open_calls(&t).is_empty(), "{t}");
}

#[test]
fn the_next_start_brings_transcripts_in_line_with_the_log() {
    let (_api, root, _mount) = held_tool_root();
    let d = Daemon::start(&root);
    let id = run_with_full_transcripts(&d, &root);
    crate::queue::kill9(d);
    std::fs::remove_file(root.dir.join("transcripts/filler")).unwrap();

    let d = Daemon::start(&root);
    assert_in_line(&root, &id);
    let t = transcript(&root, &id);
    let results = t["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("ran (exit code 0)"),
        "the call ran, and its answer says so: {results}"
    );
    let (code, task) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!((code, &task["status"]), (200, &"finished".into()), "{task}");
    assert!(
        !events(&root)
            .iter()
            .any(|e| e["type"] == "task_interrupted" && e["task_id"] == id.as_str()),
        "a task the log shows finished is not interrupted"
    );
}

#[test]
fn the_running_daemon_saves_the_transcript_once_space_returns() {
    let (_api, root, _mount) = held_tool_root();
    let d = Daemon::start(&root);
    let id = run_with_full_transcripts(&d, &root);
    std::fs::remove_file(root.dir.join("transcripts/filler")).unwrap();
    // No request: the daemon tries the save again by itself.
    wait_until("the transcript saved as finished", || {
        transcript(&root, &id)["status"] == "finished"
    });
    assert_in_line(&root, &id);
    drop(d);
}

#[test]
fn healthz_recovers_without_a_request_once_space_returns() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    root.set_config("audit", "reserve_mb", "0");
    let transcripts = root.dir.join("transcripts");
    let _ = std::fs::remove_dir_all(&transcripts);
    let _mount = Mount::tmpfs(&transcripts, "256k").expect("mount a tmpfs (run as root)");
    let d = Daemon::start(&root);
    let filler = transcripts.join("filler");
    fill(&filler);
    let big = json!({"prompt": "p".repeat(6000)}).to_string();
    let (status, body) = d.request("POST", "/v1/tasks", Some(&big));
    assert_eq!(status, 507, "{body}");
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 503, "{health}");
    std::fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200, "back with no POST: {health}");
    drop(d);
}

/// A clean stop leaves a checkpoint right before `daemon_stopping`, from which the
/// next start reads the log; a task that finished before it is not looked at again.
#[test]
fn a_clean_stop_writes_a_checkpoint_before_daemon_stopping() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    let mut d = Daemon::start(&root);
    let id = d.submit("one");
    d.wait_finished(&id);
    unsafe { libc::kill(d.pid(), libc::SIGTERM) };
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    let log = root.events();
    let n = log.len();
    assert_eq!(log[n - 1]["type"], "daemon_stopping");
    assert_eq!(log[n - 2]["type"], "checkpoint", "{:?}", log[n - 2]);
    assert_eq!(log[n - 2]["reason"], "stop");
}

#[test]
fn a_save_that_fails_before_the_calls_runs_none_of_them() {
    // The model's answer is held until `transcripts/` is full, so the save
    // before its calls (written while they are recorded and judged) fails: none
    // runs, each is answered "not executed", and the task stops with `error`.
    let full = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = full.clone();
    let api = FakeApi::with_responder(Box::new(move |req| {
        if req.to_string().contains("tool_result") {
            return Reply::text("done");
        }
        while !seen.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        Reply::tools(&[
            ("call_1", "run_bash", json!({"command": "touch ran1"})),
            ("call_2", "run_bash", json!({"command": "touch ran2"})),
        ])
    }));
    let (root, _mount) = small_transcripts_root(&api);
    let d = Daemon::start(&root);
    let id = d.submit("run it");
    wait_until("the model request", || {
        events(&root).iter().any(|e| e["type"] == "model_request")
    });
    fill(&root.dir.join("transcripts/filler"));
    full.store(true, std::sync::atomic::Ordering::SeqCst);
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "error", "{t}");
    let ws = root.workspace();
    assert!(
        !ws.join("ran1").exists() && !ws.join("ran2").exists(),
        "a call ran"
    );
    let log = events(&root);
    let of = |kind: &str| {
        log.iter()
            .filter(|e| e["type"] == kind && e["task_id"] == id.as_str())
            .count()
    };
    assert_eq!(of("tool_requested"), 2, "{log:?}");
    assert_eq!(of("tool_finished"), 2, "{log:?}");
    assert!(
        log.iter()
            .filter(|e| e["type"] == "tool_finished")
            .all(|e| e["is_error"] == true),
        "{log:?}"
    );
    let finished = log
        .iter()
        .find(|e| e["type"] == "task_finished" && e["task_id"] == id.as_str())
        .expect("task_finished");
    assert!(
        finished.to_string().contains("cannot save the transcript"),
        "{finished}"
    );
}
