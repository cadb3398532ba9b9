//! Operator experience: the README's quick start followed literally on a
//! fresh copy of the repository, `submit --wait` showing the approval it waits for
//! with the command that answers it, and `approve --remember`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout, wait_until};

/// The prompt of the README's quick start.
const QUICK_START: &str = "What is the average score in scores.csv?";

/// The code the model asks to run: the shipped policy asks before `run_python`.
const CODE: &str = "import csv\nrows = list(csv.DictReader(open('scores.csv')))\nprint(sum(int(r['score']) for r in rows) / len(rows))";

/// A root that is a copy of the repository's own files (the quick start runs in
/// the clone itself), with only the model endpoint pointed at the fake.
fn copy_of_the_repository(api_url: &str) -> TestRoot {
    let dir = crate::common::fresh_dir("harnessd-quickstart-");
    std::fs::create_dir_all(dir.join("transcripts")).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for sub in ["config", "policies", "workspace", "systemd"] {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(repo.join(sub))
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "copying {sub}");
    }
    let root = TestRoot { dir };
    root.set_config("api", "base_url", &format!("{api_url:?}"));
    root
}

/// Starts `submit --wait PROMPT`; its stderr lines arrive on the receiver with
/// the wall-clock time each was read.
fn submit_wait(root: &TestRoot, prompt: &str) -> (Child, mpsc::Receiver<(SystemTime, String)>) {
    let mut child = root
        .command(&["submit", "--wait", prompt])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send((SystemTime::now(), line)).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Reads stderr lines until one starts with `prefix` (trimmed); all lines read.
fn read_until(
    rx: &mpsc::Receiver<(SystemTime, String)>,
    prefix: &str,
) -> (SystemTime, String, Vec<String>) {
    let mut seen = Vec::new();
    loop {
        let (at, line) = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no line starting {prefix:?} on stderr; saw {seen:#?}"));
        seen.push(line.clone());
        if line.trim_start().starts_with(prefix) {
            return (at, line, seen);
        }
    }
}

/// The `ts` of an event, as a time.
fn event_time(ev: &Value) -> SystemTime {
    let ts = chrono::DateTime::parse_from_rfc3339(ev["ts"].as_str().unwrap()).unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_millis(ts.timestamp_millis() as u64)
}

/// Runs the command printed after `label:` exactly as printed (split on spaces:
/// the test root's path has none; the printed `--root` finds the root).
fn run_printed(line: &str, label: &str) -> std::process::Output {
    let command = line.trim_start().strip_prefix(label).unwrap().trim();
    let words: Vec<&str> = command.split(' ').filter(|w| !w.is_empty()).collect();
    assert_eq!(words[0], "harnessd", "{command}");
    let mut cmd = std::process::Command::new(crate::common::bin());
    cmd.args(&words[1..])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null());
    cmd.output().unwrap()
}

fn python_then_answer(id: &str, answer: &str) -> Vec<Reply> {
    vec![
        Reply::tool(id, "run_python", json!({"code": CODE})),
        Reply::text(answer),
    ]
}

#[test]
fn quick_start_on_a_copy_of_the_repository_shows_the_approval_and_finishes() {
    let started = Instant::now();
    let api = FakeApi::start(python_then_answer("tu1", "The average score is 81.125."));
    let root = copy_of_the_repository(&api.url);
    let _daemon = Daemon::start(&root);
    let (child, rx) = submit_wait(&root, QUICK_START);

    let (shown_at, _, before) = read_until(&rx, "waiting for approval:");
    let (_, approve_line, block) = read_until(&rx, "approve:");
    let requested = root.events_of("approval_requested");
    assert_eq!(requested.len(), 1, "{requested:?}");
    let lag = shown_at
        .duration_since(event_time(&requested[0]))
        .unwrap_or_default();
    assert!(
        lag < Duration::from_secs(1),
        "the approval reached stderr {lag:?} after it was requested"
    );
    let shown = block.join("\n");
    let id = requested[0]["approval_id"].as_str().unwrap();
    assert!(
        shown.contains(id) && shown.contains("run_python"),
        "{shown}"
    );
    // Every line of the code is shown, not a summary of it.
    assert!(shown.contains("print(sum(int(r['score'])"), "{shown}");
    assert!(
        approve_line.contains(&format!("approve {id}")),
        "{approve_line}"
    );
    assert!(before[0].contains("submitted"), "{before:?}");

    let answered = run_printed(&approve_line, "approve:");
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    let out = child.wait_with_output().unwrap();
    // Until the reader thread's EOF: the process has exited, but its last lines
    // (`[done] …`) may still be on their way through the channel.
    let rest: Vec<String> = rx.iter().map(|(_, l)| l).collect();
    let elapsed = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{rest:#?}");
    assert_eq!(stdout(&out), "The average score is 81.125.\n");
    assert!(
        rest.iter().any(|l| l.contains("approved by uid:")),
        "{rest:#?}"
    );
    assert!(
        rest.iter().any(|l| l.starts_with("[done] end_turn")),
        "{rest:#?}"
    );
    // The approved code really ran, confined, and printed the average.
    let finished = root.events_of("tool_finished");
    assert_eq!(finished[0]["exit_code"], 0, "{finished:?}");
    let result = crate::common::last_results(&api.requests()[1].body);
    assert!(
        result[0]["content"].as_str().unwrap().contains("81.125"),
        "{result:?}"
    );
    println!(
        "quick start: copy of the repository to first answered task in {} ms (target ≤ 60 000)",
        elapsed.as_millis()
    );
}

#[test]
fn approve_remember_lets_the_same_call_run_without_asking() {
    let mut script = python_then_answer("tu1", "first");
    script.extend(python_then_answer("tu2", "second"));
    let api = FakeApi::start(script);
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    let (child, rx) = submit_wait(&root, "one");
    let (_, always, _) = read_until(&rx, "always:");
    assert!(always.trim_end().ends_with("--remember"), "{always}");
    let answered = run_printed(&always, "always:");
    assert_eq!(answered.status.code(), Some(0), "{}", stderr(&answered));
    let printed = stdout(&answered);
    assert!(printed.contains("remembered: run_python("), "{printed}");
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(0));

    // The rule is recorded with who added it, and the file still validates.
    let resolved = root.events_of("approval_resolved");
    let rule = resolved[0]["remembered"][0].as_str().unwrap().to_string();
    assert!(
        resolved[0]["by"].as_str().unwrap().starts_with("uid:"),
        "{resolved:?}"
    );
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        settings["tools"]["allow_write"]
            .as_array()
            .unwrap()
            .last()
            .unwrap(),
        &json!(rule)
    );
    let check = root.run(&["check"]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    let reloads = root.events_of("config_loaded");
    assert!(
        reloads
            .iter()
            .any(|e| e["trigger"] == "remember"
                && e["by"].as_str().unwrap_or("").starts_with("uid:")),
        "{reloads:?}"
    );

    // The same call again: allowed by that rule, no approval asked.
    let out = root.run(&["submit", "--wait", "two"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "second\n");
    assert_eq!(root.events_of("approval_requested").len(), 1);
    let decisions = root.events_of("policy_decision");
    assert_eq!(decisions.last().unwrap()["tier"], "allow", "{decisions:?}");
    assert_eq!(decisions.last().unwrap()["rule"], json!(rule));
    // A different code still asks.
    let out = root.run(&["policy", "test", "run_python", "print(2)"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
}

#[test]
fn remember_refuses_a_command_no_allow_rule_can_cover_and_leaves_it_pending() {
    let api = FakeApi::start(vec![
        Reply::tool("tu1", "run_bash", json!({"command": "echo $HOME"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    let before = std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap();
    let (child, rx) = submit_wait(&root, "home");
    read_until(&rx, "waiting for approval:");
    let id = root.events_of("approval_requested")[0]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = root.run(&["approve", &id, "--remember"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not provable") && stderr(&out).contains("still pending"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap(),
        before
    );
    let out = root.run(&["deny", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(0));
    wait_until("the denial", || !root.events_of("task_finished").is_empty());
}

#[test]
fn policy_test_exits_with_the_decision_and_notes_what_allowed_paths_refuse() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let code = |args: &[&str]| root.run(args).status.code();
    assert_eq!(code(&["policy", "test", "run_bash", "ls -la"]), Some(0));
    assert_eq!(code(&["policy", "test", "run_bash", "cat x"]), Some(3));
    assert_eq!(code(&["policy", "test", "run_bash", "rm -rf /"]), Some(4));
    assert_eq!(
        code(&["policy", "test", "--json", "run_bash", "rm -rf /"]),
        Some(4)
    );
    // A path alone is enough for every file tool.
    assert_eq!(code(&["policy", "test", "write_file", "x.md"]), Some(3));
    assert_eq!(code(&["policy", "test", "edit_file", "x.md"]), Some(3));
    assert_eq!(code(&["policy", "test", "rm_everything", "x"]), Some(2));
    // Allowed by the tier, refused by the sandbox: said so.
    let out = root.run(&["policy", "test", "read_file", "/etc/shadow"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.starts_with("allow") && text.contains("note: the sandbox will refuse it: /etc/shadow"),
        "{text}"
    );
    let inside = stdout(&root.run(&["policy", "test", "read_file", "scores.csv"]));
    assert!(!inside.contains("note:"), "{inside}");
    let out = root.run(&["policy", "test", "--json", "write_file", "/usr/bin/x"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["allowed_paths"]
            .as_str()
            .unwrap()
            .contains("allowed_paths.write"),
        "{v}"
    );
}

#[test]
fn clients_stay_quiet_when_the_reader_goes_away() {
    let api = FakeApi::start(vec![Reply::text("a"), Reply::text("b")]);
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    for prompt in ["one", "two"] {
        assert_eq!(
            root.run(&["submit", "--wait", prompt]).status.code(),
            Some(0)
        );
    }
    // A reader that reads nothing and closes: every write after it fails with
    // EPIPE, which must not come out as an error.
    let id = root.events_of("task_queued")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    for args in [
        &["policy", "test", "run_bash", "cat a; cat b; cat c"][..],
        &["policy", "schema"][..],
        &["tasks"][..],
        &["show", &id][..],
        &["show", "--json", &id][..],
        &["approvals"][..],
        &["events"][..],
        &["events", "--follow"][..],
        &["replay"][..],
        &["check"][..],
    ] {
        let mut child = root
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert!(
            !err.to_lowercase().contains("broken pipe"),
            "{args:?}: {err}"
        );
        if args[0] == "policy" && args[1] == "test" {
            assert_eq!(out.status.code(), Some(3), "{args:?}: the decision still");
        }
    }
}

#[test]
fn replay_judges_history_by_a_candidate_file_without_touching_the_live_one() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("r1", "read_file", json!({"path": "scores.csv"})),
            ("l1", "run_bash", json!({"command": "ls"})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "x"]).status.code(), Some(0));
    let live = std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap();
    let candidate = root.dir.join("candidate.json");
    let mut v: Value = serde_json::from_str(&live).unwrap();
    v["tools"]["deny"]
        .as_array_mut()
        .unwrap()
        .push(json!("read_file(workspace/*.csv)"));
    v["tools"]["allow"] = json!(["get_time"]);
    std::fs::write(&candidate, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let out = root.run(&["replay", "--settings", candidate.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("2 recorded tool calls, 2 would be decided differently under "),
        "{text}"
    );
    // The columns line up: every row has its WAS column where the header has it.
    let lines: Vec<&str> = text.lines().skip(1).collect();
    let at = lines[0].find("WAS").unwrap();
    for l in &lines[1..] {
        let col: String = l.chars().skip(at).take(5).collect();
        assert_eq!(col, "allow", "{text}");
    }
    assert_eq!(
        std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap(),
        live
    );
    // A candidate that does not validate: exit 2, naming the file, line and key.
    std::fs::write(&candidate, "{\n  \"tools\": {\"alow\": []}\n}\n").unwrap();
    let out = root.run(&["replay", "--settings", candidate.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("candidate.json") && err.contains("alow") && err.contains(":2"),
        "{err}"
    );
}

#[test]
fn listings_have_headers_live_tokens_and_the_prompt_and_cancel_shows_the_end() {
    let api = FakeApi::start(vec![
        Reply::message_with_usage(
            json!([{"type": "tool_use", "id": "tu1", "name": "run_python", "input": {"code": "print(1)"}}]),
            "tool_use",
            json!({"input_tokens": 1200, "output_tokens": 34}),
        ),
        Reply::text("never reached"),
    ]);
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    let prompt_file = root.dir.join("prompt.txt");
    std::fs::write(&prompt_file, "Summarise\tthe scores by team, please").unwrap();
    let out = root.run(&[
        "submit",
        "-f",
        prompt_file.to_str().unwrap(),
        "--model",
        "claude-other-1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    wait_until("the approval", || {
        !root.events_of("approval_requested").is_empty()
    });
    let first = &api.requests()[0].body;
    assert_eq!(first["model"], "claude-other-1");
    assert_eq!(
        first["messages"][0]["content"][0]["text"],
        "Summarise\tthe scores by team, please"
    );

    // Mid-flight: the tokens of the first response already, the prompt's start
    // (escaped), every column under its header.
    let tasks = stdout(&root.run(&["tasks"]));
    let lines: Vec<&str> = tasks.lines().collect();
    assert!(
        lines[0].starts_with("TASK") && lines[0].contains("PROMPT"),
        "{tasks}"
    );
    let row = lines.iter().find(|l| l.starts_with(&id)).unwrap();
    assert!(
        row.contains("awaiting_approval") && row.contains(" 1234 "),
        "{tasks}"
    );
    assert!(row.contains(r"Summarise\tthe scores"), "{tasks}");
    let col = lines[0].find("STATUS").unwrap();
    assert_eq!(&row[col..col + "awaiting".len()], "awaiting", "{tasks}");

    let approvals = stdout(&root.run(&["approvals"]));
    assert!(approvals.starts_with("APPROVAL  "), "{approvals}");
    assert!(approvals.contains("code: print(1)"), "{approvals}");

    // cancel shows the task after the cancel took effect, not `running`.
    let out = root.run(&["cancel", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(shown.contains("status   finished (cancelled)"), "{shown}");
    assert!(shown.contains("tokens   1234 "), "{shown}");

    // The prompt from standard input.
    let mut child = root
        .command(&["submit", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"from stdin").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let queued = root.events_of("task_queued");
    assert_eq!(queued.last().unwrap()["prompt"], "from stdin");
}

#[test]
fn run_on_a_terminal_says_how_long_it_has_waited_for_the_model() {
    // The model takes a little over 5 s; under a pseudo-terminal (`script`) `run`
    // says so at 5 s, as a plain line. (What is measured is the model's delay,
    // not harnessd's speed: the note is due at 5 s whatever the machine.)
    let mut slow = Reply::text("late answer");
    slow.delay = Duration::from_millis(5600);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    let inner = format!(
        "{} --root {} run slow",
        crate::common::bin(),
        root.dir.display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env("ANTHROPIC_API_KEY", crate::common::SECRET_KEY)
        .stdin(Stdio::null())
        .output()
        .expect("util-linux `script` is needed for this test");
    let shown = stdout(&out);
    assert!(shown.contains("  … waiting for the model: 5s"), "{shown}");
    assert!(shown.contains("late answer"), "{shown}");
    // Off a terminal nothing of the sort is printed.
    let mut slow = Reply::text("late answer");
    slow.delay = Duration::from_millis(5600);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "slow"]);
    assert!(
        !stderr(&out).contains("waiting for the model"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn remember_on_a_compound_command_adds_one_rule_per_part_not_yet_allowed() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "tu1",
            "run_bash",
            json!({"command": "ls -la && cat scores.csv; sort -r scores.csv"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    let out = root.run(&["submit", "sorted"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    wait_until("the approval", || {
        !root.events_of("approval_requested").is_empty()
    });
    let id = root.events_of("approval_requested")[0]["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = root.run(&["approve", &id, "--remember", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    // `ls -la` was allowed already (`run_bash(ls *)`): only the other two parts.
    assert_eq!(
        answer["remembered"],
        json!(["run_bash(cat scores.csv)", "run_bash(sort -r scores.csv)"])
    );
    let code = |cmd: &str| root.run(&["policy", "test", "run_bash", cmd]).status.code();
    assert_eq!(code("sort -r scores.csv; cat scores.csv"), Some(0));
    assert_eq!(
        code("cat scores.csv.bak"),
        Some(3),
        "only the literal command"
    );
    assert_eq!(code("sort -r other.csv"), Some(3));
}
