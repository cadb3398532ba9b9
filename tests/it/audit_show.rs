//! `harnessd show ID` from the files, with no daemon running (docs/commands.md), and the
//! simple commands of a `run_bash` call findable in the log.

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

#[test]
fn show_without_a_daemon_lists_each_call_with_its_decision_and_approver() {
    let long = "x".repeat(6000);
    let api = FakeApi::start(vec![
        Reply::tool(
            "w1",
            "write_file",
            json!({"path": "out.txt", "content": long}),
        ),
        Reply::tool(
            "b1",
            "run_bash",
            json!({"command": "ls | xargs rm -f nothing.txt"}),
        ),
        Reply::text("all done\u{1b}[31m"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--yes", "look \u{202e} around"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = root.events_of("task_started")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = root.run(&["show", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "prompt   look \\u202e around",
        "call 1  write_file  w1",
        "call 2  run_bash  b1",
        "approval  approved by flag",
        "output    transcripts/",
        "all done\\x1b[31m",
    ] {
        assert!(text.contains(want), "{want:?} missing in:\n{text}");
    }
    // The whole input, not the log's cut copy.
    assert!(text.contains(&long), "input cut");
    assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'));
    let j: Value = serde_json::from_slice(&root.run(&["show", "--json", &id]).stdout).unwrap();
    assert_eq!(j["calls"][0]["tier"], "ask");
    assert_eq!(j["calls"][0]["rule"], "write_file");
    assert_eq!(j["calls"][0]["approved_by"], "flag");
    assert_eq!(j["calls"][0]["is_error"], false);
    assert!(j["calls"][1]["tier"].is_string(), "{}", j["calls"][1]);
    assert_eq!(
        j["calls"][1]["commands"],
        json!(["ls", "xargs rm -f nothing.txt"])
    );
    // `xargs rm` is found in the log by the simple commands it records.
    let out = root.run(&[
        "events",
        "--json",
        "--type",
        "policy_decision",
        "--grep",
        "xargs rm",
    ]);
    let listed = stdout(&out);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 1, "{}", stdout(&out));
    assert!(lines[0].contains("\"tool_use_id\":\"b1\""));
}

/// `tasks` with no daemon lists the transcripts, newest first, with the prompt's
/// start; a transcript that does not parse is named and makes the exit 1.
#[test]
fn tasks_without_a_daemon_lists_the_transcripts() {
    let api = FakeApi::start(vec![Reply::text("one"), Reply::text("two")]);
    let root = TestRoot::new(&api.url);
    for prompt in ["count the rows of scores.csv", "summarise the teams"] {
        let out = root.run(&["run", prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let out = root.run(&["tasks"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("TASK"), "{text}");
    assert!(stderr(&out).contains("no daemon"), "{}", stderr(&out));
    let first = text.find("summarise the teams").expect(&text);
    let second = text.find("count the rows").expect(&text);
    assert!(first < second, "newest first: {text}");
    let out = root.run(&["tasks", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["tasks"].as_array().unwrap().len(), 2, "{list}");
    assert_eq!(list["tasks"][0]["status"], "finished");
    std::fs::write(root.dir.join("transcripts/t-broken.json"), "{not json").unwrap();
    let out = root.run(&["tasks"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("t-broken.json"), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 3, "{}", stdout(&out));
}
