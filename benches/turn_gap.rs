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
//!   framing and assembly, not the network);
//! - direct exec: rounds of the task with `run_bash("cat hello.txt")` (run without
//!   bash), `run_bash("cat hello.txt;")` (the same program through bash, which
//!   execs it) and `run_bash("echo hi")` (a builtin: bash), alternating, and the
//!   median of each one's median gap (`BENCH_DIRECT_ROUNDS`, default 5).
//!
//! `BENCH_INTEGRATIONS=N` instead runs N rounds of the same task three ways,
//! alternating — plain, with a trivial `pre_tool` hook on every call, and with
//! telemetry exported to a local sink — and prints the median of each way's
//! median gap, with the hook program's own run time for comparison.
//!
//! `BENCH_LATENCY_MS=N` makes the fake answer after N ms, as a model does.
//!
//! `BENCH_WRAP` runs harnessd under a profiler (`BENCH_WRAP="perf record -g -o
//! /tmp/p.data --"`).
//!
//! Run: `cargo bench --bench turn_gap` (prints the figures; asserts nothing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]
// A figure run reads top to bottom; the function-length limit is for the crate.
#![allow(clippy::too_many_lines)]

use harnessd_testkit::fake_api;
use harnessd_testkit::root::{edit_file, init_root};
use harnessd_testkit::rss;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_api::{FakeApi, Reply};
use serde_json::json;

/// What a run adds to the plain task.
#[derive(Clone, Copy, PartialEq)]
enum Extra {
    None,
    /// A `pre_tool` hook on every call: a program that answers without reading.
    Hook,
    /// Traces exported over OTLP/HTTP to a sink that answers 200 at once.
    Telemetry(u16),
}

fn setup(api_url: &str, turns: usize, stream: bool, extra: Extra) -> std::path::PathBuf {
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
        &[(
            "\"run_bash(ls *)\"",
            "\"run_bash(echo *)\", \"run_bash(cat *)\"",
        )],
    );
    std::fs::write(dir.join("workspace/hello.txt"), "hello\n").unwrap();
    match extra {
        Extra::None => {}
        Extra::Hook => add_hook(&dir.join("policies/settings.json")),
        Extra::Telemetry(port) => {
            let endpoint = format!("otlp_endpoint = \"http://127.0.0.1:{port}\"");
            edit_file(
                &dir.join("config/config.toml"),
                &[(
                    "# otlp_endpoint = \"http://127.0.0.1:4318\"",
                    endpoint.as_str(),
                )],
            );
        }
    }
    dir
}

/// The cheapest hook there is: `echo` prints the answer and never reads stdin.
const HOOK_ANSWER: &str = r#"{"decision":"continue"}"#;

fn add_hook(settings: &std::path::Path) {
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(settings).unwrap()).unwrap();
    value["hooks"] = json!({
        "pre_tool": [{"name": "noop", "command": ["/bin/echo", HOOK_ANSWER]}]
    });
    std::fs::write(settings, serde_json::to_string_pretty(&value).unwrap()).unwrap();
}

/// An OTLP/HTTP sink that reads each request and answers 200 with an empty body.
fn start_sink() -> u16 {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if stream.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if let Some(rounds) = std::env::var("BENCH_INTEGRATIONS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        integrations(rounds);
        return;
    }
    let streamed = run(true, Extra::None);
    let plain = run(false, Extra::None);
    println!(
        "turn_gap: streaming adds {:+.3} ms to the median gap ({:.3} ms streamed, {:.3} ms plain)",
        ms(streamed) - ms(plain),
        ms(streamed),
        ms(plain)
    );
    direct_exec();
}

