//! `delegate`: a child task runs through the same loop with its own transcript and
//! id, narrowed by the call's tools, held to its parent's budgets, nested and run
//! in parallel within the limits, asked about as its own task (with both ids),
//! cancelled with its parent, and continued when its parent is resumed after a
//! kill -9. The real binary against the fake Messages API, whose replies are
//! routed by each request's first message (the task's prompt).

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::fake_api::prompt_of;
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, stdout, wait_until};

/// Replies by prompt: each request gets the next reply scripted for its task's
/// first message. A prompt with nothing left gets an error reply (the test then
/// fails on the task's outcome rather than hanging).
pub(crate) fn family(script: Vec<(&str, Vec<Reply>)>) -> FakeApi {
    let script = script
        .into_iter()
        .map(|(p, r)| (p.to_string(), r))
        .collect();
    FakeApi::by_prompt(
        script,
        Reply::error(400, "invalid_request_error", "unscripted"),
    )
}

/// The requests of the task whose prompt is `prompt`.
pub(crate) fn requests_of(api: &FakeApi, prompt: &str) -> Vec<Value> {
    api.requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| prompt_of(b) == prompt)
        .collect()
}

/// The names of the tools a request offered.
pub(crate) fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// A root where `delegate` and the usual read tools run without asking.
fn root_allowing_delegate(api: &FakeApi) -> TestRoot {
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["read_file", "list_dir", "get_time", "delegate"]);
        s["tools"]["ask"] = json!(["write_file", "edit_file", "run_bash", "run_python"]);
    });
    root
}

fn delegate(id: &str, prompt: &str) -> Reply {
    Reply::tool(id, "delegate", json!({ "prompt": prompt }))
}

/// Every event whose task is `id`.
fn events_of_task(root: &TestRoot, id: &str) -> Vec<Value> {
    root.events()
        .into_iter()
        .filter(|e| e["task_id"] == id)
        .collect()
}

/// The child tasks' `task_started` events.
fn child_starts(root: &TestRoot) -> Vec<Value> {
    root.events_of("task_started")
        .into_iter()
        .filter(|e| e.get("parent_task_id").is_some())
        .collect()
}

