//! `harnessd events` and `/v1/events` queries over a multi-file log, checked
//! against a reference filter written here; rotation under load with a follower
//! that falls behind and must still see every line.

use std::io::BufRead;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::audit::{all_lines, assert_chain, log_files};
use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

/// A root with several tasks over several rotated files.
fn multi_file_root() -> (FakeApi, TestRoot) {
    let mut script = Vec::new();
    for i in 0..4 {
        script.push(Reply::tool(
            &format!("t{i}"),
            if i % 2 == 0 { "read_file" } else { "list_dir" },
            json!({"path": "."}),
        ));
        script.push(Reply::text(&format!("answer {i}")));
    }
    let api = FakeApi::start(script);
    let root = TestRoot::new(&api.url);
    root.set_config("audit", "rotate_mb", "0.003");
    for i in 0..4 {
        root.run(&["run", &format!("task number {i}")]);
    }
    assert!(log_files(&root).len() >= 3, "{:?}", log_files(&root));
    (api, root)
}

/// The reference: every line of every file, parsed, filtered by `keep`.
fn reference(root: &TestRoot, keep: impl Fn(&Value, &str) -> bool) -> Vec<String> {
    all_lines(root)
        .into_iter()
        .filter(|l| keep(&serde_json::from_str(l).unwrap(), l))
        .collect()
}

fn events_json(root: &TestRoot, args: &[&str]) -> Vec<String> {
    let mut all = vec!["events", "--json"];
    all.extend_from_slice(args);
    let out = root.run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out).lines().map(str::to_string).collect()
}

#[test]
fn queries_match_a_reference_filter_from_files_and_through_the_daemon() {
    let (_api, root) = multi_file_root();
    let lines = all_lines(&root);
    let task: Value =
        serde_json::from_str(lines.iter().find(|l| l.contains("task number 2")).unwrap()).unwrap();
    let task = task["task_id"].as_str().unwrap().to_string();
    let mid: Value = serde_json::from_str(&lines[lines.len() / 2]).unwrap();
    let mid_ts = mid["ts"].as_str().unwrap().to_string();
    type Case = (Vec<String>, Box<dyn Fn(&Value, &str) -> bool>);
    let cases = |task: String, mid_ts: String| -> Vec<Case> {
        let (t, m1, m2) = (task.clone(), mid_ts.clone(), mid_ts.clone());
        vec![
            (
                vec!["--task".into(), task],
                Box::new(move |e, _| e["task_id"] == t.as_str()),
            ),
            (
                vec!["--type".into(), "tool_finished".into()],
                Box::new(|e, _| e["type"] == "tool_finished"),
            ),
            (
                vec!["--tool".into(), "list_dir".into()],
                Box::new(|e, _| e["tool"] == "list_dir"),
            ),
            (
                vec!["--grep".into(), "task number [23]".into()],
                Box::new(|_, l| l.contains("task number 2") || l.contains("task number 3")),
            ),
            (
                vec!["--since".into(), mid_ts],
                Box::new(move |e, _| e["ts"].as_str().unwrap() >= m1.as_str()),
            ),
            (
                vec![
                    "--until".into(),
                    m2.clone(),
                    "--type".into(),
                    "task_started".into(),
                ],
                Box::new(move |e, _| {
                    e["ts"].as_str().unwrap() <= m2.as_str() && e["type"] == "task_started"
                }),
            ),
        ]
    };
    for (args, keep) in cases(task.clone(), mid_ts.clone()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let want = reference(&root, &keep);
        assert!(!want.is_empty(), "{args:?} selects nothing");
        assert_eq!(events_json(&root, &args), want, "from files: {args:?}");
    }
    // The same through the daemon (its own start lines are in the reference too).
    let daemon = Daemon::start(&root);
    for (args, keep) in cases(task, mid_ts) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let want = reference(&root, &keep);
        assert_eq!(
            events_json(&root, &args),
            want,
            "through the daemon: {args:?}"
        );
    }
    drop(daemon);
}

