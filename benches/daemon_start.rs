//! Benchmark of the daemon's start with many old tasks (figures of docs/benchmarks.md): a root
//! holding 20 000 finished transcripts (2–5 KB each, `end_turn`, with an answer),
//! then, three times, `harnessd serve` from spawn to the first `GET /healthz` that
//! answers, its RSS 1 s after that (VmRSS) and its peak (VmHWM), and the latency of
//! `GET /v1/tasks?limit=50`. Prints the medians; asserts nothing.
//!
//! Run: `cargo bench --bench daemon_start` (`BENCH_TASKS=N` changes the count;
//! `BENCH_KEEP=1` keeps the root).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "common/old_tasks.rs"]
mod old_tasks;

use harnessd::agent::Transcript;
use old_tasks::transcript;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harnessd_testkit::root::init_root;
use harnessd_testkit::rss::status_kib;

const RUNS: usize = 3;

/// One raw HTTP/1.1 request over the socket: the status code and the body.
fn http(socket: &Path, path: &str) -> Option<(u16, String)> {
    let mut s = UnixStream::connect(socket).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

struct Run {
    ready: Duration,
    idle_kib: u64,
    peak_kib: u64,
    list: Duration,
    listed: usize,
}

/// One start of `serve` on `root`: the figures, then SIGTERM.
fn run_once(bin: &str, root: &Path) -> Run {
    let socket = root.join("run/harnessd.sock");
    let log = std::fs::File::create(root.join("daemon.log")).unwrap();
    let spawned = Instant::now();
    let mut child = Command::new(bin)
        .arg("--root")
        .arg(root)
        .arg("serve")
        .env("ANTHROPIC_API_KEY", "bench-key")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    while !matches!(http(&socket, "/healthz"), Some((200, _))) {
        if spawned.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!(
                "the daemon did not come up: {}",
                std::fs::read_to_string(root.join("daemon.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let ready = spawned.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let pid = child.id();
    let idle_kib = status_kib(pid, "VmRSS:");
    let peak_kib = status_kib(pid, "VmHWM:");
    let asked = Instant::now();
    let (status, body) = http(&socket, "/v1/tasks?limit=50").unwrap();
    let list = asked.elapsed();
    let listed = if status == 200 {
        serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["tasks"].as_array().map(Vec::len))
            .unwrap_or(0)
    } else {
        0
    };
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    Run {
        ready,
        idle_kib,
        peak_kib,
        list,
        listed,
    }
}

fn median<T: Copy + Ord>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let tasks: usize = std::env::var("BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let bin = env!("CARGO_BIN_EXE_harnessd");
    // No request is made at idle: any loopback URL will do.
    let root = init_root(
        bin,
        "start",
        &[("https://api.anthropic.com", "http://127.0.0.1:9")],
    );
    let dir = root.join("transcripts");
    let written = Instant::now();
    let mut bytes = 0u64;
    let (mut smallest, mut largest) = (u64::MAX, 0u64);
    for i in 0..tasks {
        let t = transcript(i);
        t.save(&dir).unwrap();
        let len = std::fs::metadata(Transcript::path(&dir, &t.task_id))
            .unwrap()
            .len();
        bytes += len;
        smallest = smallest.min(len);
        largest = largest.max(len);
    }
    println!(
        "daemon_start: {tasks} finished transcripts, {:.1} MiB ({}–{largest} B each, written in {:.1} s); {RUNS} starts, page cache warm",
        bytes as f64 / 1024.0 / 1024.0,
        smallest.min(largest),
        written.elapsed().as_secs_f64()
    );
    let runs: Vec<Run> = (0..RUNS).map(|_| run_once(bin, &root)).collect();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mib = |k: u64| k as f64 / 1024.0;
    println!("  run | spawn → /healthz | RSS 1 s after | peak (VmHWM) | GET /v1/tasks?limit=50");
    for (n, r) in runs.iter().enumerate() {
        println!(
            "  {:>3} | {:>11.1} ms | {:>8.1} MiB | {:>8.1} MiB | {:>6.2} ms ({} tasks)",
            n + 1,
            ms(r.ready),
            mib(r.idle_kib),
            mib(r.peak_kib),
            ms(r.list),
            r.listed
        );
    }
    let ready = median(runs.iter().map(|r| r.ready).collect());
    let idle = median(runs.iter().map(|r| r.idle_kib).collect());
    let peak = median(runs.iter().map(|r| r.peak_kib).collect());
    let list = median(runs.iter().map(|r| r.list).collect());
    println!(
        "  median: start {:.1} ms (target ≤ 200 ms), idle RSS {:.1} MiB = {:.1} MB (target ≤ 20 MB), peak {:.1} MiB = {:.1} MB, list {:.2} ms",
        ms(ready),
        mib(idle),
        idle as f64 * 1024.0 / 1e6,
        mib(peak),
        peak as f64 * 1024.0 / 1e6,
        ms(list)
    );
    if std::env::var("BENCH_KEEP").is_err() {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        println!("  kept {}", root.display());
    }
}
