//! Benchmark of notification delivery: `BENCH_TASKS` tasks (default 16) running
//! at once, `BENCH_ROUNDS` times (default 4), each `BENCH_TURNS` turns (default 4)
//! of `get_time` against a zero-latency fake API, with two `json` sinks POSTing to
//! a loopback receiver: `busy`, of every `model_response`, `tool_finished` and
//! `task_finished` (ten events a task: a sink kept busy), and `ends`, of
//! `task_finished` alone (what a chat sink is sent). Prints, per sink, the
//! delivery latency of every notification — from the event's `ts` (taken by the
//! writer just before it appends the line, to the millisecond) to the receiver
//! reading the request — as p50, p99 and max, and how many events were expected
//! and received.
//!
//! Run: `cargo bench --bench notify` (prints the figures; asserts nothing).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]
// A figure run reads top to bottom; the function-length limit is for the crate.
#![allow(clippy::too_many_lines)]

use std::time::{Duration, Instant, UNIX_EPOCH};

use harnessd_testkit::daemon::{http, serve, submit};
use harnessd_testkit::fake_api::{FakeApi, Reply};
use harnessd_testkit::param;
use harnessd_testkit::root::init_root;
use serde_json::{Value, json};

/// Milliseconds since the epoch of an event's `ts`.
fn ts_ms(ts: &str) -> f64 {
    let at = chrono::DateTime::parse_from_rfc3339(ts).unwrap();
    at.timestamp_millis() as f64
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let (tasks, rounds, turns) = (
        param("BENCH_TASKS", 16),
        param("BENCH_ROUNDS", 4),
        param("BENCH_TURNS", 4),
    );
    let api = FakeApi::with_responder(Box::new(move |body: &Value| {
        let done = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count();
        if done < turns {
            Reply::tool(&format!("toolu_{done}"), "get_time", json!({}))
        } else {
            Reply::text("done")
        }
    }));
    let receiver = FakeApi::with_responder(Box::new(|_| Reply::raw(200, "ok")));
    let bin = env!("CARGO_BIN_EXE_harnessd");
    let slots = format!("max_concurrent_tasks = {tasks}");
    let max_turns = format!("max_turns = {}", turns + 10);
    let root = init_root(
        bin,
        "notify",
        &[
            ("https://api.anthropic.com", api.url.as_str()),
            ("max_concurrent_tasks = 4", slots.as_str()),
            ("max_turns = 12", max_turns.as_str()),
            ("no_progress_repeats = 3", "no_progress_repeats = 100"),
        ],
    );
    let sink = format!(
        "\n[[notify]]\nname = \"busy\"\nurl = \"{url}/busy\"\n\
         events = [\"model_response\", \"tool_finished\", \"task_finished\"]\n\
         \n[[notify]]\nname = \"ends\"\nurl = \"{url}/ends\"\nevents = [\"task_finished\"]\n",
        url = receiver.url
    );
    let config = root.join("config/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&sink);
    std::fs::write(&config, text).unwrap();
    let mut child = serve(bin, &root);
    let socket = root.join("run/harnessd.sock");
    // Per task: turns + 1 model responses, turns tool calls, one end.
    let per_task = (turns + 1) + turns + 1;
    let expected = tasks * rounds * (per_task + 1);
    let started = Instant::now();
    for round in 0..rounds {
        let ids: Vec<String> = (0..tasks)
            .map(|i| submit(&socket, &format!("round {round} task {i}")))
            .collect();
        for id in ids {
            loop {
                let t = http(&socket, "GET", &format!("/v1/tasks/{id}"), "").unwrap();
                if t["status"] == "finished" {
                    break;
                }
                assert!(started.elapsed() < Duration::from_secs(600), "stuck");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    while receiver.received().len() < expected && started.elapsed() < Duration::from_secs(600) {
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    println!(
        "notify: {tasks} tasks at once × {rounds} rounds, {turns} turns of get_time each, \
         zero-latency fake API, two json sinks on loopback"
    );
    for (sink, per) in [("busy", per_task), ("ends", 1)] {
        let mut latencies: Vec<f64> = receiver
            .received()
            .iter()
            .filter(|r| r.path == format!("/{sink}"))
            .map(|r| {
                let at = r.received_wall.duration_since(UNIX_EPOCH).unwrap();
                at.as_secs_f64() * 1000.0 - ts_ms(r.body["ts"].as_str().unwrap())
            })
            .collect();
        latencies.sort_by(f64::total_cmp);
        print!(
            "  {sink}: {} of {} notifications received",
            latencies.len(),
            tasks * rounds * per
        );
        if latencies.is_empty() {
            println!();
            continue;
        }
        println!(
            "; latency from the event's ts (1 ms resolution): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies[latencies.len() - 1]
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
