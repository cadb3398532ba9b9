//! Benchmark of delegation (figures of docs/benchmarks.md), against the fake API with
//! zero latency, `audit.sync = "before_action"`:
//!
//! - per-delegation overhead: from the fake's reply holding a `delegate` call to
//!   the child's first request arriving (the call recorded and judged, the child's
//!   transcript and `task_started` written, its request built), over 30
//!   delegations, against the same gap for a `get_time` call (the loop's own
//!   turn gap with an in-process tool);
//! - a child's turn gap (30 turns of `get_time`) with a sibling child running
//!   beside it (`loop.max_parallel_delegates = 2`) and alone (`= 1`), measured
//!   the same way: between one request of the child and its next.
//!
//! Run: `cargo bench --bench delegation` (prints the figures; asserts nothing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harnessd_testkit::fake_api::{FakeApi, Reply, prompt_of};
use harnessd_testkit::root::init_root;
use serde_json::{Value, json};

const TURNS: usize = 30;

/// A fake whose replies are scripted per prompt (the task's first message).
fn family(script: Vec<(String, Vec<Reply>)>) -> FakeApi {
    FakeApi::by_prompt(script, Reply::text("unscripted"))
}

fn root(api: &FakeApi, parallel: u32) -> std::path::PathBuf {
    let max_turns = format!("max_turns = {}", 2 * TURNS + 5);
    let parallel = format!("max_parallel_delegates = {parallel}");
    let dir = init_root(
        env!("CARGO_BIN_EXE_harnessd"),
        "delegation",
        &[
            ("https://api.anthropic.com", api.url.as_str()),
            ("max_turns = 12", max_turns.as_str()),
            ("no_progress_repeats = 3", "no_progress_repeats = 1000"),
            ("token_budget = 200000", "token_budget = 100000000"),
            ("max_parallel_delegates = 2", parallel.as_str()),
        ],
    );
    let settings = dir.join("policies/settings.json");
    let mut value: Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    value["tools"]["allow"] = json!(["get_time", "delegate"]);
    value["tools"]["ask"] = json!([]);
    std::fs::write(&settings, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    dir
}

fn run(dir: &std::path::Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_harnessd"))
        .args(["run", "--root"])
        .arg(dir)
        .arg("parent")
        .env("ANTHROPIC_API_KEY", "bench")
        .env_remove("ANTHROPIC_BASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

/// Gaps from a reply that asked for `tool` to the request after it.
fn gaps_after(api: &FakeApi, next_is_child: bool) -> Vec<Duration> {
    let requests = api.requests();
    let replied = api.replied_at();
    (0..requests.len() - 1)
        .filter(|&i| prompt_of(&requests[i].body) == "parent")
        .filter(|&i| (prompt_of(&requests[i + 1].body) != "parent") == next_is_child)
        .map(|i| requests[i + 1].received_at - replied[i])
        .collect()
}

/// 30 delegations one after the other, then 30 `get_time` calls, in one parent.
fn overhead() {
    let mut parent: Vec<Reply> = (0..TURNS)
        .map(|i| {
            Reply::tool(
                &format!("d{i}"),
                "delegate",
                json!({"prompt": format!("child {i}")}),
            )
        })
        .collect();
    parent.extend((0..TURNS).map(|i| Reply::tool(&format!("g{i}"), "get_time", json!({}))));
    parent.push(Reply::text("done"));
    let mut script = vec![("parent".to_string(), parent)];
    script.extend((0..TURNS).map(|i| (format!("child {i}"), vec![Reply::text("ok")])));
    let api = family(script);
    let dir = root(&api, 2);
    run(&dir);
    let delegation = median(&mut gaps_after(&api, true));
    let requests = api.requests();
    let replied = api.replied_at();
    // get_time turns of the parent: a parent reply followed by a parent request,
    // after the delegations (whose answer turns also follow a child).
    let mut plain: Vec<Duration> = (0..requests.len() - 1)
        .filter(|&i| {
            prompt_of(&requests[i].body) == "parent"
                && prompt_of(&requests[i + 1].body) == "parent"
                && requests[i].body["messages"].as_array().unwrap().len() > 2 * TURNS + 1
        })
        .map(|i| requests[i + 1].received_at - replied[i])
        .collect();
    let plain = median(&mut plain);
    println!(
        "delegation: child start to first request, median of {TURNS}: {delegation:.3} ms \
         (a get_time turn gap: {plain:.3} ms; delegation adds {:+.3} ms)",
        delegation - plain
    );
}

/// Median gap between one child's consecutive requests, with two children of
/// 30 get_time turns run with `parallel` at once.
fn child_gap(parallel: u32) -> f64 {
    let child = |name: &str| {
        let mut r: Vec<Reply> = (0..TURNS)
            .map(|i| Reply::tool(&format!("{name}{i}"), "get_time", json!({})))
            .collect();
        r.push(Reply::text("ok"));
        r
    };
    let api = family(vec![
        (
            "parent".into(),
            vec![
                Reply::tools(&[
                    ("d1", "delegate", json!({"prompt": "child a"})),
                    ("d2", "delegate", json!({"prompt": "child b"})),
                ]),
                Reply::text("done"),
            ],
        ),
        ("child a".into(), child("a")),
        ("child b".into(), child("b")),
    ]);
    let dir = root(&api, parallel);
    run(&dir);
    let requests = api.requests();
    let mut gaps = Vec::new();
    for name in ["child a", "child b"] {
        let times: Vec<Instant> = requests
            .iter()
            .filter(|r| prompt_of(&r.body) == name)
            .map(|r| r.received_at)
            .collect();
        gaps.extend(times.windows(2).map(|w| w[1] - w[0]));
    }
    median(&mut gaps)
}

fn main() {
    overhead();
    let alone = child_gap(1);
    let beside = child_gap(2);
    println!(
        "delegation: a child's turn gap (request to request, get_time), median: alone \
         {alone:.3} ms, with a sibling running beside it {beside:.3} ms ({:+.3} ms)",
        beside - alone
    );
}
