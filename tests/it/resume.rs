//! Resume under a crash and under contention: one run per
//! task however many resumes race, a per-task lock another process can hold, and
//! dangling calls answered from the audit log (docs/operating.md, docs/api.md).

use std::os::fd::AsRawFd;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, last_results, wait_until};

/// Lets run_bash run without asking; write_file still asks.
fn allow_bash(root: &TestRoot) {
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["run_bash", "read_file", "list_dir"]);
        s["tools"]["ask"] = json!(["write_file", "edit_file"]);
    });
}

/// Submits a task whose model request hangs, kills the daemon with SIGKILL while it
/// waits, and restarts it: the task comes back `interrupted`.
fn interrupted_task(api: &FakeApi, root: &TestRoot) -> (Daemon, String) {
    let mut d = Daemon::start(root);
    let id = d.submit("slow model");
    // Killed only once the fake holds the request, so its slow reply is used up and
    // the resumed run gets the next one.
    wait_until("the model request", || api.requests().len() == 1);
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let d = Daemon::start(root);
    let (_, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!(t["status"], "interrupted", "{t}");
    (d, id)
}

/// Eight resume requests at once; their statuses, sorted.
fn eight_resumes(d: &Daemon, id: &str) -> Vec<u16> {
    let path = format!("/v1/tasks/{id}/resume");
    let mut codes: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| d.request("POST", &path, None).0))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    codes.sort_unstable();
    codes
}

#[test]
fn eight_parallel_resumes_run_the_task_once() {
    for trial in 0..5 {
        let mut slow = Reply::text("never seen");
        slow.delay = Duration::from_secs(30);
        // The resumed run's first reply waits a little, so the other requests meet
        // a task that is still running rather than one already finished.
        let mut first = Reply::tool(
            "once",
            "run_bash",
            json!({"command": "echo ran >> ran.txt"}),
        );
        first.delay = Duration::from_millis(300);
        let api = FakeApi::start(vec![slow, first, Reply::text("done")]);
        let root = TestRoot::new(&api.url);
        allow_bash(&root);
        let (d, id) = interrupted_task(&api, &root);
        let codes = eight_resumes(&d, &id);
        assert_eq!(
            codes,
            [202, 409, 409, 409, 409, 409, 409, 409],
            "trial {trial}"
        );
        let t = d.wait_finished(&id);
        assert_eq!(t["stop_reason"], "end_turn", "trial {trial}: {t}");
        // Give a second run, if one had started, time to show itself.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(root.events_of("task_resumed").len(), 1, "trial {trial}");
        assert_eq!(root.events_of("task_finished").len(), 1, "trial {trial}");
        let ran = std::fs::read_to_string(root.workspace().join("ran.txt")).unwrap();
        assert_eq!(ran, "ran\n", "trial {trial}: the tool ran once");
    }
}

#[test]
fn a_task_locked_by_another_process_is_not_resumed() {
    let mut slow = Reply::text("never seen");
    slow.delay = Duration::from_secs(30);
    let api = FakeApi::start(vec![slow, Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    let (d, id) = interrupted_task(&api, &root);
    // Another process (here: this test) drives the task's transcript.
    let lock_path = root.dir.join(format!("transcripts/{id}.lock"));
    let lock = std::fs::File::create(&lock_path).unwrap();
    assert_eq!(
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    let (status, body) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("another process"),
        "{body}"
    );
    assert!(root.events_of("task_resumed").is_empty());
    let (_, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!(
        t["status"], "interrupted",
        "a refused resume leaves the task as it was"
    );
    drop(lock);
    let (status, body) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
    assert_eq!(status, 202, "{body}");
    assert_eq!(d.wait_finished(&id)["answer"], "done");
}

/// The fake model: a `sleep 5` for the task whose prompt says "sleep", a write that
/// asks for approval for the other, and "done" once results come back.
fn crash_model(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if !last_results(body).is_empty() {
        return Reply::text("done");
    }
    if messages[0].to_string().contains("sleep") {
        Reply::tool("slow", "run_bash", json!({"command": "sleep 5"}))
    } else {
        Reply::tool(
            "asked",
            "write_file",
            json!({"path": "a.txt", "content": "x"}),
        )
    }
}

/// The tool_result the fake API received for `call`.
fn result_for(api: &FakeApi, call: &str) -> String {
    api.requests()
        .iter()
        .flat_map(|r| last_results(&r.body))
        .find(|b| b["tool_use_id"] == call)
        .and_then(|b| b["content"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no tool_result for {call}"))
}

#[test]
fn resume_answers_dangling_calls_from_the_log() {
    let api = FakeApi::with_responder(Box::new(crash_model));
    let root = TestRoot::new(&api.url);
    allow_bash(&root);
    root.set_config("daemon", "approval_timeout_secs", "600");
    let mut d = Daemon::start(&root);
    let running = d.submit("sleep a while");
    let pending = d.submit("write a file");
    wait_until("the approval and the running tool", || {
        let allowed = root
            .events_of("policy_decision")
            .iter()
            .any(|e| e["tool_use_id"] == "slow" && e["tier"] == "allow");
        allowed && !root.events_of("approval_requested").is_empty()
    });
    // Past the decision, the call is handed to its tool: it is running now.
    std::thread::sleep(Duration::from_millis(500));
    assert!(root.events_of("tool_finished").is_empty());
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let d = Daemon::start(&root);
    for id in [&running, &pending] {
        let (status, body) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
        assert_eq!(status, 202, "{body}");
        assert_eq!(d.wait_finished(id)["answer"], "done");
    }
    let slow = result_for(&api, "slow");
    assert!(
        slow.starts_with("state unknown: it may have run in part; check before repeating it"),
        "{slow}"
    );
    let asked = result_for(&api, "asked");
    assert!(asked.starts_with("not executed"), "{asked}");
    // Every call in the log is closed exactly once.
    for call in ["slow", "asked"] {
        let finished = root
            .events_of("tool_finished")
            .into_iter()
            .filter(|e| e["tool_use_id"] == call)
            .count();
        assert_eq!(finished, 1, "{call}");
    }
}

/// A `harnessd run` holds its task's lock for the whole run: a daemon started on
/// the same root meanwhile shows the task as running (not interrupted), refuses to
/// resume it, and records no `task_interrupted`.
#[test]
fn a_daemon_leaves_a_live_runs_task_alone() {
    let mut slow = Reply::text("the answer");
    slow.delay = Duration::from_secs(3);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    let run = root.command(&["run", "x"]).spawn().unwrap();
    wait_until("the model request", || api.requests().len() == 1);
    let id = std::fs::read_dir(root.dir.join("transcripts"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find_map(|n| n.strip_suffix(".json").map(str::to_string))
        .expect("the run's transcript");
    let d = Daemon::start(&root);
    let (_, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!(t["status"], "running", "{t}");
    let (code, body) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
    assert_eq!(code, 409, "{body}");
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(root.events_of("task_interrupted").is_empty());
    assert_eq!(root.transcript()["status"], "finished");
}
