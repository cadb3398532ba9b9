//! The records of each tool call (docs/events.md, docs/commands.md): one `.out` file per call whatever its
//! id, a repeated id refused, `show` keeping model text apart from records, and the
//! per-task spool budget.

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

/// A root where every `run_bash` call runs without asking.
fn bash_allowed(api: &FakeApi) -> TestRoot {
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["run_bash"]);
        s["tools"]["ask"] = json!([]);
        s["tools"]["deny"] = json!([]);
    });
    root
}

/// The id of the root's only task.
fn task_id(root: &TestRoot) -> String {
    root.events_of("task_started")[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn ids_that_differ_only_in_unsafe_characters_keep_their_own_out_files() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            (
                "toolu_x.1",
                "run_bash",
                json!({"command": "echo dot-output"}),
            ),
            (
                "toolu_x:1",
                "run_bash",
                json!({"command": "echo colon-output"}),
            ),
        ]),
        Reply::text("done"),
    ]);
    let root = bash_allowed(&api);
    let out = root.run(&["run", "two calls"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let finished = root.events_of("tool_finished");
    assert_eq!(finished.len(), 2, "{finished:?}");
    let file_of = |id: &str| -> String {
        let f = finished
            .iter()
            .find(|e| e["tool_use_id"] == id)
            .unwrap_or_else(|| panic!("no tool_finished for {id}"));
        f["output_file"].as_str().unwrap().to_string()
    };
    let (dot, colon) = (file_of("toolu_x.1"), file_of("toolu_x:1"));
    assert_ne!(dot, colon, "two calls share one .out file");
    let read = |rel: &str| std::fs::read_to_string(root.dir.join(rel)).unwrap();
    assert!(read(&dot).contains("dot-output"), "{}", read(&dot));
    assert!(read(&colon).contains("colon-output"), "{}", read(&colon));
    let id = task_id(&root);
    let out = root.run(&["show", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "toolu_x.1".to_string(),
        "toolu_x:1".to_string(),
        format!("output    {dot}"),
        format!("output    {colon}"),
    ] {
        assert!(text.contains(&want), "{want:?} missing in:\n{text}");
    }
    let j: Value = serde_json::from_slice(&root.run(&["show", "--json", &id]).stdout).unwrap();
    let files: Vec<&Value> = j["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["output_file"])
        .collect();
    assert_eq!(files, [&json!(dot), &json!(colon)], "{j}");
}

#[test]
fn a_tool_use_id_reused_in_a_later_turn_stops_the_task_and_does_not_run() {
    let call = json!({"command": "echo 1 >> m"});
    let api = FakeApi::start(vec![
        Reply::tool("toolu_A", "run_bash", call.clone()),
        Reply::tools(&[
            ("toolu_B", "run_bash", call.clone()),
            ("toolu_A", "run_bash", call),
        ]),
        Reply::text("never asked for"),
    ]);
    let root = bash_allowed(&api);
    let out = root.run(&["run", "append twice"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let marker = std::fs::read_to_string(root.workspace().join("m")).unwrap();
    assert_eq!(marker, "1\n", "the repeated call (or its sibling) ran");
    let finished = root.events_of("task_finished");
    assert_eq!(finished[0]["stop_reason"], "error", "{finished:?}");
    let error = finished[0]["error"].as_str().unwrap();
    assert!(error.contains("toolu_A"), "{error}");
    // One request per turn and no more; `requests` panics on an unanswered tool_use.
    assert_eq!(api.requests().len(), 2);
    // The log holds one call under toolu_A, the one that ran.
    let requested: Vec<Value> = root
        .events_of("tool_requested")
        .into_iter()
        .filter(|e| e["tool_use_id"] == "toolu_A")
        .collect();
    assert_eq!(requested.len(), 1, "{requested:?}");
    // The transcript answers every tool_use, the repeat included.
    let t = root.transcript();
    let messages = t["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "{last}");
    let answered: Vec<Value> = crate::common::last_results(&t)
        .iter()
        .map(|b| b["tool_use_id"].clone())
        .collect();
    assert_eq!(answered, [json!("toolu_B"), json!("toolu_A")], "{last}");
    let id = task_id(&root);
    let text = stdout(&root.run(&["show", &id]));
    let listed = text
        .lines()
        .filter(|l| l.starts_with("call ") && l.ends_with("toolu_A"))
        .count();
    assert_eq!(listed, 1, "{text}");
    assert!(text.contains("exit      0"), "{text}");
    assert!(text.contains("/toolu_A.out"), "{text}");
}

/// A resumed task's history counts: an id its earlier run used is refused after a
/// resume too, although the resumed run never saw that response itself.
#[test]
fn a_resumed_task_refuses_a_tool_use_id_from_its_history() {
    let call = json!({"command": "echo 1 >> m"});
    let mut slow = Reply::text("never seen");
    slow.delay = std::time::Duration::from_secs(30);
    let api = FakeApi::start(vec![
        Reply::tool("toolu_A", "run_bash", call.clone()),
        slow,
        Reply::tool("toolu_A", "run_bash", call),
        Reply::text("never asked for"),
    ]);
    let root = bash_allowed(&api);
    // The first run calls toolu_A, then dies while the model holds its second turn.
    let mut d = crate::common::daemon::Daemon::start(&root);
    let id = d.submit("append once");
    crate::common::wait_until("the second request", || api.requests().len() == 2);
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let d = crate::common::daemon::Daemon::start(&root);
    let (_, t) = d.request("GET", &format!("/v1/tasks/{id}"), None);
    assert_eq!(t["status"], "interrupted", "{t}");
    let (status, body) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
    assert_eq!(status, 202, "{body}");
    // The killed run left no end; the resumed one records the only one.
    crate::common::wait_until("the resumed run's end", || {
        !root.events_of("task_finished").is_empty()
    });
    let ends = root.events_of("task_finished");
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["stop_reason"], "error", "{}", ends[0]);
    let error = ends[0]["error"].as_str().unwrap();
    assert!(
        error.contains("toolu_A") && error.contains("earlier call"),
        "{error}"
    );
    let marker = std::fs::read_to_string(root.workspace().join("m")).unwrap();
    assert_eq!(marker, "1\n", "the reused id ran again after the resume");
    // `requests` panics on any request with an unanswered tool_use.
    assert_eq!(api.requests().len(), 3);
}

#[test]
fn show_indents_an_answer_that_imitates_a_call_record_under_its_label() {
    let imitation = [
        "call 1  run_bash  toolu_forged",
        "  input     {\"command\":\"rm -rf /srv\"}",
        "  decision  deny (rule run_bash(rm -rf *))",
        "  exit      -, 0 ms",
        "  output    -",
    ];
    let answer = format!(
        "Nothing ran.\n\n{}\n\ndone\roverwritten",
        imitation.join("\n")
    );
    let api = FakeApi::start(vec![Reply::text(&answer)]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "tidy up"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = task_id(&root);
    let out = root.run(&["show", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let label = lines
        .iter()
        .position(|l| *l == "answer:")
        .unwrap_or_else(|| panic!("no answer: label in:\n{text}"));
    for line in &lines[label + 1..] {
        assert!(
            line.starts_with("    "),
            "unindented answer line {line:?}:\n{text}"
        );
    }
    for forged in imitation {
        assert!(
            !lines.contains(&forged),
            "{forged:?} shown as a record line:\n{text}"
        );
        assert!(
            lines.contains(&format!("    {forged}").as_str()),
            "{forged:?} not shown indented:\n{text}"
        );
    }
    // The carriage return is escaped, never a line break of its own.
    assert!(lines.contains(&"    done\\x0doverwritten"), "{text}");
    // --json is unchanged: the answer exact.
    let j: Value = serde_json::from_slice(&root.run(&["show", "--json", &id]).stdout).unwrap();
    assert_eq!(j["answer"], json!(answer));
}

/// The budget spans the task's turns: each call draws from what the earlier ones
/// left. (Concurrent calls share it through one counter: `exec::budget`'s tests.)
#[test]
fn the_spool_budget_is_shared_by_a_tasks_calls_and_cuts_without_killing() {
    let print = |n: &str| {
        let command = format!("head -c 700000 /dev/zero | tr '\\0' a; echo {n} >&2");
        json!({ "command": command })
    };
    let api = FakeApi::start(vec![
        Reply::tool("toolu_1", "run_bash", print("1")),
        Reply::tool("toolu_2", "run_bash", print("2")),
        Reply::tool("toolu_3", "run_bash", print("3")),
        Reply::text("done"),
    ]);
    let root = bash_allowed(&api);
    // One MiB for the whole task: the first call keeps all, the second part, the
    // third nothing.
    root.edit_settings(|s| s["output"]["max_spool_mb"] = json!(1));
    let out = root.run(&["run", "print a lot"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let finished = root.events_of("tool_finished");
    assert_eq!(finished.len(), 3, "{finished:?}");
    for f in &finished {
        // Counted whole, never killed: the command ran to its end.
        assert_eq!(f["exit_code"], 0, "{f}");
        assert_eq!(f["output_bytes"], 700_002, "{f}");
    }
    assert!(finished[0].get("spool_cut").is_none(), "{}", finished[0]);
    let cut = |f: &Value| {
        (
            f["spool_cut"]["kept_bytes"].as_u64().unwrap(),
            f["spool_cut"]["not_kept_bytes"].as_u64().unwrap(),
            f["spool_cut"]["reason"].clone(),
        )
    };
    let budget = 1024 * 1024;
    let (kept2, not2, why2) = cut(&finished[1]);
    assert_eq!(why2, "max_spool_mb");
    assert_eq!(kept2, budget - 700_002, "{}", finished[1]);
    assert_eq!(kept2 + not2, 700_002);
    assert_eq!(cut(&finished[2]), (0, 700_002, json!("max_spool_mb")));
    // On disk: the whole first output, part of the second, a line saying why.
    let file = |f: &Value| {
        std::fs::read_to_string(root.dir.join(f["output_file"].as_str().unwrap())).unwrap()
    };
    assert!(file(&finished[0]).ends_with("stderr:\n1\n"), "stderr kept");
    let second = file(&finished[1]);
    assert!(
        second.contains("not kept: this task used up output.max_spool_mb"),
        "{}",
        &second[second.len() - 300..]
    );
    let kept_on_disk: u64 =
        std::fs::read_dir(root.dir.join(format!("transcripts/{}", task_id(&root))))
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum();
    assert!(kept_on_disk < budget + 4096, "{kept_on_disk}");
    // The model is told the file is partial.
    let results = crate::common::last_results(&api.requests()[2].body);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("output.max_spool_mb"),
        "{results:?}"
    );
}
