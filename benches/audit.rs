//! Benchmark of the audit log (figures of docs/benchmarks.md):
//!
//! 1. the hash chain's cost per event: `EventLog::record` per line (sync off),
//!    and the SHA-256 of one typical line, which is what the chain adds;
//! 2. `harnessd audit verify` on a `BENCH_LOG_MB` (default 1024) log in rotated
//!    files: MB/s and peak RSS;
//! 3. `harnessd events --task X` on that log, without a daemon and through one:
//!    wall time and peak RSS of the client and of the daemon.
//!
//! The log is written here with a valid chain (lines of about 1 KiB, a thousand
//! tasks interleaved), in files of `BENCH_FILE_MB` (default 256) named as
//! rotation names them. Run: `cargo bench --bench audit` (prints the figures;
//! asserts only that the commands succeed and find the task's lines).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use harnessd::events::{Event, EventLog, GENESIS};
use harnessd_testkit::param;
use harnessd_testkit::root::init_root;
use harnessd_testkit::rss::wait_measuring_rss;
use serde_json::json;
use sha2::Digest;

fn hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Per-event cost of `record` and of one line's SHA-256.
fn chain_cost() {
    let dir = std::env::temp_dir().join(format!("harnessd-bench-chain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let n = 20_000u32;
    let (log, _) = EventLog::open(&dir.join("events.jsonl"), None).unwrap();
    log.set_sync(harnessd::config::AuditSync::Off);
    let event = || Event::ModelRequest {
        turn: 3,
        messages: 7,
        tools_disabled: false,
    };
    let start = Instant::now();
    rt.block_on(async {
        for _ in 0..n {
            log.record(Some("t-20261130T120000Z-abcdef"), event())
                .await
                .unwrap();
        }
    });
    let per_event = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    let line = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let line = line.lines().last().unwrap().to_string();
    let start = Instant::now();
    let mut sink = 0u8;
    for _ in 0..n {
        sink ^= sha2::Sha256::digest(line.as_bytes())[0];
    }
    let per_hash = start.elapsed().as_secs_f64() * 1e6 / f64::from(n);
    println!(
        "chain: record {per_event:.2} µs/event (sync off, chain included); SHA-256 of a {}-byte line {per_hash:.2} µs (the chain's own cost) [{sink}]",
        line.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes a chained log of about `total_mb` in files of `file_mb`; returns the
/// task to query and its number of lines.
fn write_log(dir: &Path, total_mb: u64, file_mb: u64) -> (String, u64) {
    let pad = "p".repeat(850);
    let (mut seq, mut prev, mut written) = (0u64, GENESIS.to_string(), 0u64);
    let target = "t-20261130T120000Z-000007".to_string();
    let mut target_lines = 0;
    while written < total_mb << 20 {
        let first = seq + 1;
        let tmp = dir.join("events.tmp");
        let mut out = BufWriter::new(std::fs::File::create(&tmp).unwrap());
        let mut in_file = 0u64;
        while in_file < file_mb << 20 && written + in_file < total_mb << 20 {
            seq += 1;
            let task = format!("t-20261130T120000Z-{:06}", seq % 1000);
            target_lines += u64::from(task == target);
            let line = json!({"seq": seq, "ts": "2026-11-30T12:00:00.000Z", "prev": prev,
                "type": "model_request", "task_id": task, "turn": 1, "messages": 1,
                "tools_disabled": false, "pad": pad})
            .to_string();
            prev = hex(line.as_bytes());
            out.write_all(line.as_bytes()).unwrap();
            out.write_all(b"\n").unwrap();
            in_file += line.len() as u64 + 1;
        }
        out.flush().unwrap();
        written += in_file;
        let name = if written >= total_mb << 20 {
            "events.jsonl".to_string()
        } else {
            format!("events-{first}-{seq}.jsonl")
        };
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
    (target, target_lines)
}

/// Runs `harnessd ARGS` on `root`; wall time, peak RSS (KiB) and stdout lines.
fn timed(root: &Path, args: &[&str]) -> (f64, u64, u64) {
    let bin = env!("CARGO_BIN_EXE_harnessd");
    let out_file = root.join("bench.out");
    let child = Command::new(bin)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let (status, peak) = wait_measuring_rss(child);
    let secs = start.elapsed().as_secs_f64();
    assert!(status.success(), "{args:?}: {status}");
    let lines = std::fs::read_to_string(&out_file).unwrap().lines().count() as u64;
    (secs, peak, lines)
}

fn hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    chain_cost();
    let (total_mb, file_mb) = (param("BENCH_LOG_MB", 1024), param("BENCH_FILE_MB", 256));
    let bin = env!("CARGO_BIN_EXE_harnessd");
    let root = init_root(bin, "audit", &[]);
    let dir = root.join("transcripts");
    std::fs::create_dir_all(&dir).unwrap();
    let (task, task_lines) = write_log(&dir, total_mb, file_mb);
    let (secs, peak, _) = timed(&root, &["audit", "verify"]);
    println!(
        "audit verify: {total_mb} MB in {secs:.2} s = {:.0} MB/s, peak RSS {} KiB",
        total_mb as f64 / secs,
        peak
    );
    let (secs, peak, lines) = timed(&root, &["events", "--json", "--task", &task]);
    assert_eq!(lines, task_lines);
    println!(
        "events --task X (no daemon): {lines} lines of {total_mb} MB in {secs:.2} s, client peak RSS {peak} KiB"
    );
    let mut daemon = harnessd_testkit::daemon::serve(bin, &root);
    let before = hwm_kib(daemon.id());
    let (secs, peak, lines) = timed(&root, &["events", "--json", "--task", &task]);
    let after = hwm_kib(daemon.id());
    assert_eq!(lines, task_lines);
    println!(
        "events --task X (through the daemon): {lines} lines in {secs:.2} s, client peak RSS {peak} KiB, daemon peak RSS {before} KiB before, {after} KiB after"
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_dir_all(&root);
}
