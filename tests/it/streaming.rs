//! Streaming (`api.stream`): the message assembled from server-sent events equals
//! the plain response block for block, so the transcript is the same either way;
//! failures mid-stream are retried per docs/config.md; the model's text reaches `run`'s
//! stderr as it streams, escaped.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

/// Replies that exercise every block kind the assembler handles: thinking with a
/// signature, redacted thinking, text with characters of 2, 3 and 4 bytes (the
/// fake cuts its byte stream every 7 bytes, so inside them), several tool calls
/// whose inputs hold such characters, and block types harnessd does not know.
fn script() -> Vec<Reply> {
    let usage = json!({"input_tokens": 1200, "output_tokens": 321, "cache_creation_input_tokens": 40, "cache_read_input_tokens": 900});
    vec![
        Reply::message_with_usage(
            json!([
                {"type": "thinking", "thinking": "Lire les notes d'abord — 日本語 😀.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxzaWduYXR1cmU="},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
                {"type": "text", "text": "Je vais lire « notes.txt » et lister le dossier… 🚀"},
                {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "notes.txt"}},
                {"type": "tool_use", "id": "toolu_02", "name": "list_dir", "input": {"path": "."}},
                {"type": "tool_use", "id": "toolu_03", "name": "read_file", "input": {"path": "données-日本.txt", "limit": 5}}
            ]),
            "tool_use",
            usage.clone(),
        ),
        Reply::message_with_usage(
            json!([
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "ünïcödé"}},
                {"type": "mystery_block", "payload": {"nested": [1, "two", {"three": null}]}},
                {"type": "text", "text": "Fini : 81,125 points ✓", "citations": [{"type": "char_location", "cited_text": "x"}]}
            ]),
            "end_turn",
            usage,
        ),
    ]
}

/// Runs `script` with `api.stream = stream`; the transcript, the exit code and the
/// requests as received.
fn run_once(script: Vec<Reply>, stream: bool) -> (Value, Option<i32>, Vec<Value>) {
    let api = FakeApi::start(script);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "stream", if stream { "true" } else { "false" });
    std::fs::write(root.workspace().join("notes.txt"), "note: ünïcödé 😀\n").unwrap();
    std::fs::write(root.workspace().join("données-日本.txt"), "ligne 1\n").unwrap();
    let out = root.run(&["run", "Lis les notes."]);
    let bodies = api.requests().into_iter().map(|r| r.body).collect();
    (root.transcript(), out.status.code(), bodies)
}