/// Checks the log's chain and every line against the shipped schema.
pub(crate) fn log_holds(root: &TestRoot) {
    let out = root.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bad = crate::common::schema::violations(&root.dir.join("transcripts"));
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
fn a_childs_answer_is_the_parents_result_and_every_child_line_names_the_parent() {
    let api = family(vec![
        (
            "parent",
            vec![delegate("d1", "child"), Reply::text("parent done")],
        ),
        (
            "child",
            vec![
                Reply::tool("c1", "get_time", json!({})),
                Reply::text("the child's answer: 42"),
            ],
        ),
    ]);
    let root = root_allowing_delegate(&api);
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("parent done"));
    let parent_second = &requests_of(&api, "parent")[1];
    let result = &last_results(parent_second)[0];
    assert_eq!(result["content"], "the child's answer: 42", "{result}");
    assert!(result.get("is_error").is_none(), "{result}");
    let starts = child_starts(&root);
    assert_eq!(starts.len(), 1, "{starts:?}");
    let parent_id = root.events_of("task_started")[0]["task_id"].clone();
    let child_id = starts[0]["task_id"].as_str().unwrap().to_string();
    assert_eq!(starts[0]["parent_task_id"], parent_id);
    assert_eq!(starts[0]["parent_tool_use_id"], "d1");
    let child_events = events_of_task(&root, &child_id);
    assert!(child_events.len() >= 6, "{child_events:?}");
    // run's progress says which lines are the child's.
    let progress = stderr(&out);
    assert!(
        progress.contains(&format!("  [child {child_id}] [turn 1] asking the model")),
        "{progress}"
    );
    for e in &child_events {
        assert_eq!(e["parent_task_id"], parent_id, "{e}");
    }
    // Its own transcript, finished, with its own history.
    let t: Value = serde_json::from_str(
        &std::fs::read_to_string(root.dir.join(format!("transcripts/{child_id}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(t["status"], "finished");
    assert_eq!(t["answer"], "the child's answer: 42");
    // The parent's task_finished counts the child's tokens: two responses of its
    // own and two of the child's, 15 tokens each.
    let finished = root.events_of("task_finished");
    let parent_end = finished.iter().find(|e| e["task_id"] == parent_id).unwrap();
    assert_eq!(parent_end["usage"]["input_tokens"], 40, "{parent_end}");
    log_holds(&root);
}

#[test]
fn a_child_asking_for_a_tool_its_parent_lacks_is_refused_and_never_starts() {
    let api = family(vec![(
        "parent",
        vec![
            Reply::tool(
                "d1",
                "delegate",
                json!({"prompt": "child", "tools": ["get_time", "run_python"]}),
            ),
            Reply::text("ok"),
        ],
    )]);
    let root = root_allowing_delegate(&api);
    root.set_config(
        "tools",
        "enabled",
        r#"["read_file", "list_dir", "get_time", "delegate"]"#,
    );
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = &last_results(&requests_of(&api, "parent")[1])[0];
    assert_eq!(result["is_error"], true, "{result}");
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("run_python") && text.contains("no child"),
        "{text}"
    );
    assert!(child_starts(&root).is_empty());
    assert!(requests_of(&api, "child").is_empty());
}

#[test]
fn a_narrowed_child_is_offered_and_may_use_only_its_tools() {
    let api = family(vec![
        (
            "parent",
            vec![
                Reply::tool(
                    "d1",
                    "delegate",
                    json!({"prompt": "child", "tools": ["get_time"]}),
                ),
                Reply::text("ok"),
            ],
        ),
        (
            "child",
            vec![
                Reply::tool("c1", "list_dir", json!({})),
                Reply::text("done"),
            ],
        ),
    ]);
    let root = root_allowing_delegate(&api);
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let child = requests_of(&api, "child");
    assert_eq!(offered(&child[0]), ["get_time"]);
    let refused = &last_results(&child[1])[0];
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        refused["content"]
            .as_str()
            .unwrap()
            .contains("unknown tool"),
        "{refused}"
    );
    // The parent itself was offered delegate and its other tools.
    let parent = requests_of(&api, "parent");
    assert!(offered(&parent[0]).contains(&"delegate".to_string()));
    assert_eq!(child_starts(&root)[0]["tools"], json!(["get_time"]));
}

/// A reply with these token counts.
pub(crate) fn costly(reply: Reply, input: u64) -> Reply {
    let mut body: Value = serde_json::from_str(&reply.body).unwrap();
    body["usage"] = json!({"input_tokens": input, "output_tokens": 0});
    Reply {
        body: body.to_string(),
        ..reply
    }
}

#[test]
fn a_childs_spending_stops_the_parent_at_its_token_budget() {
    let api = family(vec![
        (
            "parent",
            vec![costly(delegate("d1", "child"), 100), Reply::text("never")],
        ),
        (
            "child",
            vec![
                costly(Reply::tool("c1", "get_time", json!({})), 600),
                costly(Reply::tool("c2", "get_time", json!({})), 600),
                Reply::text("never either"),
            ],
        ),
    ]);
    let root = root_allowing_delegate(&api);
    root.set_config("loop", "token_budget", "1000");
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // The child stopped at its second response (100 + 600 + 600 ≥ 1000), its
    // call unrun; the parent stopped without another request.
    assert_eq!(requests_of(&api, "child").len(), 2);
    assert_eq!(requests_of(&api, "parent").len(), 1);
    let finished = root.events_of("task_finished");
    assert_eq!(finished.len(), 2);
    for f in &finished {
        assert_eq!(f["stop_reason"], "token_budget", "{f}");
    }
    let parent = finished
        .iter()
        .find(|f| f.get("parent_task_id").is_none())
        .unwrap();
    assert_eq!(parent["usage"]["input_tokens"], 1300, "{parent}");
}

#[test]
fn a_childs_spending_stops_the_parent_at_its_usd_budget() {
    let api = family(vec![
        (
            "parent",
            vec![delegate("d1", "child"), Reply::text("never")],
        ),
        (
            "child",
            vec![
                costly(Reply::tool("c1", "get_time", json!({})), 2_000_000),
                Reply::text("never either"),
            ],
        ),
    ]);
    let root = root_allowing_delegate(&api);
    root.set_config("api", "model", r#""m""#);
    root.set_config("loop", "usd_budget", "1.0");
    root.set_config("loop", "token_budget", "100000000");
    for key in ["input", "output", "cache_write", "cache_read"] {
        root.set_config("pricing.\"m\"", key, "1.0");
    }
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(requests_of(&api, "parent").len(), 1);
    let finished = root.events_of("task_finished");
    for f in &finished {
        assert_eq!(f["stop_reason"], "usd_budget", "{f}");
    }
    let parent = finished
        .iter()
        .find(|f| f.get("parent_task_id").is_none())
        .unwrap();
    assert!(parent["usd"].as_f64().unwrap() >= 2.0, "{parent}");
}

#[test]
fn delegation_depth_is_bounded() {
    let api = family(vec![
        ("parent", vec![delegate("d1", "child"), Reply::text("ok")]),
        (
            "child",
            vec![delegate("d2", "grandchild"), Reply::text("child ok")],
        ),
    ]);
    let root = root_allowing_delegate(&api);
    root.set_config("loop", "max_delegation_depth", "1");
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let child = requests_of(&api, "child");
    assert!(!offered(&child[0]).contains(&"delegate".to_string()));
    let refused = &last_results(&child[1])[0];
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(requests_of(&api, "grandchild").is_empty());
    assert_eq!(child_starts(&root).len(), 1);
}

#[test]
fn a_grandchild_runs_within_the_default_depth_and_names_its_own_parent() {
    let api = family(vec![
        ("parent", vec![delegate("d1", "child"), Reply::text("ok")]),
        (
            "child",
            vec![delegate("d2", "grandchild"), Reply::text("child ok")],
        ),
        ("grandchild", vec![Reply::text("grandchild ok")]),
    ]);
    let root = root_allowing_delegate(&api);
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let starts = child_starts(&root);
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[1]["parent_task_id"], starts[0]["task_id"]);
    // At the deepest level delegate is not offered.
    let grandchild = requests_of(&api, "grandchild");
    assert!(!offered(&grandchild[0]).contains(&"delegate".to_string()));
    log_holds(&root);
}

/// Two `delegate` calls in one turn, each child's first reply slow: the order in
/// which the children's requests reached the fake.
fn two_children_order(parallel: &str) -> Vec<String> {
    let mut slow_a = Reply::tool("a1", "get_time", json!({}));
    slow_a.delay = Duration::from_millis(400);
    let mut slow_b = Reply::tool("b1", "get_time", json!({}));
    slow_b.delay = Duration::from_millis(400);
    let api = family(vec![
        (
            "parent",
            vec![
                Reply::tools(&[
                    ("d1", "delegate", json!({"prompt": "child a"})),
                    ("d2", "delegate", json!({"prompt": "child b"})),
                ]),
                Reply::text("ok"),
            ],
        ),
        ("child a", vec![slow_a, Reply::text("a")]),
        ("child b", vec![slow_b, Reply::text("b")]),
    ]);
    let root = root_allowing_delegate(&api);
    root.set_config("loop", "max_parallel_delegates", parallel);
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = last_results(&requests_of(&api, "parent")[1]);
    assert_eq!(
        (&results[0]["content"], &results[1]["content"]),
        (&json!("a"), &json!("b"))
    );
    api.requests()
        .into_iter()
        .map(|r| prompt_of(&r.body))
        .filter(|p| p.starts_with("child"))
        .collect()
}

#[test]
fn one_parallel_delegate_runs_children_one_after_the_other() {
    assert_eq!(
        two_children_order("1"),
        ["child a", "child a", "child b", "child b"]
    );
}

#[test]
fn two_parallel_delegates_run_side_by_side() {
    // Both first requests arrive before either child's second: they ran at once.
    let order = two_children_order("2");
    let mut firsts = order[..2].to_vec();
    firsts.sort();
    assert_eq!(firsts, ["child a", "child b"], "{order:?}");
}

#[test]
fn a_childs_ask_is_listed_with_both_ids_and_its_approval_resumes_it() {
    let api = family(vec![
        (
            "parent",
            vec![delegate("d1", "child"), Reply::text("parent done")],
        ),
        (
            "child",
            vec![
                Reply::tool(
                    "w1",
                    "write_file",
                    json!({"path": "from-child.txt", "content": "hi"}),
                ),
                Reply::text("written"),
            ],
        ),
    ]);
    let root = root_allowing_delegate(&api);
    let d = Daemon::start(&root);
    let id = d.submit("parent");
    wait_until("the child's approval", || {
        d.request("GET", "/v1/approvals", None).1["approvals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let (_, list) = d.request("GET", "/v1/approvals", None);
    let a = &list["approvals"][0];
    assert_eq!(a["parent_task_id"], id.as_str(), "{a}");
    let child_id = a["task_id"].as_str().unwrap().to_string();
    assert!(child_id.starts_with(&format!("{id}.")), "{a}");
    let listing = stdout(&root.run(&["approvals"]));
    assert!(
        listing.contains(&child_id) && listing.contains(&id),
        "{listing}"
    );
    // The child is a task the daemon knows, running under its parent.
    let (_, t) = d.request("GET", &format!("/v1/tasks/{child_id}"), None);
    assert_eq!(t["parent_task_id"], id.as_str(), "{t}");
    let approval = a["approval_id"].as_str().unwrap();
    let out = root.run(&["approve", approval]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let done = d.wait_finished(&id);
    assert_eq!(done["stop_reason"], "end_turn", "{done}");
    assert_eq!(
        std::fs::read_to_string(root.workspace().join("from-child.txt")).unwrap(),
        "hi"
    );
    let result = &last_results(&requests_of(&api, "parent")[1])[0];
    assert_eq!(result["content"], "written");
    // `tasks` nests the child under its parent; `show` prints the tree.
    let tasks = stdout(&root.run(&["tasks"]));
    let (p, c) = (tasks.find(&id).unwrap(), tasks.rfind(&child_id).unwrap());
    assert!(p < c, "{tasks}");
    let show = stdout(&root.run(&["show", &id]));
    assert!(show.contains(&format!("  child     {child_id}")), "{show}");
    let tree = show
        .split("\nchildren:\n")
        .nth(1)
        .expect("the children's tree");
    assert!(
        tree.starts_with(&format!("  {child_id}  finished (end_turn)  30 tokens  $")),
        "{show}"
    );
    // The parent's events include its child's.
    let out = root.run(&["events", "--task", &id, "--json"]);
    let lines = stdout(&out);
    assert!(
        lines.contains(&format!("\"task_id\":\"{child_id}\"")),
        "{lines}"
    );
    let child_show = root.run(&["show", &child_id]);
    assert_eq!(child_show.status.code(), Some(0), "{}", stderr(&child_show));
    // A child is resumed through its parent only.
    let (status, body) = d.request("POST", &format!("/v1/tasks/{child_id}/resume"), None);
    assert_eq!(status, 409, "{body}");
    log_holds(&root);
}

/// Whether a process whose command line contains `needle` still runs.
pub(crate) fn process_running(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(needle)
            })
            .unwrap_or(false)
    })
}

/// A daemon running a parent whose child runs a long `sleep` (`marker` is its
/// command), once the sleep runs; the child's next reply is `then`, the parent's
/// `parent_then`.
fn child_sleeping(then: &str, parent_then: &str) -> (FakeApi, TestRoot, Daemon, String, String) {
    let marker = format!("sleep 3{}", fastrand::u32(100..999));
    let api = family(vec![
        (
            "parent",
            vec![delegate("d1", "child"), Reply::text(parent_then)],
        ),
        (
            "child",
            vec![
                Reply::tool("s1", "run_bash", json!({ "command": marker })),
                Reply::text(then),
            ],
        ),
    ]);
    let root = root_allowing_delegate(&api);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["get_time", "delegate", "run_bash(sleep *)"]);
    });
    let d = Daemon::start(&root);
    let id = d.submit("parent");
    wait_until("the child's tool", || process_running(&marker));
    (api, root, d, id, marker)
}

