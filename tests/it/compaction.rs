//! Context compaction (docs/long-tasks.md) through the real binary: a long task stays under
//! the threshold, keeps every tool pair valid and the first message, saves each
//! pre-compaction history, and a 400 "prompt is too long" compacts and retries.

use serde_json::{Value, json};

use crate::common::fake_api::check_pairing;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

const PROMPT: &str = "Read big.txt again and again.";
const THRESHOLD: u64 = 60_000;

use harnessd_testkit::long_task::{
    is_summary_request, long_task_api as long_task_model, tokens_of,
};

fn long_task_root(api: &FakeApi) -> TestRoot {
    let root = TestRoot::new(&api.url);
    root.set_config("loop", "max_turns", "400");
    root.set_config("loop", "token_budget", "1000000000000");
    root.set_config("loop", "no_progress_repeats", "1000");
    root.set_config(
        "context",
        "compress_threshold_tokens",
        &THRESHOLD.to_string(),
    );
    root.edit_settings(|s| s["output"]["max_chars"] = json!(12_000));
    let line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-+=\n";
    std::fs::write(
        root.workspace().join("big.txt"),
        line.repeat(10 * 1024 / line.len()),
    )
    .unwrap();
    root
}

#[test]
fn a_300_turn_task_with_10kb_results_finishes_under_the_threshold() {
    let (_, api) = long_task_model(300);
    let root = long_task_root(&api);
    let out = root.run(&["run", PROMPT]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "done\n");
    // `requests()` checks every request's tool_use/tool_result pairing.
    let requests = api.requests();
    let turns: Vec<&Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| !is_summary_request(b))
        .collect();
    assert_eq!(turns.len(), 301);
    // One turn adds a 10 KB result and a 1 KB note: about 3 000 tokens.
    let growth = 3_500;
    for (i, body) in turns.iter().enumerate() {
        let tokens = tokens_of(body);
        assert!(
            tokens <= THRESHOLD + growth,
            "request {} has {tokens} tokens",
            i + 1
        );
        assert_eq!(body["messages"][0]["content"][0]["text"], PROMPT);
    }
    let compactions = root.events_of("context_compacted");
    assert!(compactions.len() >= 2, "{compactions:?}");
    for c in &compactions {
        let file = root.dir.join(c["history_file"].as_str().unwrap());
        let saved: Vec<Value> = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert!(
            c["tokens_after"].as_u64() < c["tokens_before"].as_u64(),
            "{c}"
        );
        assert!(saved.len() > 6, "{}", file.display());
    }
    // Some compactions had to summarise: each summary request had tools disabled.
    assert!(compactions.iter().any(|c| c["method"] == "summary"));
    let summaries: Vec<&Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| is_summary_request(b))
        .collect();
    assert!(!summaries.is_empty());
    for s in summaries {
        let last = s["messages"].as_array().unwrap().last().unwrap();
        let text = last["content"].as_array().unwrap().last().unwrap()["text"]
            .as_str()
            .unwrap();
        assert!(text.starts_with("The history of this task is about to be compacted"));
    }
    // The final transcript answers every tool_use.
    let t = root.transcript();
    check_pairing(&json!({"messages": t["messages"]})).unwrap();
    assert_eq!(t["turns"].as_array().unwrap().len(), 301);
}

#[test]
fn a_prompt_too_long_400_compacts_once_and_retries() {
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "list_dir", json!({"path": "."})),
        Reply::tool("tu_2", "list_dir", json!({"path": "."})),
        Reply::tool("tu_3", "get_time", json!({})),
        Reply::error(
            400,
            "invalid_request_error",
            "prompt is too long: 212345 tokens > 200000 maximum",
        ),
        Reply::text("Summary: listed the workspace twice, read the time."),
        Reply::text("done after compaction"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("context", "keep_recent_messages", "2");
    let out = root.run(&["run", PROMPT]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "done after compaction\n");
    let requests = api.requests();
    assert_eq!(requests.len(), 6);
    assert!(is_summary_request(&requests[4].body));
    let retried = &requests[5].body["messages"];
    // The prompt with the summary, then the last turn kept whole.
    assert_eq!(retried.as_array().unwrap().len(), 3, "{retried}");
    assert_eq!(retried[0]["content"][0]["text"], PROMPT);
    assert!(
        retried[0]["content"][1]["text"]
            .as_str()
            .unwrap()
            .contains("Summary: listed the workspace twice")
    );
    assert_eq!(
        retried[0]["content"][1]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(retried[1]["content"][0]["id"], "tu_3");
    let c = &root.events_of("context_compacted")[0];
    assert_eq!(c["method"], "summary");
    let saved: Vec<Value> = serde_json::from_slice(
        &std::fs::read(root.dir.join(c["history_file"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    assert_eq!(saved.len(), 7);
    assert!(
        c["history_file"]
            .as_str()
            .unwrap()
            .ends_with("/history-1.json")
    );
}

/// When the kept tail itself is what is over the threshold (three 10 KB results in
/// the last six messages), compaction replaces each result as it ages out of the
/// tail but never summarises turns that are already small: the old code sent a
/// summary request (and wrote a history file) at every turn, for nothing.
#[test]
fn a_large_kept_tail_does_not_make_every_turn_summarise() {
    let turns = 8;
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let api = FakeApi::with_responder(Box::new(move |body: &Value| {
        let usage = json!({"input_tokens": tokens_of(body), "output_tokens": 5});
        if is_summary_request(body) {
            return Reply::message_with_usage(
                json!([{"type": "text", "text": "Summary."}]),
                "end_turn",
                usage,
            );
        }
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (content, stop) = if n >= turns {
            (json!([{"type": "text", "text": "done"}]), "end_turn")
        } else {
            let call = json!({"type": "tool_use", "id": format!("tu_{n}"),
                "name": "read_file", "input": {"path": "big.txt"}});
            (json!([call]), "tool_use")
        };
        Reply::message_with_usage(content, stop, usage)
    }));
    let root = long_task_root(&api);
    // About 7 700 tokens in the last six messages alone.
    root.set_config("context", "compress_threshold_tokens", "6000");
    let out = root.run(&["run", PROMPT]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "done\n");
    let requests = api.requests();
    let summaries = requests
        .iter()
        .filter(|r| is_summary_request(&r.body))
        .count();
    assert_eq!(summaries, 0, "summary requests for turns already small");
    let compacted = root.events_of("context_compacted");
    assert!(!compacted.is_empty(), "old results were still replaced");
    assert!(
        compacted.iter().all(|c| c["method"] == "placeholders"),
        "{compacted:?}"
    );
}