/// What must not differ between the two runs: the messages byte for byte, the
/// per-turn stop reasons and usage, the totals.
fn comparable(t: &Value) -> Value {
    let turns: Vec<Value> = t["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| json!([r["turn"], r["stop_reason"], r["usage"]]))
        .collect();
    json!({
        "messages": serde_json::to_string(&t["messages"]).unwrap(),
        "turns": turns,
        "usage": t["usage"],
        "stop_reason": t["stop_reason"],
        "answer": t["answer"],
    })
}

#[test]
fn streamed_and_plain_transcripts_are_identical() {
    let (plain, plain_code, plain_reqs) = run_once(script(), false);
    let (streamed, streamed_code, streamed_reqs) = run_once(script(), true);
    assert!(plain_reqs.iter().all(|b| b.get("stream").is_none()));
    assert!(streamed_reqs.iter().all(|b| b["stream"] == true));
    assert_eq!(plain_code, Some(0));
    assert_eq!(streamed_code, Some(0));
    assert_eq!(comparable(&streamed), comparable(&plain));
    // The thinking block and its signature were sent back exactly as received.
    let echoed = &streamed_reqs[1]["messages"][1]["content"];
    assert_eq!(echoed, &script()[0].body_json()["content"]);
    assert_eq!(streamed["messages"][1]["content"][5]["input"]["limit"], 5);
}

#[test]
fn a_tool_input_cut_by_max_tokens_streams_to_the_same_transcript() {
    let cut = || {
        vec![
            Reply::message(
                json!([
                    {"type": "text", "text": "Écrivons le fichier"},
                    {"type": "tool_use", "id": "toolu_cut", "name": "write_file", "input": {}}
                ]),
                "max_tokens",
            )
            .streamed_input(1, r#"{"path": "out.txt", "content": "début d'un très lo"#),
        ]
    };
    let (plain, plain_code, _) = run_once(cut(), false);
    let (streamed, streamed_code, _) = run_once(cut(), true);
    assert_eq!(plain_code, Some(4));
    assert_eq!(streamed_code, Some(4));
    assert_eq!(comparable(&streamed), comparable(&plain));
    assert_eq!(streamed["stop_reason"], "max_tokens");
    let answer = &streamed["messages"][2]["content"][0];
    assert_eq!(answer["tool_use_id"], "toolu_cut");
    assert!(answer["content"].as_str().unwrap().contains("max_tokens"));
}

#[test]
fn a_mid_stream_overloaded_error_is_retried_then_succeeds() {
    let api = FakeApi::start(vec![
        Reply::text("première réponse").stream_error_after(4, "overloaded_error"),
        Reply::text("Réussi après une erreur."),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Réussi après une erreur.\n");
    assert_eq!(api.requests().len(), 2);
    let errors = root.events_of("model_error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["status"], 529);
    assert!(errors[0]["retry_in_ms"].is_u64(), "{errors:?}");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded_error")
    );
}

#[test]
fn a_stream_cut_before_message_stop_is_retried() {
    let api = FakeApi::start(vec![
        Reply::text("coupé au milieu").cut_stream_after(5),
        Reply::text("complet"),
    ]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "complet\n");
    let errors = root.events_of("model_error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0]["retry_in_ms"].is_u64());
    assert_eq!(root.events_of("model_response").len(), 1);
}

#[test]
fn an_idle_stream_times_out_and_is_retried() {
    let api = FakeApi::start(vec![
        Reply::text("lent").stall_stream_after(3, Duration::from_secs(4)),
        Reply::text("rapide"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "timeout_secs", "1");
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "rapide\n");
    let errors = root.events_of("model_error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("api.timeout_secs"),
        "{errors:?}"
    );
}

#[test]
fn a_stream_past_max_response_mb_is_an_error_not_retried() {
    let big = "é".repeat(700 * 1024);
    let api = FakeApi::start(vec![Reply::text(&big), Reply::text("never")]);
    api.stream_chunks_of(16 * 1024);
    let root = TestRoot::new(&api.url);
    root.set_config("api", "max_response_mb", "1");
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("exceeds api.max_response_mb (1 MiB)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(api.requests().len(), 1);
}

#[test]
fn streamed_text_reaches_stderr_live_and_escaped() {
    let api = FakeApi::start(vec![Reply::text("Bonjour \u{1b}[31mrouge\u{1b}[0m monde")]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains('\u{1b}'), "{err:?}");
    let live = err.find("Bonjour \\x1b[31mrouge").expect("streamed text");
    let response = err.find("[turn 1] end_turn").expect("response line");
    assert!(live < response, "{err}");
}

#[test]
fn submit_wait_shows_the_streamed_text_through_the_daemon() {
    // The answer comes 2 s after the request, long after `submit --wait` has
    // started following the task: text streamed before it follows is not replayed.
    let mut answer = Reply::text("Réponse \u{1b}]0;titre\u{7} en direct");
    answer.delay = Duration::from_secs(2);
    let api = FakeApi::start(vec![answer]);
    let root = TestRoot::new(&api.url);
    let _d = Daemon::start(&root);
    let out = root.run(&["submit", "--wait", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("Réponse \\x1b]0;titre\\x07 en direct\n[done] end_turn"),
        "{err:?}"
    );
    // Not an audit event.
    assert!(root.events_of("text_delta").is_empty());
}
