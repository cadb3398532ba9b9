//! Benchmark of the policy engine (figures of docs/benchmarks.md):
//!
//! - decision time with a 200-rule settings file, over a mix of calls (compound
//!   shell commands, file paths, whole-tool rules), median per call;
//! - reload latency: from `rename(2)` of a new settings.json over the old one to the
//!   new policy deciding, through the real watcher, debounce and validation.
//!
//! Run: `cargo bench --bench policy` (prints the figures; asserts nothing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use harnessd::config::{ConfigSource, LiveConfig, Settings};
use harnessd::events::EventLog;
use harnessd::policy::{Subject, decide};
use harnessd::tools::ToolName;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn settings_with_rules(n: usize) -> String {
    let mut allow = Vec::new();
    let mut ask = Vec::new();
    let mut deny = Vec::new();
    for i in 0..n {
        let rule = match i % 4 {
            0 => format!("run_bash(tool{i} *)"),
            1 => format!("read_file(workspace/data{i}/*)"),
            2 => format!("run_bash(git sub{i}*)"),
            _ => format!("write_file(workspace/out{i}/*.txt)"),
        };
        match i % 3 {
            0 => allow.push(rule),
            1 => ask.push(rule),
            _ => deny.push(rule),
        }
    }
    json!({"tools": {"default": "ask", "allow": allow, "ask": ask, "deny": deny}}).to_string()
}

fn decision_figure() {
    let policy = Settings::parse(&settings_with_rules(200), "settings.json").unwrap();
    let calls: Vec<(ToolName, &str)> = vec![
        (ToolName::RunBash, "ls -la"),
        (
            ToolName::RunBash,
            "git status && cargo test 2>&1 | tail -n 20",
        ),
        (
            ToolName::RunBash,
            "tool197 --flag x; echo $(date) > out.txt",
        ),
        (ToolName::ReadFile, "workspace/data13/report.csv"),
        (ToolName::WriteFile, "workspace/out3/a.txt"),
        (ToolName::ListDir, "workspace"),
    ];
    let rounds = 2000;
    let mut per_call = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for (tool, arg) in &calls {
            std::hint::black_box(decide(
                &policy,
                Subject {
                    tool: *tool,
                    arg: Some(arg),
                },
            ));
        }
        per_call.push(t.elapsed() / calls.len() as u32);
    }
    let m = median(per_call);
    println!(
        "policy decision, 200 rules, mixed calls: median {:.2} µs per call",
        m.as_secs_f64() * 1e6
    );
}

async fn reload_figure() {
    let dir = harnessd_testkit::root::init_root(env!("CARGO_BIN_EXE_harnessd"), "reload", &[]);
    let loaded = Arc::new(harnessd::config::load(&dir).unwrap());
    let live = Arc::new(LiveConfig::new(loaded.clone()));
    let (events, _) = EventLog::open(&loaded.paths.events, None).unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(harnessd::reload::run_reloader(
        live.clone(),
        events,
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let settings = dir.join("policies/settings.json");
    let mut latencies = Vec::new();
    for i in 0..30 {
        let text = std::fs::read_to_string(&settings).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["output"]["max_chars"] = json!(5000 + i);
        let tmp = dir.join("policies/.settings.json.new");
        std::fs::write(&tmp, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        let before = live.current().settings_sha256.clone();
        let t = Instant::now();
        std::fs::rename(&tmp, &settings).unwrap();
        while live.current().settings_sha256 == before {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "reload never happened"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        latencies.push(t.elapsed());
        assert_eq!(
            live.current().policy.settings.output.max_chars,
            5000 + i as usize
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    let _ = task.await;
    let mut sorted = latencies.clone();
    sorted.sort();
    println!(
        "reload latency, rename → new policy deciding (debounce {} ms): median {:.1} ms, min {:.1}, max {:.1} ({} renames)",
        harnessd::reload::DEBOUNCE.as_millis(),
        median(latencies).as_secs_f64() * 1000.0,
        sorted[0].as_secs_f64() * 1000.0,
        sorted.last().unwrap().as_secs_f64() * 1000.0,
        sorted.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    decision_figure();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(reload_figure());
}
