//! The comparison rig, small: harnessd against the barest agent loop there is
//! (benches/compare/reference_loop.py: the Anthropic SDK, `bash -c` per call, no
//! sandbox, no record), alternating in one run against the same zero-latency fake
//! Messages API, so the machine at hand is the same for both.
//!
//! Each round runs a task of N turns of `run_bash("echo hi")` with each of the two,
//! for N in 30 and 100; a task's figure is its median gap between a response
//! leaving the fake and the next request arriving. Printed: the median of each
//! one's medians, and harnessd's as a ratio of the reference loop's. harnessd runs
//! as shipped (every sandbox layer, streaming, `audit.sync = "before_action"`).
//!
//! Needs the reference loop's venv: `bash benches/compare/install.sh` (PyPI's
//! `anthropic` in /opt/harnessd-test/compare, or `HARNESSD_BENCH_COMPARE`).
//! Run: `cargo bench --bench compare` (`BENCH_COMPARE_ROUNDS`, default 5; prints
//! the figures; asserts nothing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use harnessd_testkit::fake_api::{FakeApi, Reply};
use harnessd_testkit::root::{edit_file, init_root};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

/// Who runs the task.
#[derive(Clone, Copy)]
enum Loop {
    Harnessd,
    Reference,
}

fn python() -> PathBuf {
    let dir =
        std::env::var("HARNESSD_BENCH_COMPARE").unwrap_or("/opt/harnessd-test/compare".into());
    let python = Path::new(&dir).join("venv/bin/python3");
    assert!(
        python.exists(),
        "{} is missing: run benches/compare/install.sh",
        python.display()
    );
    python
}

/// A root as `harnessd init` writes it, pointed at the fake, with room for the
/// task's turns and `echo` allowed.
fn harnessd_root(api_url: &str, turns: usize) -> PathBuf {
    // One more than the calls and the answer: the answer must not be a summary turn.
    let max_turns = format!("max_turns = {}", turns + 2);
    let root = init_root(
        env!("CARGO_BIN_EXE_harnessd"),
        "compare",
        &[
            ("https://api.anthropic.com", api_url),
            ("max_turns = 12", max_turns.as_str()),
            ("no_progress_repeats = 3", "no_progress_repeats = 1000"),
            ("token_budget = 200000", "token_budget = 100000000"),
        ],
    );
    edit_file(
        &root.join("policies/settings.json"),
        &[("\"run_bash(ls *)\"", "\"run_bash(echo *)\"")],
    );
    root
}

/// One task of `turns` calls of `run_bash("echo hi")` run by `who`; its median gap.
fn one_task(who: Loop, turns: usize, python: &Path) -> Duration {
    let mut script: Vec<Reply> = (0..turns)
        .map(|i| {
            Reply::tool(
                &format!("toolu_{i:03}"),
                "run_bash",
                json!({"command": "echo hi"}),
            )
        })
        .collect();
    script.push(Reply::text("done"));
    let api = FakeApi::start(script);
    api.stream_chunks_of(0);
    let prompt = "say hi, many times";
    let (status, dir) = match who {
        Loop::Harnessd => {
            let root = harnessd_root(&api.url, turns);
            let status = Command::new(env!("CARGO_BIN_EXE_harnessd"))
                .arg("--root")
                .arg(&root)
                .args(["run", prompt])
                .env("ANTHROPIC_API_KEY", "bench-key")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .output()
                .unwrap();
            (status, root)
        }
        Loop::Reference => {
            let dir =
                std::env::temp_dir().join(format!("harnessd-bench-ref-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/benches/compare/reference_loop.py"
            );
            let status = Command::new(python)
                .arg(script)
                .arg(&api.url)
                .arg(prompt)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .output()
                .unwrap();
            (status, dir)
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let requests = api.requests();
    let replied = api.replied_at();
    assert!(
        status.status.success(),
        "exit status {:?}: {}",
        status.status,
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(requests.len(), turns + 1);
    let mut gaps: Vec<Duration> = (0..turns)
        .map(|i| requests[i + 1].received_at - replied[i])
        .collect();
    median(&mut gaps)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let python = python();
    let rounds: usize = std::env::var("BENCH_COMPARE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5);
    println!(
        "compare: run_bash(\"echo hi\") per turn, zero-latency fake, median of {rounds} medians"
    );
    for turns in [30, 100] {
        let mut ours = Vec::new();
        let mut reference = Vec::new();
        for _ in 0..rounds {
            ours.push(one_task(Loop::Harnessd, turns, &python));
            reference.push(one_task(Loop::Reference, turns, &python));
        }
        let ours = ms(median(&mut ours));
        let reference = ms(median(&mut reference));
        println!(
            "  {turns} turns: harnessd {ours:.2} ms, reference loop {reference:.2} ms: {:.2}x",
            ours / reference
        );
    }
}
