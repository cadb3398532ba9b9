//! Benchmark of the daemon (figures of docs/benchmarks.md): 100 tasks submitted at once, each
//! 10 turns of `run_bash("true")` against a zero-latency fake API. Prints total
//! time and tasks/s, daemon RSS idle and at peak (per in-flight task beyond idle),
//! and events lost (expected lines against lines written). Then a deep queue:
//! `BENCH_QUEUED` tasks (default 1000) queued behind one slot held by a slow model
//! request; prints the daemon's open descriptors (/proc/PID/fd) with none and with
//! all of them queued, and its peak RSS (VmHWM) once all have finished.
//!
//! Last, the model's latency: for 1, 8 and 64 slots (`BENCH_LOAD_SLOTS`), twice as
//! many tasks as slots, each 10 turns of `run_bash("true")`, against a fake API
//! that answers after 200 ms (`BENCH_LATENCY_MS`); prints turns/s against the
//! ceiling min(slots ÷ latency, the fake's own rate with as many clients), the
//! disk's fdatasync rate, and CPU per turn (the daemon's own, and its spawn
//! servers' with the tool processes they reaped).
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

/// Clock ticks per second of /proc/PID/stat's CPU fields.
fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// utime + stime (+ cutime + cstime when `children`) of `pid`, in seconds.
fn cpu_secs(pid: u32, children: bool) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0.0;
    };
    // Fields from the state (3rd) on: utime is the 14th field, so index 11 here.
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let mut ticks = f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0);
    if children {
        ticks += f.get(13).copied().unwrap_or(0.0) + f.get(14).copied().unwrap_or(0.0);
    }
    ticks / ticks_per_sec()
}

/// Pids of `parent`'s children running `harnessd __spawn-server`.
fn spawn_servers(parent: u32) -> Vec<u32> {
    let text = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default();
    let mut all: Vec<u32> = text
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    // Children of the daemon's other threads (the spawner thread starts them).
    for t in std::fs::read_dir(format!("/proc/{parent}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let c = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        all.extend(c.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    all.sort_unstable();
    all.dedup();
    all.into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.ends_with(b"__spawn-server\0"))
        })
        .collect()
}

/// fdatasync calls per second of one appending writer in `dir`, over a second.
fn fsync_rate(dir: &Path) -> f64 {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).unwrap();
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < Duration::from_secs(1) {
        f.write_all(&[b'x'; 300]).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let _ = std::fs::remove_file(&path);
    f64::from(n) / start.elapsed().as_secs_f64()
}

/// Requests per second the fake answers with `clients` clients, each sending
/// one-message requests in turn, `per_client` each.
fn fake_rate(url: &str, clients: usize, per_client: usize) -> f64 {
    let addr = url.trim_start_matches("http://").to_string();
    let body =
        json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]})
            .to_string();
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| {
                for _ in 0..per_client {
                    let mut c = std::net::TcpStream::connect(&addr).unwrap();
                    write!(
                        c,
                        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .unwrap();
                    read_response(&mut c);
                }
            });
        }
    });
    (clients * per_client) as f64 / start.elapsed().as_secs_f64()
}

/// Reads one HTTP response (headers, then `content-length` bytes of body): the
/// fake keeps a connection open whatever the request says.
fn read_response(c: &mut std::net::TcpStream) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = c.read_exact(&mut body);
}

/// One run of `2 × slots` tasks of `turns` turns against a fake that answers
/// after `latency`; prints the figures.
fn latency_load(bin: &str, slots: usize, latency: Duration, turns: usize) {
    let api = FakeApi::with_responder(Box::new(move |body: &Value| {
        let done = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        // The ceiling's probe sends no tools: it is answered with text.
        let mut reply = if body.get("tools").is_some() && done < turns {
            Reply::tool(
                &format!("toolu_{done}"),
                "run_bash",
                json!({"command": "true"}),
            )
        } else {
            Reply::text("done")
        };
        reply.delay = latency;
        reply
    }));
    let ceiling_fake = fake_rate(&api.url, slots, 3);
    let (max_turns, slots_line) = (
        format!("max_turns = {}", turns + 10),
        format!("max_concurrent_tasks = {slots}"),
    );
    let root = init_root(
        bin,
        &format!("daemon-latency-{slots}"),
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
    let syncs = fsync_rate(&root.join("transcripts"));
    let mut child = serve(bin, &root);
    let socket = root.join("run/harnessd.sock");
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id();
    let tasks = 2 * slots;
    let cpu_before = cpu_secs(pid, false);
    let started = Instant::now();
    for i in 0..tasks {
        submit(&socket, &format!("task {i}"));
    }
    loop {
        let list = http(&socket, "GET", "/v1/tasks?status=finished&limit=500", "").unwrap();
        let finished = list["tasks"].as_array().map_or(0, |t| t.len());
        if finished >= tasks {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "stuck at {finished}/{tasks}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let total = started.elapsed();
    let daemon_cpu = cpu_secs(pid, false) - cpu_before;
    let server_cpu: f64 = spawn_servers(pid).iter().map(|p| cpu_secs(*p, true)).sum();
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    // Each turn is one model request; a task has turns + 1 of them.
    let requests = tasks * (turns + 1);
    let rate = requests as f64 / total.as_secs_f64();
    let ideal = slots as f64 / latency.as_secs_f64();
    let ceiling = ideal.min(ceiling_fake);
    println!(
        "  {slots:>2} slots: {rate:>6.1} turns/s of a ceiling {ceiling:.1} ({:.0} %; slots ÷ latency {ideal:.1}, the fake alone {ceiling_fake:.1}); fdatasync {syncs:.0}/s; CPU per turn: daemon {:.2} ms, spawn servers and tools {:.2} ms",
        100.0 * rate / ceiling,
        1000.0 * daemon_cpu / requests as f64,
        1000.0 * server_cpu / requests as f64,
    );
    if std::env::var("BENCH_KEEP").is_err() {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        println!("  kept {}", root.display());
    }
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
    let latency = Duration::from_millis(param("BENCH_LATENCY_MS", 200) as u64);
    let slots_list = std::env::var("BENCH_LOAD_SLOTS").unwrap_or_else(|_| "1,8,64".into());
    println!(
        "daemon_load under latency: 2 × slots tasks × 10 turns of run_bash(\"true\"), the fake answering after {} ms",
        latency.as_millis()
    );
    for slots in slots_list.split(',').filter_map(|s| s.trim().parse().ok()) {
        latency_load(bin, slots, latency, 10);
    }
}
