//! Attacks on the changes of the last hour (tasks without a daemon, audit verify
//! --head, remember's refusal of `<` and pipes, the USD budget, the writer's tail
//! read, the live-text feed, --task file skipping), each one a bug found against
//! the real binary.

use crate::attack_audit::{RemoveOnDrop, ends_within_30s};
use crate::audit::{sha256_hex, write_lines};
use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

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

/// `audit verify --head SEQ:HASH` compared the hash only if a line with that seq
/// was met, and otherwise checked only that the log did not end before it. A log
/// rewritten whole with its seqs moved past the head's (a fresh chain from the
/// genesis hash, so it verifies on its own) never holds that seq, and passed
/// against the real head. The head's line must now be found.
#[test]
fn a_rewritten_log_that_skips_the_heads_seq_fails_against_the_head() {
    let api = FakeApi::start(vec![Reply::text("one")]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "first"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = root.run(&["audit", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let head_seq = report["head_seq"].as_u64().unwrap();
    let head = format!("{head_seq}:{}", report["head"].as_str().unwrap());
    let file = root.dir.join("transcripts/events.jsonl");
    let pristine = std::fs::read_to_string(&file).unwrap();
    let mut prev = "0".repeat(64);
    let mut forged = Vec::new();
    for line in pristine.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["seq"] = (v["seq"].as_u64().unwrap() + head_seq).into();
        v["prev"] = prev.clone().into();
        let text = v.to_string();
        prev = sha256_hex(text.as_bytes());
        forged.push(text);
    }
    write_lines(&file, &forged);
    assert_eq!(root.run(&["audit", "verify"]).status.code(), Some(0));
    let out = root.run(&["audit", "verify", "--head", &head]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("seq {head_seq}")),
        "{}",
        stderr(&out)
    );
    // The head an empty log has (logged before its first line) has no line to find.
    let genesis = format!("0:{}", "0".repeat(64));
    let out = root.run(&["audit", "verify", "--head", &genesis]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
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

/// A `pause_turn` answer is sent again at once, and that path skipped the limits
/// checked before calls run: a model (or a hostile API) answering `pause_turn`
/// over and over was asked again up to the turn limit however far past
/// `loop.usd_budget` the task's cost went. The budgets now stop it there too.
#[test]
fn pause_turn_does_not_run_past_the_usd_budget() {
    let paused = serde_json::json!([{"type": "server_tool_use", "id": "srv_1",
        "name": "web_search", "input": {"query": "q"}}]);
    let mut script: Vec<Reply> = (0..6)
        .map(|_| Reply::message(paused.clone(), "pause_turn"))
        .collect();
    script.push(Reply::text("done"));
    let api = FakeApi::start(script);
    let root = crate::cost::priced_root(&api);
    root.set_config("loop", "usd_budget", "0.02");
    let out = root.run(&["run", "go"]);
    // $0.015 a request: the second one reaches the budget, no third is sent.
    assert_eq!(api.requests().len(), 2, "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let finished = &root.events_of("task_finished")[0];
    assert_eq!(finished["stop_reason"], "usd_budget", "{finished}");
}

/// `/v1/events?follow=1&text=1` took the next text delta or the next event,
/// whichever `select!` picked at random when both were waiting, so a follower that
/// fell behind (here: held up while the log's earlier lines were sent) got a
/// turn's `model_response`, even its `task_finished`, before that turn's text —
/// `submit --wait` printed `[done]` mid-answer. Each delta now carries the seq of
/// the last line written before it and is sent right after that line: every
/// delta of a turn comes after its request and before its response.
#[test]
fn live_text_comes_before_the_response_of_its_turn() {
    use std::io::{Read as _, Write as _};
    let big = "x".repeat(8_000);
    let mut script = Vec::new();
    for turn in 0..8 {
        // Distinct calls, or the no-progress stop ends the task early.
        let input = serde_json::json!({"path": format!("d{turn}")});
        let mut r = Reply::tool(&format!("tu{turn}"), "list_dir", input);
        let mut body = r.body_json();
        let content = body["content"].as_array_mut().unwrap();
        content.insert(
            0,
            serde_json::json!({"type": "text", "text": format!("turn {turn} text")}),
        );
        r = Reply::message(body["content"].clone(), "tool_use");
        script.push(r);
    }
    script.push(Reply::text("the end of it"));
    let api = FakeApi::start(script);
    let root = TestRoot::new(&api.url);
    // Earlier lines the follower is sent first (chained, so the daemon continues
    // them): more than the socket holds unread and the daemon queues for one
    // follower, so the follower is held up while the task runs.
    let mut prev = "0".repeat(64);
    let mut lines = Vec::new();
    for seq in 1..=300u64 {
        let line = serde_json::json!({"seq": seq, "ts": "2026-01-01T00:00:00.000Z",
            "prev": prev, "type": "daemon_stopping", "reason": big})
        .to_string();
        prev = sha256_hex(line.as_bytes());
        lines.push(line);
    }
    write_lines(&root.dir.join("transcripts/events.jsonl"), &lines);
    let daemon = Daemon::start(&root);
    let mut s =
        std::os::unix::net::UnixStream::connect(root.dir.join("run/harnessd.sock")).unwrap();
    write!(
        s,
        "GET /v1/events?follow=1&text=1 HTTP/1.1\r\nhost: x\r\n\r\n"
    )
    .unwrap();
    let id = daemon.submit("go");
    daemon.wait_finished(&id);
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let done = |raw: &[u8]| {
        String::from_utf8_lossy(raw)
            .lines()
            .any(|l| l.contains(&id) && l.contains("\"type\":\"task_finished\""))
    };
    while !done(&raw) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before the task's end");
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw);
    let deltas = text.matches("\"text_delta\"").count();
    assert!(
        deltas >= 15,
        "{deltas} text deltas:\n{}",
        &text[text.len().saturating_sub(6000)..]
    );
    let mut requested = std::collections::HashSet::new();
    let mut responded = std::collections::HashSet::new();
    let mut late = Vec::new();
    for line in text.lines().filter(|l| l.contains(&id)) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match v["type"].as_str() {
            Some("model_response") => {
                responded.insert(v["turn"].as_u64());
            }
            Some("model_request") => {
                requested.insert(v["turn"].as_u64());
            }
            Some("text_delta")
                if responded.contains(&v["turn"].as_u64())
                    || !requested.contains(&v["turn"].as_u64()) =>
            {
                late.push(v)
            }
            _ => {}
        }
    }
    assert!(
        late.is_empty(),
        "text out of its turn (after its response or before its request): {late:?}"
    );
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