/// Rounds of the streamed task with each command, alternating, so a loaded
/// machine slows every way alike; prints the median of each one's median gap.
fn direct_exec() {
    let rounds: usize = std::env::var("BENCH_DIRECT_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    // BENCH_DIRECT_ROUNDS=0 skips the rounds (a profile of the plain task alone).
    if rounds == 0 {
        return;
    }
    let ways = [
        ("cat hello.txt", "direct exec"),
        ("cat hello.txt;", "the same program through bash"),
        ("echo hi", "a builtin, through bash"),
    ];
    let mut medians: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    for _ in 0..rounds {
        for (i, (command, _)) in ways.iter().enumerate() {
            medians[i].push(run_task(true, Extra::None, command, false));
        }
    }
    println!("turn_gap direct exec: median of {rounds} medians, streamed");
    let figures: Vec<f64> = medians.iter_mut().map(|m| ms(median(m))).collect();
    for ((command, what), figure) in ways.iter().zip(&figures) {
        println!("  run_bash({command:?}) ({what}): {figure:.3} ms");
    }
    println!(
        "  direct exec saves {:.3} ms a call against bash exec'ing the same program",
        figures[1] - figures[0]
    );
}

/// Rounds of plain / hook / telemetry, alternating; prints what each adds.
fn integrations(rounds: usize) {
    let port = start_sink();
    let ways = [Extra::None, Extra::Hook, Extra::Telemetry(port)];
    let mut medians: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    for _ in 0..rounds {
        for (i, way) in ways.iter().enumerate() {
            medians[i].push(run(true, *way));
        }
    }
    let mut echo: Vec<Duration> = (0..200)
        .map(|_| {
            let started = Instant::now();
            let status = Command::new("/bin/echo")
                .arg(HOOK_ANSWER)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
            started.elapsed()
        })
        .collect();
    let off = ms(median(&mut medians[0]));
    let hook = ms(median(&mut medians[1]));
    let telemetry = ms(median(&mut medians[2]));
    println!("turn_gap integrations: median of {rounds} medians, streamed");
    println!(
        "  off {off:.3} ms; pre_tool hook {hook:.3} ms ({:+.3} ms); telemetry {telemetry:.3} ms ({:+.3} ms)",
        hook - off,
        telemetry - off
    );
    println!(
        "  the hook program alone (/bin/echo, unconfined fork+exec+wait): median {:.3} ms",
        ms(median(&mut echo))
    );
}

/// One task of `run_bash("echo hi")`, streamed or not; prints its figures and
/// returns its median gap.
fn run(stream: bool, extra: Extra) -> Duration {
    run_task(stream, extra, "echo hi", true)
}

/// One task whose every turn runs `command`; returns its median gap, and prints
/// its figures when `verbose`.
fn run_task(stream: bool, extra: Extra, command: &str, verbose: bool) -> Duration {
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
                Reply::tool(&id, "run_bash", json!({"command": command}))
            }
        })
        .collect();
    script.push(Reply::text("done"));
    // BENCH_LATENCY_MS=N makes the fake wait N ms before each answer, as a real
    // model does; the gap still runs from the answer to the next request, so what
    // changes is what the wait hides (the save after the calls, written meanwhile).
    let latency = std::env::var("BENCH_LATENCY_MS")
        .ok()
        .and_then(|n| n.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    for reply in &mut script {
        reply.delay = latency;
    }
    let api = FakeApi::start(script);
    // The whole stream in one write: what is measured is harnessd's side.
    api.stream_chunks_of(0);
    let root = setup(&api.url, turns, stream, extra);
    let started = Instant::now();
    // BENCH_WRAP runs harnessd under a profiler, e.g. `perf record -g -o FILE --`.
    let wrap = std::env::var("BENCH_WRAP").unwrap_or_default();
    let mut words = wrap
        .split_whitespace()
        .map(str::to_string)
        .collect::<Vec<_>>();
    words.push(env!("CARGO_BIN_EXE_harnessd").to_string());
    let child = Command::new(&words[0])
        .args(&words[1..])
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
    let _ = std::fs::remove_dir_all(&root);
    if !verbose {
        return med;
    }
    let tool = if in_process {
        "get_time()".to_string()
    } else {
        format!("run_bash({command:?})")
    };
    let mode = label(stream, extra);
    let fake = if latency.is_zero() {
        "a zero-latency fake API".to_string()
    } else {
        format!("a fake API answering after {} ms", latency.as_millis())
    };
    println!("turn_gap: {turns} turns of {tool} against {fake}, {mode}");
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
    med
}

fn label(stream: bool, extra: Extra) -> &'static str {
    match (stream, extra) {
        (true, Extra::None) => "streamed",
        (false, _) => "not streamed",
        (true, Extra::Hook) => "streamed, with a pre_tool hook",
        (true, Extra::Telemetry(_)) => "streamed, with telemetry",
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