#[test]
fn cancelling_the_parent_cancels_the_child_and_kills_its_running_tool() {
    let (_api, root, d, id, marker) = child_sleeping("never either", "never");
    let (status, body) = d.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(status, 202, "{body}");
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "cancelled", "{t}");
    wait_until("the child's tool to die", || !process_running(&marker));
    let cancelled = root.events_of("task_cancelled");
    let child = cancelled
        .iter()
        .find(|e| e.get("parent_task_id").is_some())
        .expect("the child's task_cancelled");
    assert_eq!(child["by"], format!("parent:{id}"));
    let child_end = root
        .events_of("task_finished")
        .into_iter()
        .find(|e| e.get("parent_task_id").is_some())
        .unwrap();
    assert_eq!(child_end["stop_reason"], "cancelled");
    log_holds(&root);
}

/// Every `tool_use` of a transcript's messages has its `tool_result` next.
fn all_answered(t: &Value) {
    let messages = t["messages"].as_array().unwrap();
    for (i, m) in messages.iter().enumerate() {
        let uses: Vec<&Value> = m["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .collect();
        for u in uses {
            let next = messages.get(i + 1).expect("an answer after the call");
            let answered = next["content"]
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == u["id"]);
            assert!(answered, "{} unanswered in {}", u["id"], t["task_id"]);
        }
    }
}

