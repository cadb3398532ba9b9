//! A stop loses no accepted task (docs/api.md, docs/operating.md): on SIGTERM no queued
//! task starts, the running one is left `interrupted` once
//! `daemon.shutdown_grace_secs` is over, and the queued ones stay queued, with
//! nothing recorded for them, to run after the next start. A resume accepted but
//! still waiting for a slot is as durable, across SIGTERM and kill -9 alike.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, wait_until};
use crate::queue::kill9;

/// A model that holds its answer for a minute while `hold` is set and the task's
/// prompt is `prompt`, and answers at once otherwise.
pub(crate) fn holding_model(
    holds: Vec<(&'static str, Arc<AtomicBool>)>,
) -> Box<dyn Fn(&Value) -> Reply + Send + Sync> {
    Box::new(move |body: &Value| {
        let prompt = body["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        let mut reply = Reply::text("done");
        if holds
            .iter()
            .any(|(p, hold)| *p == prompt && hold.load(Ordering::SeqCst))
        {
            reply.delay = Duration::from_secs(60);
        }
        reply
    })
}

/// Stops the daemon with SIGTERM; it must exit 0.
pub(crate) fn sigterm(mut d: Daemon) {
    unsafe { libc::kill(d.pid(), libc::SIGTERM) };
    let status = d.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

fn transcript_status(root: &TestRoot, id: &str) -> String {
    let path = root.dir.join(format!("transcripts/{id}.json"));
    let t: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    t["status"].as_str().unwrap().to_string()
}

/// How many events of `kind` task `id` has.
fn count(root: &TestRoot, kind: &str, id: &str) -> usize {
    root.events_of(kind)
        .iter()
        .filter(|e| e["task_id"] == id)
        .count()
}

#[test]
fn sigterm_keeps_fifty_queued_tasks_for_the_next_start() {
    let hold = Arc::new(AtomicBool::new(true));
    let api = FakeApi::with_responder(holding_model(vec![("hold", hold.clone())]));
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "max_concurrent_tasks", "1");
    root.set_config("daemon", "shutdown_grace_secs", "1");
    let d = Daemon::start(&root);
    let held = d.submit("hold");
    wait_until("the held model request", || api.requests().len() == 1);
    let queued: Vec<String> = (0..50).map(|i| d.submit(&format!("queued {i}"))).collect();
    let log = d.log.clone();
    sigterm(d);

    assert_eq!(root.events().last().unwrap()["type"], "daemon_stopping");
    assert_eq!(
        api.requests().len(),
        1,
        "a queued task started after SIGTERM"
    );
    // The held task has not ended: it is interrupted, resumable.
    assert!(root.events_of("task_finished").is_empty());
    assert_eq!(count(&root, "task_interrupted", &held), 1);
    assert_eq!(transcript_status(&root, &held), "interrupted");
    for id in &queued {
        for kind in ["task_started", "task_cancelled", "task_interrupted"] {
            assert_eq!(count(&root, kind, id), 0, "{kind} for queued task {id}");
        }
        assert_eq!(transcript_status(&root, id), "queued", "{id}");
    }
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(stderr.contains("50 queued task(s) stay queued"), "{stderr}");

    hold.store(false, Ordering::SeqCst);
    let d = Daemon::start(&root);
    let (_, t) = d.request("GET", &format!("/v1/tasks/{held}"), None);
    assert_eq!(t["status"], "interrupted", "{t}");
    for id in &queued {
        let t = d.wait_finished(id);
        assert_eq!(t["stop_reason"], "end_turn", "{t}");
        assert_eq!(count(&root, "task_started", id), 1, "{id} ran once");
    }
    let requeued: BTreeSet<String> = root
        .events_of("task_requeued")
        .iter()
        .map(|e| e["task_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(requeued, queued.iter().cloned().collect());
    let (code, body) = d.request("POST", &format!("/v1/tasks/{held}/resume"), None);
    assert_eq!(code, 202, "{body}");
    assert_eq!(d.wait_finished(&held)["stop_reason"], "end_turn");
}

/// A task interrupted by a kill, then resumed while another task holds the only
/// slot, then the daemon stopped by `stop` before the resume got its slot: after
/// the next start the resume runs, once.
fn resume_waiting_for_a_slot_survives(stop: fn(Daemon)) {
    let (hold_first, hold_other) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    );
    let api = FakeApi::with_responder(holding_model(vec![
        ("resume me", hold_first.clone()),
        ("hold the slot", hold_other.clone()),
    ]));
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "max_concurrent_tasks", "1");
    root.set_config("daemon", "shutdown_grace_secs", "1");
    let d = Daemon::start(&root);
    let id = d.submit("resume me");
    wait_until("its model request", || api.requests().len() == 1);
    kill9(d);
    hold_first.store(false, Ordering::SeqCst);

    let d = Daemon::start(&root);
    d.submit("hold the slot");
    wait_until("the other task's request", || api.requests().len() == 2);
    let (code, t) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
    assert_eq!(code, 202, "{t}");
    assert_eq!(t["status"], "queued", "{t}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(api.requests().len(), 2, "the resume waits for the slot");
    stop(d);
    assert_eq!(
        transcript_status(&root, &id),
        "queued",
        "the resume is on disk"
    );

    let d = Daemon::start(&root);
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "end_turn", "{t}");
    assert_eq!(count(&root, "task_requeued", &id), 1);
    // One resume, recorded once, not a second start.
    assert_eq!(count(&root, "task_resumed", &id), 1);
    assert_eq!(count(&root, "task_started", &id), 1);
    assert_eq!(count(&root, "task_finished", &id), 1);
}

#[test]
fn a_resume_waiting_for_a_slot_survives_kill_9() {
    resume_waiting_for_a_slot_survives(kill9);
}

#[test]
fn a_resume_waiting_for_a_slot_survives_sigterm() {
    resume_waiting_for_a_slot_survives(sigterm);
}

/// After a restart `tasks` shows each older task's prompt (its start, from the
/// transcript), with the daemon and without it, not `-`.
#[test]
fn tasks_after_a_restart_show_each_older_prompt() {
    let api = FakeApi::start(vec![Reply::text("one"), Reply::text("two")]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let long = format!("second task, {}", "x".repeat(200));
    for prompt in ["first task", long.as_str()] {
        let id = d.submit(prompt);
        d.wait_finished(&id);
    }
    sigterm(d);
    let offline = crate::common::stdout(&root.run(&["tasks"]));
    let d = Daemon::start(&root);
    let online = crate::common::stdout(&root.run(&["tasks"]));
    let (_, list) = d.request("GET", "/v1/tasks", None);
    let prompts: BTreeSet<String> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["prompt"].as_str().unwrap_or("-").to_string())
        .collect();
    // The start a listing keeps of a live task: its first 100 characters.
    let cut = format!("{}…", long.chars().take(100).collect::<String>());
    assert_eq!(prompts, BTreeSet::from(["first task".to_string(), cut]));
    for shown in [&offline, &online] {
        assert!(shown.contains("first task"), "{shown}");
        assert!(shown.contains("second task, xxx"), "{shown}");
    }
}

/// The prompts of the model requests so far, in the order they came.
fn prompts_asked(api: &FakeApi) -> Vec<String> {
    api.requests()
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// One slot, held; 30 tasks queued behind it; every other one cancelled while it
/// waits: each cancelled one ends at once without a slot and never asks the model,
/// and after SIGTERM and a restart the rest start in the order they were
/// submitted, none left queued.
#[test]
fn cancelled_waiters_leave_the_rest_in_submission_order_across_a_restart() {
    let hold = Arc::new(AtomicBool::new(true));
    let api = FakeApi::with_responder(holding_model(vec![("hold", hold.clone())]));
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "max_concurrent_tasks", "1");
    root.set_config("daemon", "shutdown_grace_secs", "1");
    let d = Daemon::start(&root);
    let held = d.submit("hold");
    wait_until("the held model request", || api.requests().len() == 1);
    let queued: Vec<String> = (0..30).map(|i| d.submit(&format!("queued {i}"))).collect();
    let (cancelled, kept): (Vec<_>, Vec<_>) =
        queued.iter().enumerate().partition(|(i, _)| i % 2 == 1);
    for (_, id) in &cancelled {
        let (code, body) = d.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
        assert_eq!(code, 202, "{body}");
    }
    for (_, id) in &cancelled {
        assert_eq!(d.wait_finished(id)["stop_reason"], "cancelled");
    }
    for (_, id) in &kept {
        let (_, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
        assert_eq!(t["status"], "queued", "{t}");
    }
    sigterm(d);
    assert_eq!(prompts_asked(&api), ["hold"]);

    hold.store(false, Ordering::SeqCst);
    let d = Daemon::start(&root);
    for (_, id) in &kept {
        assert_eq!(d.wait_finished(id)["stop_reason"], "end_turn");
    }
    let expected: Vec<String> = std::iter::once("hold".to_string())
        .chain(kept.iter().map(|(i, _)| format!("queued {i}")))
        .collect();
    assert_eq!(prompts_asked(&api), expected, "not in submission order");
    let (_, page) = d.request("GET", "/v1/tasks?status=queued", None);
    assert_eq!(page["tasks"].as_array().map(Vec::len), Some(0), "{page}");
    let (_, t) = d.request("GET", &format!("/v1/tasks/{held}"), None);
    assert_eq!(t["status"], "interrupted", "{t}");
    for (_, id) in &cancelled {
        assert_eq!(count(&root, "task_requeued", id), 0, "{id}");
    }
}

/// A queued task cancelled while the daemon stops (on a connection kept open from
/// before SIGTERM) is either ended cancelled or refused: a cancel answered 202 is
/// never followed by the task running after the next start.
#[test]
fn a_queued_task_cancelled_during_the_stop_is_not_run_after_the_restart() {
    use std::io::{Read, Write};
    let hold = Arc::new(AtomicBool::new(true));
    let api = FakeApi::with_responder(holding_model(vec![("hold", hold.clone())]));
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "max_concurrent_tasks", "1");
    root.set_config("daemon", "shutdown_grace_secs", "3");
    let mut d = Daemon::start(&root);
    d.submit("hold");
    wait_until("the held model request", || api.requests().len() == 1);
    let id = d.submit("cancel me");
    let mut kept = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = kept.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    unsafe { libc::kill(d.pid(), libc::SIGTERM) };
    // Within the grace: the held task still runs, the connection is still served.
    std::thread::sleep(Duration::from_millis(500));
    write!(
        kept,
        "POST /v1/tasks/{id}/cancel HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n"
    )
    .unwrap();
    let n = kept.read(&mut buf).unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(d.child.wait().unwrap().success());
    assert_eq!(root.events().last().unwrap()["type"], "daemon_stopping");
    let accepted = answer.starts_with("HTTP/1.1 202");
    assert!(accepted || answer.starts_with("HTTP/1.1 409"), "{answer}");

    hold.store(false, Ordering::SeqCst);
    let d = Daemon::start(&root);
    let t = d.wait_finished(&id);
    let asked = prompts_asked(&api).contains(&"cancel me".to_string());
    if accepted {
        assert_eq!(t["stop_reason"], "cancelled", "answered 202, then ran: {t}");
        assert!(!asked, "answered 202, then asked the model");
    } else {
        assert_eq!(t["stop_reason"], "end_turn", "{t}");
        assert_eq!(
            count(&root, "task_cancelled", &id),
            0,
            "refused, yet recorded"
        );
    }
}
