//! Benchmark of the daemon (figures of docs/benchmarks.md): 100 tasks submitted at once, each
//! 10 turns of `run_bash("true")` against a zero-latency fake API. Prints total
//! time and tasks/s, daemon RSS idle and at peak (per in-flight task beyond idle),
//! and events lost (expected lines against lines written). Then a deep queue:
//! `BENCH_QUEUED` tasks (default 1000) queued behind one slot held by a slow model
//! request; prints the daemon's open descriptors (/proc/PID/fd) with none and with
//! all of them queued, and its peak RSS (VmHWM) once all have finished.
//!
//! Run: `cargo bench --bench daemon_load` (prints the figures; asserts nothing).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]
// A figure run reads top to bottom; the function-length limit is for the crate.
#![allow(clippy::too_many_lines)]

use harnessd_testkit::daemon::{http, serve, submit};
use harnessd_testkit::fake_api;
use harnessd_testkit::param;
use harnessd_testkit::root::{edit_file, init_root};

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use fake_api::{FakeApi, Reply};
use harnessd_testkit::rss::status_kib;
use serde_json::{Value, json};

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `queued` one-turn tasks behind one slot, held by a model request that takes a
/// minute until the task holding it is cancelled.
fn deep_queue(bin: &str, queued: usize) {
    let api = FakeApi::with_responder(Box::new(|body: &Value| {
        let mut reply = Reply::text("done");
        if body["messages"][0]["content"][0]["text"] == "hold" {
            reply.delay = Duration::from_secs(60);
        }
        reply
    }));
    let root = init_root(
        bin,
        "daemon-queue",
        &[
            ("https://api.anthropic.com", api.url.as_str()),
            ("max_concurrent_tasks = 4", "max_concurrent_tasks = 1"),
        ],
    );
    let mut child = serve(bin, &root);
    let (pid, socket) = (child.id(), root.join("run/harnessd.sock"));
    let held = submit(&socket, "hold");
    std::thread::sleep(Duration::from_millis(500));
    let idle_fds = fds(pid);
    let started = Instant::now();
    for i in 0..queued {
        submit(&socket, &format!("queued {i}"));
    }
    let accept = started.elapsed();
    let queued_fds = fds(pid);
    let queued_rss = status_kib(pid, "VmRSS:");
    http(&socket, "POST", &format!("/v1/tasks/{held}/cancel"), "").unwrap();
    loop {
        // Counted from the metrics: the list is paged at 500. The held task ends
        // too (cancelled).
        if finished(&metrics(&socket)) > queued {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(900));
        std::thread::sleep(Duration::from_millis(100));
    }
    let total = started.elapsed();
    let peak = status_kib(pid, "VmHWM:");
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    println!("daemon_load deep queue: {queued} one-turn tasks queued behind one slot");
    println!("  descriptors: {idle_fds} with none queued, {queued_fds} with {queued} queued");
    println!(
        "  RSS with {queued} queued {:.1} MiB; peak (VmHWM) {:.1} MiB once all finished",
        queued_rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    println!(
        "  accepted in {:.2} s, all finished in {:.2} s",
        accept.as_secs_f64(),
        total.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// `harnessd_tasks{status="finished"}` of a /metrics text.
fn finished(text: &str) -> usize {
    text.lines()
        .find_map(|l| l.strip_prefix("harnessd_tasks{status=\"finished\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn metrics(socket: &Path) -> String {
    let Ok(mut s) = UnixStream::connect(socket) else {
        return String::new();
    };
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
    );
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    raw
}

fn main() {
    // `BENCH_SLOTS` is `daemon.max_concurrent_tasks`.
    let (tasks, turns, slots) = (
        param("BENCH_TASKS", 100),
        param("BENCH_TURNS", 10),
        param("BENCH_SLOTS", 4),
    );
    let api = FakeApi::with_responder(Box::new(move |body: &Value| {
        let msgs = body["messages"].as_array().unwrap();
        let done = msgs.iter().filter(|m| m["role"] == "assistant").count();
        if done < turns {
            Reply::tool(
                &format!("toolu_{done}"),
                "run_bash",
                json!({"command": "true"}),
            )
        } else {
            Reply::text("done")
        }
    }));
    let bin = env!("CARGO_BIN_EXE_harnessd");
    let (max_turns, slots_line) = (
        format!("max_turns = {}", turns + 10),
        format!("max_concurrent_tasks = {slots}"),
    );
    let root = init_root(
        bin,
        "daemon",
        &[
            ("https://api.anthropic.com", api.url.as_str()),
            ("max_turns = 12", max_turns.as_str()),
            ("no_progress_repeats = 3", "no_progress_repeats = 100"),
            ("max_concurrent_tasks = 4", slots_line.as_str()),
        ],
    );
    edit_file(
        &root.join("policies/settings.json"),
        &[("\"run_bash(ls *)\"", "\"run_bash(true)\"")],
    );
    let mut child = serve(bin, &root);
    let socket = root.join("run/harnessd.sock");
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id();
    let idle = status_kib(pid, "VmRSS:");
    let started = Instant::now();
    let ids: Vec<String> = (0..tasks)
        .map(|i| {
            http(
                &socket,
                "POST",
                "/v1/tasks",
                &json!({"prompt": format!("task {i}")}).to_string(),
            )
            .unwrap()["task_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    loop {
        // One page holds them all (the list is paged, at most 500).
        let list = http(&socket, "GET", "/v1/tasks?status=finished&limit=500", "").unwrap();
        let finished = list["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["status"] == "finished")
            .count();
        if finished == tasks {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "stuck at {finished}/{tasks}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let total = started.elapsed();
    let peak = status_kib(pid, "VmHWM:");
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    let events = std::fs::read_to_string(root.join("transcripts/events.jsonl")).unwrap();
    let lines: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stopped_clean = ids.iter().all(|id| {
        lines.iter().any(|e| {
            e["type"] == "task_finished"
                && e["task_id"] == id.as_str()
                && e["stop_reason"] == "end_turn"
        })
    });
    // Per task: task_queued, task_started, (turns+1) × (model_request,
    // model_response), turns × (tool_requested, policy_decision, tool_finished),
    // task_finished.
    let per_task = 1 + 1 + 2 * (turns + 1) + 3 * turns + 1;
    let task_lines = lines.iter().filter(|e| e.get("task_id").is_some()).count();
    let in_flight = slots;
    println!(
        "daemon_load: {tasks} tasks × {turns} turns of run_bash(\"true\"), max_concurrent_tasks {in_flight}, zero-latency fake API"
    );
    println!(
        "  total {:.2} s, {:.1} tasks/s, {:.0} turns/s",
        total.as_secs_f64(),
        tasks as f64 / total.as_secs_f64(),
        (tasks * turns) as f64 / total.as_secs_f64()
    );
    println!(
        "  daemon RSS idle {:.1} MiB, peak {:.1} MiB (+{:.2} MiB per in-flight task)",
        idle as f64 / 1024.0,
        peak as f64 / 1024.0,
        (peak.saturating_sub(idle)) as f64 / 1024.0 / in_flight as f64
    );
    println!(
        "  events: {} task lines written, {} expected; lost {}; every task ended end_turn: {stopped_clean}",
        task_lines,
        tasks * per_task,
        (tasks * per_task).saturating_sub(task_lines)
    );
    if std::env::var("BENCH_KEEP").is_err() {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        println!("  kept {}", root.display());
    }
    deep_queue(bin, param("BENCH_QUEUED", 1000));
}