#[test]
fn kill_9_mid_child_then_resuming_the_parent_continues_the_child() {
    let (api, root, mut d, id, _marker) = child_sleeping("child finished after all", "parent done");
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let d = Daemon::start(&root);
    let child_id = child_starts(&root)[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, t) = d.request("GET", &format!("/v1/tasks/{child_id}"), None);
    assert_eq!(t["status"], "interrupted", "{t}");
    let (status, body) = d.request("POST", &format!("/v1/tasks/{id}/resume"), None);
    assert_eq!(status, 202, "{body}");
    let done = d.wait_finished(&id);
    assert_eq!(done["stop_reason"], "end_turn", "{done}");
    let result = &last_results(&requests_of(&api, "parent")[1])[0];
    assert_eq!(result["content"], "child finished after all", "{result}");
    // The child's interrupted call was answered "state unknown", never rerun.
    let child_second = &requests_of(&api, "child")[1];
    let answer = &last_results(child_second)[0];
    assert!(
        answer["content"]
            .as_str()
            .unwrap()
            .contains("state unknown"),
        "{answer}"
    );
    for task in [&id, &child_id] {
        let t: Value = serde_json::from_str(
            &std::fs::read_to_string(root.dir.join(format!("transcripts/{task}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(t["status"], "finished", "{task}");
        all_answered(&t);
    }
    log_holds(&root);
}

#[test]
fn submit_wait_shows_a_childs_approval_with_both_ids_and_waits_for_the_parent() {
    let api = family(vec![
        (
            "parent",
            vec![delegate("d1", "child"), Reply::text("parent done")],
        ),
        (
            "child",
            vec![
                Reply::tool("w1", "write_file", json!({"path": "w.txt", "content": "x"})),
                Reply::text("child done"),
            ],
        ),
    ]);
    let root = root_allowing_delegate(&api);
    let d = Daemon::start(&root);
    let wait = root
        .command(&["submit", "--wait", "parent"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the child's approval", || {
        d.request("GET", "/v1/approvals", None).1["approvals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let (_, list) = d.request("GET", "/v1/approvals", None);
    let a = &list["approvals"][0];
    let (child, parent) = (
        a["task_id"].as_str().unwrap(),
        a["parent_task_id"].as_str().unwrap(),
    );
    let out = root.run(&["approve", a["approval_id"].as_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let done = wait.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(stdout(&done).contains("parent done"), "{}", stdout(&done));
    let progress = stderr(&done);
    assert!(
        progress.contains(&format!("{child} (child of {parent})")),
        "{progress}"
    );
}

#[test]
fn bad_delegation_limits_are_refused_with_file_line_and_key() {
    let api = FakeApi::start(vec![]);
    for (key, value, says) in [
        ("max_delegation_depth", "9", "must be at most 8"),
        ("max_parallel_delegates", "0", "must be greater than 0"),
        ("max_delegation_depth", "\"two\"", "invalid type"),
    ] {
        let root = TestRoot::new(&api.url);
        root.set_config("loop", key, value);
        let out = root.run(&["check"]);
        assert_eq!(out.status.code(), Some(2), "{key}");
        let err = stderr(&out);
        assert!(
            err.contains("config/config.toml:")
                && err.contains(&format!("loop.{key}"))
                && err.contains(says),
            "{key}: {err}"
        );
    }
    // Depth 0 is valid: delegation is off, and delegate is not offered.
    let api = family(vec![("p", vec![Reply::text("ok")])]);
    let root = root_allowing_delegate(&api);
    root.set_config("loop", "max_delegation_depth", "0");
    let out = root.run(&["run", "p"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!offered(&requests_of(&api, "p")[0]).contains(&"delegate".to_string()));
}

#[test]
fn policy_test_judges_a_delegate_call_by_its_prompt() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    // The shipped settings ask before a child starts.
    let out = root.run(&["policy", "test", "delegate", "review the diff"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["delegate(review *)"]);
        s["tools"]["ask"] = json!([]);
        s["tools"]["default"] = json!("deny");
    });
    let out = root.run(&["policy", "test", "delegate", "review the diff"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = root.run(&["policy", "test", "delegate", "rewrite everything"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
}

#[test]
fn cancelling_a_child_alone_stops_it_and_its_parent_goes_on() {
    let (api, root, d, id, marker) = child_sleeping("never", "parent done");
    let child_id = child_starts(&root)[0]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = d.request("POST", &format!("/v1/tasks/{child_id}/cancel"), None);
    assert_eq!(status, 202, "{body}");
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "end_turn", "{t}");
    wait_until("the child's tool to die", || !process_running(&marker));
    let result = &last_results(&requests_of(&api, "parent")[1])[0];
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("stopped with cancelled"),
        "{result}"
    );
    let (_, child) = d.request("GET", &format!("/v1/tasks/{child_id}"), None);
    assert_eq!(child["stop_reason"], "cancelled", "{child}");
    log_holds(&root);
}
