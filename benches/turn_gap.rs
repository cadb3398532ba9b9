//! Benchmark of the loop's own overhead (figures of docs/benchmarks.md), against the fake API
//! with zero latency:
//!
//! - the gap between a response arriving and the next request leaving, over a
//!   50-turn task whose every turn runs `run_bash("echo hi")` in a child process
//!   (median, p90, and turn 5 against turn 50);
//! - time from process start to the first request;
//! - peak RSS of `harnessd run`;
//! - the same task with `api.stream = false`, and what streaming adds to the
//!   median gap (the fake writes each stream at once, so this is the client's
//!   framing and assembly, not the network).
//!
//! Run: `cargo bench --bench turn_gap` (prints the figures; asserts nothing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use harnessd_testkit::fake_api;
use harnessd_testkit::root::{edit_file, init_root};
use harnessd_testkit::rss;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_api::{FakeApi, Reply};
use serde_json::json;

fn setup(api_url: &str, turns: usize, stream: bool) -> std::path::PathBuf {
    let sync = std::env::var("BENCH_SYNC").unwrap_or_else(|_| "before_action".into());
    let max_turns = format!("max_turns = {}", turns + 1);
    // BENCH_SYNC=off measures without the audit log's fdatasync before actions.
    let sync = format!("sync = \"{sync}\"");
    let dir = init_root(
        env!("CARGO_BIN_EXE_harnessd"),
        "turns",
        &[
            ("https://api.anthropic.com", api_url),
            ("max_turns = 12", max_turns.as_str()),
            ("no_progress_repeats = 3", "no_progress_repeats = 1000"),
            ("token_budget = 200000", "token_budget = 100000000"),
            ("sync = \"before_action\"", sync.as_str()),
            (
                "stream = true",
                if stream {
                    "stream = true"
                } else {
                    "stream = false"
                },
            ),
        ],
    );
    edit_file(
        &dir.join("policies/settings.json"),
        &[("\"run_bash(ls *)\"", "\"run_bash(echo *)\"")],
    );
    dir
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let streamed = run(true);
    let plain = run(false);
    println!(
        "turn_gap: streaming adds {:+.3} ms to the median gap ({:.3} ms streamed, {:.3} ms plain)",
        ms(streamed) - ms(plain),
        ms(streamed),
        ms(plain)
    );
}

/// One task, streamed or not; prints its figures and returns its median gap.
fn run(stream: bool) -> Duration {
    // BENCH_TOOL=get_time measures the loop without a child process, for comparison.
    let in_process = std::env::var("BENCH_TOOL").is_ok_and(|t| t == "get_time");
    // BENCH_TURNS changes the task's length (default 50); BENCH_SYNC=off turns the
    // audit log's sync before actions off.
    let turns: usize = std::env::var("BENCH_TURNS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(50);
    let mut script: Vec<Reply> = (0..turns)
        .map(|i| {
            let id = format!("toolu_{i:03}");
            if in_process {
                Reply::tool(&id, "get_time", json!({}))
            } else {
                Reply::tool(&id, "run_bash", json!({"command": "echo hi"}))
            }
        })
        .collect();
    script.push(Reply::text("done"));
    let api = FakeApi::start(script);
    // The whole stream in one write: what is measured is harnessd's side.
    api.stream_chunks_of(0);
    let root = setup(&api.url, turns, stream);
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_harnessd"))
        .arg("--root")
        .arg(&root)
        .args(["run", "say hi fifty times"])
        .env("ANTHROPIC_API_KEY", "bench-key")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (status, peak_kib) = rss::wait_measuring_rss(child);
    let total = started.elapsed();
    let requests = api.requests();
    let replied = api.replied_at();
    assert_eq!(requests.len(), turns + 1, "exit status {status:?}");
    let first_request = requests[0].received_at - started;
    let gaps: Vec<Duration> = (0..turns)
        .map(|i| requests[i + 1].received_at - replied[i])
        .collect();
    let mut sorted = gaps.clone();
    let med = median(&mut sorted);
    let p90 = sorted[sorted.len() * 9 / 10];
    let early: Vec<Duration> = gaps[2..8].to_vec();
    let late: Vec<Duration> = gaps[turns - 6..].to_vec();
    let tool = if in_process {
        "get_time()"
    } else {
        "run_bash(\"echo hi\")"
    };
    let mode = if stream { "streamed" } else { "not streamed" };
    println!("turn_gap: {turns} turns of {tool} against a zero-latency fake API, {mode}");
    println!(
        "  gap response→next request: median {:.2} ms, p90 {:.2} ms, min {:.2} ms, max {:.2} ms",
        ms(med),
        ms(p90),
        ms(sorted[0]),
        ms(*sorted.last().unwrap())
    );
    println!(
        "  gap at turns 3-8 median {:.2} ms; turns {}-{} median {:.2} ms (turn 5: {:.2} ms, turn {}: {:.2} ms)",
        ms(median(&mut early.clone())),
        turns - 5,
        turns,
        ms(median(&mut late.clone())),
        ms(gaps[4]),
        turns,
        ms(gaps[turns - 1])
    );
    println!(
        "  process start → first request: {:.2} ms",
        ms(first_request)
    );
    println!(
        "  peak RSS of harnessd run: {:.1} MiB",
        peak_kib as f64 / 1024.0
    );
    println!("  whole task: {:.1} ms", ms(total));
    let _ = std::fs::remove_dir_all(&root);
    med
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
