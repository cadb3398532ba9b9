//! The model's text in a tool call is hostile: its tool name and input reach the
//! lines `run` and `submit --wait` print for each call, and its input is recorded in
//! the transcript and the audit log. Control characters and bidi overrides are
//! printed escaped, a call of no tool counts as failed, and an input nested too deep
//! for the records' readers is refused before anything records it.

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

/// No raw C0 (but newline), DEL, C1 or bidi override in `text`.
fn assert_inert(text: &str) {
    for c in text.chars() {
        let raw = (c < ' ' && c != '\n')
            || ('\u{7f}'..='\u{9f}').contains(&c)
            || ('\u{202a}'..='\u{202e}').contains(&c);
        assert!(!raw, "raw {c:?} in:\n{text}");
    }
}

fn hostile_calls() -> Vec<Reply> {
    vec![
        Reply::tools(&[
            (
                "t1",
                "run_bash",
                json!({"command": "ls \u{1b}]0;pwned\u{7}\u{1b}[2J \u{202e}drow\r forged \u{7f}\u{85}"}),
            ),
            (
                "t2",
                "evil\u{1b}[31m\u{202e}tool\r\n",
                json!({"x": "\u{1b}[2J"}),
            ),
        ]),
        Reply::text("done \u{1b}]0;t\u{7}"),
    ]
}

#[test]
fn each_call_line_is_escaped_and_a_call_of_no_tool_counts_as_failed() {
    let api = FakeApi::start(hostile_calls());
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--strict", "go"]);
    let err = stderr(&out);
    assert_inert(&err);
    assert_inert(&stdout(&out));
    assert!(
        err.contains("  → evil\\x1b[31m\\u202etool\\x0d\\n "),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.ends_with("calls: 0 run, 1 denied, 1 failed\n"), "{err}");

    let api = FakeApi::start(hostile_calls());
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "approval_timeout_secs", "1");
    let _daemon = Daemon::start(&root);
    let out = root.run(&["submit", "--wait", "--strict", "go"]);
    let err = stderr(&out);
    assert_inert(&err);
    assert_inert(&stdout(&out));
    assert!(
        err.contains("  → evil\\x1b[31m\\u202etool\\x0d\\n "),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.ends_with("calls: 0 run, 1 denied, 1 failed\n"), "{err}");
}

/// `levels` of arrays around a number.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |v, _| json!([v]))
}

/// A streamed tool input is parsed on its own, so serde_json's 128 levels were
/// its limit; but the transcript keeps it five levels down and the audit log one,
/// and both are read back with the same limit. Such an input was recorded, then the
/// transcript could not be read (`tasks` lost the prompt, the daemon's start
/// skipped the task) nor its `tool_requested` line (`submit --wait` dropped it).
/// The response is refused now, before anything records it.
#[test]
fn a_tool_input_nested_too_deep_to_read_back_is_refused() {
    let input = format!("{{\"path\":{}}}", nested(126));
    let api = FakeApi::start(vec![
        Reply::tool("t1", "list_dir", json!({})).streamed_input(0, &input),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "stream", "true");
    let out = root.run(&["run", "go"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("more than 64 levels deep"), "{err}");
    // Every record reads back.
    let t = root.transcript();
    assert_eq!(t["messages"].as_array().unwrap().len(), 1, "{t}");
    assert!(root.events_of("tool_requested").is_empty());
    let tasks = root.run(&["tasks"]);
    assert!(stdout(&tasks).contains("  go\n"), "{}", stdout(&tasks));
}
