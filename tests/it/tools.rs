//! Tools through the real loop: validation, policy, failures as results, timeouts,
//! output caps, concurrency of read-only calls.

use std::time::Duration;

use serde_json::json;

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr};

/// Runs one turn of `calls` then a final answer; returns the tool_results sent back.
fn one_turn(
    root_setup: impl FnOnce(&TestRoot),
    args: &[&str],
    calls: &[(&str, &str, serde_json::Value)],
) -> (TestRoot, Vec<serde_json::Value>, std::process::Output) {
    let api = FakeApi::start(vec![Reply::tools(calls), Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    root_setup(&root);
    let out = root.run(args);
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2, "{}", stderr(&out));
    let results = last_results(&reqs[1].body);
    (root, results, out)
}

fn text(result: &serde_json::Value) -> &str {
    result["content"].as_str().unwrap()
}

#[test]
fn unknown_tool_and_bad_inputs_are_error_results_and_the_loop_goes_on() {
    let (_root, results, out) = one_turn(
        |_| {},
        &["run", "x"],
        &[
            ("u1", "delete_everything", json!({})),
            ("u2", "read_file", json!({})),
            ("u3", "read_file", json!({"path": 42})),
            ("u4", "read_file", json!({"path": "scores.csv", "bogus": 1})),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|r| r["is_error"] == true));
    assert!(
        text(&results[0]).contains("unknown tool \"delete_everything\""),
        "{}",
        text(&results[0])
    );
    assert!(text(&results[0]).contains("read_file"));
    assert!(text(&results[1]).contains("missing field `path`"));
    assert!(text(&results[2]).contains("invalid type"));
    assert!(text(&results[3]).contains("unknown field `bogus`"));
}

#[test]
fn file_tools_work_in_the_workspace() {
    let (root, results, out) = one_turn(
        |_| {},
        &["run", "--yes", "x"],
        &[
            (
                "w",
                "write_file",
                json!({"path": "notes/a.txt", "content": "one\ntwo\nthree\n"}),
            ),
            (
                "e",
                "edit_file",
                json!({"path": "notes/a.txt", "old_string": "two", "new_string": "2"}),
            ),
            (
                "r",
                "read_file",
                json!({"path": "notes/a.txt", "offset": 2, "limit": 1}),
            ),
            ("l", "list_dir", json!({})),
            (
                "e2",
                "edit_file",
                json!({"path": "notes/a.txt", "old_string": "missing", "new_string": "x"}),
            ),
            ("t", "get_time", json!({})),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(root.workspace().join("notes/a.txt")).unwrap(),
        "one\n2\nthree\n"
    );
    assert!(text(&results[0]).contains("wrote 14 bytes"));
    assert!(
        text(&results[2]).starts_with("2\n"),
        "{}",
        text(&results[2])
    );
    assert!(text(&results[2]).contains("offset=3"));
    assert!(text(&results[3]).contains("notes/") && text(&results[3]).contains("scores.csv"));
    assert_eq!(results[4]["is_error"], true);
    assert!(text(&results[4]).contains("old_string not found"));
    let time = chrono::DateTime::parse_from_rfc3339(text(&results[5]));
    assert!(time.is_ok(), "{}", text(&results[5]));
}

#[test]
fn nonzero_exit_is_an_error_result_with_sections() {
    let (_root, results, out) = one_turn(
        |_| {},
        &["run", "--yes", "x"],
        &[
            (
                "b",
                "run_bash",
                json!({"command": "echo out; echo err >&2; exit 3"}),
            ),
            ("p", "run_python", json!({"code": "print(6*7)"})),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(results[0]["is_error"], true);
    assert_eq!(
        text(&results[0]),
        "exit_code: 3\nstdout:\nout\nstderr:\nerr\n"
    );
    assert!(results[1].get("is_error").is_none());
    assert_eq!(text(&results[1]), "exit_code: 0\nstdout:\n42\n");
}

#[test]
fn timeout_kills_the_whole_group_including_background_children() {
    let (root, results, out) = one_turn(
        |r| r.edit_settings(|s| s["sandbox"]["timeout_secs"] = json!(1)),
        &["run", "--yes", "x"],
        &[(
            "s",
            "run_bash",
            json!({"command": format!("{HEARTBEAT} & sleep 300"), "timeout_secs": 100}),
        )],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(results[0]["is_error"], true);
    assert!(
        text(&results[0]).contains("timed out after 1 s"),
        "{}",
        text(&results[0])
    );
    assert_heartbeat_stopped(&root.workspace().join("heartbeat"));
    let fin = &root.events_of("tool_finished")[0];
    assert_eq!(fin["is_error"], true);
    assert!(fin["duration_ms"].as_u64().unwrap() < 5000);
}

#[test]
fn background_process_does_not_outlive_a_finished_command() {
    let (root, _results, out) = one_turn(
        |_| {},
        &["run", "--yes", "x"],
        &[(
            "s",
            "run_bash",
            json!({"command": format!("{HEARTBEAT} & sleep 0.3")}),
        )],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_heartbeat_stopped(&root.workspace().join("heartbeat"));
}

/// A background loop that rewrites `heartbeat` every 50 ms while it lives. Checking
/// the file works whatever PID namespace the process is in.
pub const HEARTBEAT: &str = "(while true; do date +%s%N > heartbeat; sleep 0.05; done)";

/// Asserts the heartbeat at `path` was started and has stopped changing.
pub fn assert_heartbeat_stopped(path: &std::path::Path) {
    std::thread::sleep(Duration::from_millis(200));
    let first = std::fs::read_to_string(path).expect("the heartbeat never started");
    std::thread::sleep(Duration::from_millis(400));
    let second = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        first,
        second,
        "a background process is still alive ({})",
        path.display()
    );
}

/// Runs `cmd` to its end; returns its exit code and peak RSS in KiB.
fn run_measuring_rss(cmd: &mut std::process::Command) -> (i32, u64) {
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (status, peak) = crate::common::rss::wait_measuring_rss(child);
    (status.code().unwrap_or(-1), peak)
}

#[test]
fn huge_output_is_capped_for_the_model_and_kept_in_full_on_disk() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "big",
            "run_bash",
            json!({"command": "head -c 30000000 /dev/zero | tr '\\0' 'y'; echo; echo END"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let (code, rss_kib) = run_measuring_rss(&mut root.command(&["run", "--yes", "x"]));
    assert_eq!(code, 0);
    let results = last_results(&api.requests()[1].body);
    let content = text(&results[0]);
    assert!(
        content.chars().count() < 8000 + 100,
        "model saw {} chars",
        content.chars().count()
    );
    assert!(content.starts_with("exit_code: 0\nstdout:\nyyyy"));
    assert!(content.trim_end().ends_with("END"), "tail is kept");
    assert!(content.contains("chars omitted …]"));
    let fin = &root.events_of("tool_finished")[0];
    assert_eq!(fin["truncated"], true);
    assert_eq!(fin["output_bytes"], 30_000_005);
    let file = root.dir.join(fin["output_file"].as_str().unwrap());
    let len = std::fs::metadata(&file).unwrap().len();
    assert_eq!(len, 30_000_005 + "exit_code: 0\nstdout:\n".len() as u64);
    assert!(
        rss_kib < 60 * 1024,
        "harnessd peaked at {rss_kib} KiB while reading 30 MB"
    );
}

/// docs/policy.md: with `output.max_chars = N`, the text the model sees for a long result,
/// the marker not counted, is N characters exactly; the `exit_code:` and section
/// lines and the newlines around the marker count (it used to be N + 2).
#[test]
fn output_cap_is_exact_to_the_character_at_the_boundary() {
    // 21 header characters + 196 lines of 5 = 1001: one past the cap.
    for (max_chars, lines) in [(1000, 3000), (1000, 196)] {
        let (_root, results, _) = one_turn(
            |r| r.edit_settings(|s| s["output"]["max_chars"] = json!(max_chars)),
            &["run", "--yes", "x"],
            &[(
                "c",
                "run_bash",
                json!({"command": format!("seq 1000 {}", 999 + lines)}),
            )],
        );
        let content = text(&results[0]);
        let start = content.find("[… ").expect("a marker");
        let end = start + content[start..].find(" …]").unwrap() + " …]".len();
        let seen = content[..start].chars().count() + content[end..].chars().count();
        assert_eq!(seen, max_chars, "{content}");
        assert!(
            content.starts_with("exit_code: 0\nstdout:\n1000\n"),
            "{content}"
        );
        assert!(
            content.ends_with(&format!("{}\n", 999 + lines)),
            "{content}"
        );
    }
}

#[test]
fn output_flood_is_cut_and_the_tree_killed() {
    let api = FakeApi::start(vec![
        Reply::tool("y", "run_bash", json!({"command": "yes"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let (code, rss_kib) = run_measuring_rss(&mut root.command(&["run", "--yes", "x"]));
    assert_eq!(code, 0);
    let results = last_results(&api.requests()[1].body);
    assert_eq!(results[0]["is_error"], true);
    assert!(
        text(&results[0]).contains("output passed 64 MiB"),
        "{}",
        &text(&results[0])[..200]
    );
    assert!(
        rss_kib < 60 * 1024,
        "harnessd peaked at {rss_kib} KiB during a flood"
    );
}

#[test]
fn read_only_calls_run_concurrently_and_results_keep_order() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("ra", "read_file", json!({"path": "fifo-a"})),
            ("rb", "read_file", json!({"path": "fifo-b"})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    for name in ["fifo-a", "fifo-b"] {
        let path = std::ffi::CString::new(root.workspace().join(name).to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    }
    let child = root
        .command(&["run", "x"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Feed b first, then a: if the reads ran one after the other, b's reader would
    // not exist until a was fed, and opening b for writing would never succeed.
    let open_writer = |name: &str| {
        let path = root.workspace().join(name);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            use std::os::unix::fs::OpenOptionsExt;
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)
            {
                Ok(f) => return f,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("no reader on {name} while the other read was pending: {e}"),
            }
        }
    };
    let mut b = open_writer("fifo-b");
    let mut a = open_writer("fifo-a");
    use std::io::Write;
    b.write_all(b"content of b\n").unwrap();
    drop(b);
    a.write_all(b"content of a\n").unwrap();
    drop(a);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = last_results(&api.requests()[1].body);
    assert_eq!(results[0]["tool_use_id"], "ra");
    assert_eq!(text(&results[0]), "content of a\n");
    assert_eq!(results[1]["tool_use_id"], "rb");
    assert_eq!(text(&results[1]), "content of b\n");
}

#[test]
fn deny_rule_and_denied_tool_are_refused_and_recorded() {
    let (root, results, out) = one_turn(
        |r| {
            std::fs::create_dir_all(r.workspace().join("secrets")).unwrap();
            std::fs::write(r.workspace().join("secrets/k"), "hunter2").unwrap();
            r.edit_settings(|s| {
                s["tools"]["deny"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("run_python"))
            });
        },
        &["run", "--yes", "x"],
        &[
            ("d1", "read_file", json!({"path": "./x/..//secrets/k"})),
            ("d2", "run_python", json!({"code": "print(1)"})),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        text(&results[0]).contains("denied by policy (rule `read_file(workspace/secrets/*)`)"),
        "{}",
        text(&results[0])
    );
    assert!(!text(&results[0]).contains("hunter2"));
    assert!(
        text(&results[1]).contains("unknown tool"),
        "a tool denied outright is not offered"
    );
    let decisions = root.events_of("policy_decision");
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0]["tier"], "deny");
    assert_eq!(decisions[0]["rule"], "read_file(workspace/secrets/*)");
    assert_eq!(decisions[0]["subject"], "workspace/secrets/k");
}

#[test]
fn denied_tool_is_not_advertised() {
    let api = FakeApi::start(vec![Reply::text("ok")]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["deny"]
            .as_array_mut()
            .unwrap()
            .push(json!("run_bash"))
    });
    root.set_config(
        "tools",
        "enabled",
        "[\"read_file\", \"run_bash\", \"get_time\"]",
    );
    assert_eq!(root.run(&["run", "x"]).status.code(), Some(0));
    let names: Vec<String> = api.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["read_file", "get_time"]);
}

#[test]
fn ask_without_a_tty_is_denied_unless_yes() {
    let (root, results, out) = one_turn(
        |_| {},
        &["run", "x"],
        &[("a", "write_file", json!({"path": "f", "content": "x"}))],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(results[0]["is_error"], true);
    assert!(
        text(&results[0]).contains("not approved"),
        "{}",
        text(&results[0])
    );
    assert!(!root.workspace().join("f").exists());
    let resolved = &root.events_of("approval_resolved")[0];
    assert_eq!(resolved["decision"], "denied");
    assert_eq!(resolved["by"], "flag");
    let requested = &root.events_of("approval_requested")[0];
    assert_eq!(requested["approval_id"], resolved["approval_id"]);
    assert_eq!(requested["rule"], "write_file");

    let (root, results, _) = one_turn(
        |_| {},
        &["run", "--yes", "x"],
        &[("a", "write_file", json!({"path": "f", "content": "x"}))],
    );
    assert!(results[0].get("is_error").is_none());
    assert!(root.workspace().join("f").exists());
    assert_eq!(root.events_of("approval_resolved")[0]["by"], "flag");
    assert_eq!(
        root.events_of("approval_resolved")[0]["decision"],
        "approved"
    );
}

#[test]
fn allowed_pattern_runs_without_asking() {
    let (root, results, _) = one_turn(
        |_| {},
        &["run", "x"],
        &[("l", "run_bash", json!({"command": "ls"}))],
    );
    assert!(
        text(&results[0]).contains("scores.csv"),
        "{}",
        text(&results[0])
    );
    assert_eq!(
        root.events_of("policy_decision")[0]["rule"],
        "run_bash(ls *)"
    );
    assert!(root.events_of("approval_requested").is_empty());
}

#[test]
fn ask_on_a_terminal_prompts_and_takes_the_answer() {
    // `script` gives harnessd a pseudo-terminal on stdin; the test types the answer.
    for (answer, approved) in [("y", true), ("n", false), ("a", true)] {
        let api = FakeApi::start(vec![
            Reply::tool(
                "w",
                "write_file",
                json!({"path": "typed.txt", "content": "x"}),
            ),
            Reply::text("done"),
        ]);
        let root = TestRoot::new(&api.url);
        let inner = format!(
            "{} --root {} run x",
            crate::common::bin(),
            root.dir.display()
        );
        let mut child = std::process::Command::new("script")
            .args(["-qec", &inner, "/dev/null"])
            .env("ANTHROPIC_API_KEY", crate::common::SECRET_KEY)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("util-linux `script` is needed for this test");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while root.events_of("approval_requested").is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "no approval was requested"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
        use std::io::Write;
        child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(format!("{answer}\n").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let shown = crate::common::stdout(&out);
        assert!(
            shown.contains("Approve? [y]es / [n]o / [a]lways") && shown.contains("rule write_file"),
            "{shown}"
        );
        assert_eq!(root.workspace().join("typed.txt").exists(), approved);
        let resolved = &root.events_of("approval_resolved")[0];
        assert_eq!(resolved["by"], "tty");
        assert_eq!(
            resolved["decision"],
            if approved { "approved" } else { "denied" }
        );
        // `a`lways: approved, and the call's own path is now an allow rule.
        let settings = std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap();
        let remembered = settings.contains("\"write_file(workspace/typed.txt)\"");
        assert_eq!(remembered, answer == "a", "{settings}");
        if answer == "a" {
            assert_eq!(
                resolved["remembered"],
                json!(["write_file(workspace/typed.txt)"])
            );
            let again = root.run(&["policy", "test", "write_file", "typed.txt"]);
            assert_eq!(again.status.code(), Some(0), "allowed now");
        }
    }
}
