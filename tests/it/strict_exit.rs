//! A headless job whose calls were denied must not look like a success: `run` and
//! `submit --wait` end with one line counting the calls run, denied and failed,
//! `submit --wait` shows each call with its decision as `run` does, and `--strict`
//! exits 5 when the task ended its turn but a call was denied or its approval
//! timed out (docs/commands.md).

use serde_json::json;

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

/// One turn of three calls: `ls` (allowed, runs), `rm -rf x` (denied by the
/// shipped policy) and reading a file that is not there (allowed, fails); then
/// the answer.
fn allowed_denied_failed() -> Vec<Reply> {
    vec![
        Reply::tools(&[
            ("t1", "run_bash", json!({"command": "ls"})),
            ("t2", "run_bash", json!({"command": "rm -rf x"})),
            ("t3", "read_file", json!({"path": "missing.txt"})),
        ]),
        Reply::text("done"),
    ]
}

/// The last line of `text`.
fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or_default()
}

#[test]
fn run_ends_with_the_count_of_calls_and_strict_exits_5_on_a_denied_call() {
    let api = FakeApi::start(allowed_denied_failed());
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "go"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), "done\n");
    assert_eq!(last_line(&err), "calls: 2 run, 1 denied, 1 failed", "{err}");

    let api = FakeApi::start(allowed_denied_failed());
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--strict", "go"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_eq!(last_line(&err), "calls: 2 run, 1 denied, 1 failed", "{err}");
}

#[test]
fn strict_run_whose_calls_ran_or_failed_on_their_own_exits_0() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("t1", "run_bash", json!({"command": "ls"})),
            ("t2", "read_file", json!({"path": "missing.txt"})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "--strict", "go"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(last_line(&err), "calls: 2 run, 0 denied, 1 failed", "{err}");
}

#[test]
fn submit_wait_shows_each_call_with_its_decision_and_strict_exits_5() {
    let api = FakeApi::start(
        allowed_denied_failed()
            .into_iter()
            .chain(allowed_denied_failed())
            .collect(),
    );
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    let out = root.run(&["submit", "--wait", "go"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout(&out), "done\n");
    // The same lines as `run` prints for each call: the call, its decision, its end.
    for shown in [
        "  → run_bash {\"command\":\"ls\"}",
        "    policy: allow by run_bash(ls *)",
        "  → run_bash {\"command\":\"rm -rf x\"}",
        "    policy: deny by run_bash(rm -rf *)",
        "    policy: allow by read_file",
    ] {
        assert!(err.lines().any(|l| l == shown), "no {shown:?} in:\n{err}");
    }
    assert!(
        err.lines().any(|l| l.starts_with("    ← read_file error")),
        "{err}"
    );
    assert_eq!(last_line(&err), "calls: 2 run, 1 denied, 1 failed", "{err}");

    let out = root.run(&["submit", "--wait", "--strict", "again"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_eq!(last_line(&err), "calls: 2 run, 1 denied, 1 failed", "{err}");
}

#[test]
fn submit_wait_strict_exits_5_when_an_approval_timed_out() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "w",
            "write_file",
            json!({"path": "asked.txt", "content": "x"}),
        ),
        Reply::text("done without it"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("daemon", "approval_timeout_secs", "1");
    let _daemon = Daemon::start(&root);
    let out = root.run(&["submit", "--wait", "--strict", "write it"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("timeout by timeout"), "{err}");
    assert_eq!(last_line(&err), "calls: 0 run, 1 denied, 0 failed", "{err}");
}

#[test]
fn strict_needs_wait_on_submit() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root.run(&["submit", "--strict", "go"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--wait"), "{}", stderr(&out));
}
