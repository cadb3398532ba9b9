//! Benchmark of a long task under context compaction (the figures of docs/long-tasks.md): 300
//! turns, each a `read_file` returning 10 KB plus 1 KB of model commentary, with
//! `context.compress_threshold_tokens = 60000` and a fake API that reports input
//! tokens as request bytes / 4 and streams its answers:
//!
//! - peak RSS of `harnessd run` over the whole task;
//! - request bytes at turns 30, 100, 200 and 300 (bounded, not growing with turns);
//! - compactions, by method, and the time spent in them (`duration_ms` of each
//!   `context_compacted`, the summary requests included).
//!
//! Run: `cargo bench --bench long_task` (prints the figures; asserts nothing but
//! that the task finished).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::process::{Command, Stdio};
use std::time::Instant;

use harnessd_testkit::root::{edit_file, init_root};
use harnessd_testkit::rss;
use serde_json::Value;

const TURNS: usize = 300;

fn main() {
    let (_asked, api) = harnessd_testkit::long_task::long_task_api(TURNS);
    api.stream_chunks_of(0);
    let root = init_root(
        env!("CARGO_BIN_EXE_harnessd"),
        "long",
        &[
            ("https://api.anthropic.com", api.url.as_str()),
            ("max_turns = 12", "max_turns = 400"),
            ("no_progress_repeats = 3", "no_progress_repeats = 1000"),
            ("token_budget = 200000", "token_budget = 1000000000000"),
        ],
    );
    edit_file(
        &root.join("policies/settings.json"),
        &[("\"max_chars\": 8000", "\"max_chars\": 12000")],
    );
    let line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-+=\n";
    std::fs::write(
        root.join("workspace/big.txt"),
        line.repeat(10 * 1024 / line.len()),
    )
    .unwrap();
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_harnessd"))
        .arg("--root")
        .arg(&root)
        .args(["run", "Read big.txt again and again."])
        .env("ANTHROPIC_API_KEY", "bench-key")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (status, peak_kib) = rss::wait_measuring_rss(child);
    let total = started.elapsed();
    assert!(status.success(), "the task failed: {status:?}");
    let turns: Vec<usize> = api
        .requests()
        .iter()
        .filter(|r| r.body["tool_choice"]["type"] != "none")
        .map(|r| r.body.to_string().len())
        .collect();
    assert_eq!(turns.len(), TURNS + 1);
    let events = std::fs::read_to_string(root.join("transcripts/events.jsonl")).unwrap();
    let compactions: Vec<Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "context_compacted")
        .collect();
    let summaries = compactions
        .iter()
        .filter(|c| c["method"] == "summary")
        .count();
    let compact_ms: u64 = compactions
        .iter()
        .filter_map(|c| c["duration_ms"].as_u64())
        .sum();
    println!("long_task: {TURNS} turns of read_file (10 KB each), threshold 60000 tokens");
    println!(
        "  peak RSS of harnessd run: {:.1} MiB",
        peak_kib as f64 / 1024.0
    );
    for t in [30, 100, 200, 300] {
        println!("  request bytes at turn {t}: {}", turns[t - 1]);
    }
    println!(
        "  largest request: {} bytes; compactions: {} ({} with a summary), {} ms in all",
        turns.iter().max().unwrap(),
        compactions.len(),
        summaries,
        compact_ms
    );
    println!("  whole task: {:.1} s", total.as_secs_f64());
    let _ = std::fs::remove_dir_all(&root);
}
