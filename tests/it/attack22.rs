//! Attacks on delegation and skills: a narrowed child's own children, and what
//! the model or a tool process can plant to escape a narrowing or a listing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr};

/// Replies by the task's prompt (its first message), as in the delegation tests.
fn family(script: Vec<(&str, Vec<Reply>)>) -> FakeApi {
    let queues: HashMap<String, VecDeque<Reply>> = script
        .into_iter()
        .map(|(prompt, replies)| (prompt.to_string(), replies.into()))
        .collect();
    let queues = Arc::new(Mutex::new(queues));
    FakeApi::with_responder(Box::new(move |body: &Value| {
        let prompt = prompt_of(body);
        let mut q = queues.lock().unwrap();
        q.get_mut(&prompt)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| Reply::error(400, "invalid_request_error", "unscripted"))
    }))
}

fn prompt_of(body: &Value) -> String {
    body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn requests_of(api: &FakeApi, prompt: &str) -> Vec<Value> {
    api.requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| prompt_of(b) == prompt)
        .collect()
}

fn offered(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// A narrowed child that delegates without `tools` gives its child its own
/// narrowing, not the whole set: a grandchild never has a tool its parent lacks,
/// on the first run or recorded for a resume.
#[test]
fn a_narrowed_childs_child_without_tools_keeps_the_narrowing() {
    let api = family(vec![
        (
            "parent",
            vec![
                Reply::tool(
                    "d1",
                    "delegate",
                    json!({"prompt": "child", "tools": ["delegate", "get_time"]}),
                ),
                Reply::text("ok"),
            ],
        ),
        (
            "child",
            vec![
                Reply::tool("d2", "delegate", json!({"prompt": "grandchild"})),
                Reply::text("child ok"),
            ],
        ),
        (
            "grandchild",
            vec![
                Reply::tool("g1", "list_dir", json!({})),
                Reply::text("grandchild ok"),
            ],
        ),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["read_file", "list_dir", "get_time", "delegate"]);
        s["tools"]["ask"] = json!(["write_file", "edit_file", "run_bash", "run_python"]);
    });
    let out = root.run(&["run", "parent"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let grandchild = requests_of(&api, "grandchild");
    assert_eq!(offered(&grandchild[0]), ["get_time"]);
    let refused = &last_results(&grandchild[1])[0];
    assert_eq!(refused["is_error"], true, "{refused}");
    let starts: Vec<Value> = root
        .events_of("task_started")
        .into_iter()
        .filter(|e| e.get("parent_task_id").is_some())
        .collect();
    let recorded = starts.last().unwrap();
    assert_eq!(
        recorded["tools"],
        json!(["delegate", "get_time"]),
        "{recorded}"
    );
}