#[test]
fn an_unknown_type_is_a_usage_error_and_an_unparseable_line_is_named() {
    let (_api, root) = multi_file_root();
    let out = root.run(&["events", "--type", "tool_request"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("tool_request") && stderr(&out).contains("tool_requested"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty());
    let first = log_files(&root)[0].clone();
    let mut text = std::fs::read_to_string(&first).unwrap();
    text.insert_str(text.find('\n').unwrap() + 1, "not json\n");
    std::fs::write(&first, text).unwrap();
    let out = root.run(&["events"]);
    assert_eq!(out.status.code(), Some(1));
    let name = first.file_name().unwrap().to_str().unwrap();
    assert!(
        stderr(&out).contains(&format!("{name}:2: unreadable line")),
        "{}",
        stderr(&out)
    );
    // The table still shows the rest.
    assert!(stdout(&out).contains("task_finished"), "{}", stdout(&out));
}

#[test]
fn rotation_under_load_loses_no_line_even_for_a_lagging_follower() {
    let api = FakeApi::with_responder(Box::new(|_| Reply::text("done")));
    let root = TestRoot::new(&api.url);
    root.set_config("audit", "rotate_mb", "0.02");
    root.set_config("audit", "sync", "\"off\"");
    root.set_config("daemon", "max_concurrent_tasks", "8");
    let daemon = Daemon::start(&root);
    let mut follower = root
        .command(&["events", "--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(follower.stdout.take().unwrap());
    // It is connected once it has printed the daemon's first line.
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let mut seen = vec![first.trim_end().to_string()];
    // Stopped, it reads nothing: its pipe, then the daemon's channel fill, and the
    // live broadcast (1024 lines) overflows for it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(follower.id() as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let ids: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let daemon = &daemon;
                s.spawn(move || {
                    (0..100)
                        .map(|i| daemon.submit(&format!("load {w}-{i}")))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    for id in &ids {
        daemon.wait_finished(id);
    }
    let lines = all_lines(&root);
    assert!(lines.len() > 1900, "{} lines", lines.len());
    assert!(log_files(&root).len() >= 3);
    assert_chain(&lines);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(follower.id() as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    for line in reader.lines() {
        seen.push(line.unwrap());
        if seen.len() >= lines.len() {
            break;
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    // Every line, in order, byte for byte as in the files (live lines too).
    let seqs = |v: &[String]| -> Vec<u64> {
        v.iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    };
    assert_eq!(seqs(&seen), seqs(&lines));
    assert!(seen == lines, "a followed line differs from the file's");
    let out = root.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn replay_and_the_bad_query_answer_read_across_rotation() {
    let api = FakeApi::start(vec![
        Reply::tool("r1", "read_file", json!({"path": "scores.csv"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("audit", "rotate_mb", "0.001");
    assert_eq!(root.run(&["run", "x"]).status.code(), Some(0));
    // The decision is in a rotated file, not the live one.
    let live = std::fs::read_to_string(root.dir.join("transcripts/events.jsonl")).unwrap();
    assert!(!live.contains("policy_decision"), "{live}");
    assert!(
        all_lines(&root)
            .iter()
            .any(|l| l.contains("policy_decision"))
    );
    root.edit_settings(|s| {
        s["tools"]["deny"]
            .as_array_mut()
            .unwrap()
            .push(json!("read_file(workspace/*.csv)"))
    });
    let out = root.run(&[
        "replay",
        "--json",
        root.dir.join("transcripts").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["changed"][0]["was"], "allow (read_file)", "{v}");
    // The daemon answers a bad query with a JSON 400 naming the valid types.
    let d = Daemon::start(&root);
    let (status, body) = d.request("GET", "/v1/events?type=tool_request", None);
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("tool_requested"), "{message}");
    let (status, body) = d.request("GET", "/v1/events?since=yesterday", None);
    assert_eq!(status, 400, "{body}");
}
