//! Benchmark of the sandbox (figures of docs/benchmarks.md):
//!
//! - median spawn-to-exit of `true` through the full sandbox (every layer, the
//!   call's cgroup, exec), under the write and the read-only profile, by a spawn
//!   server's child and by a helper exec'd for the call alone, against an
//!   unconfined fork+exec in the same run, and against `bwrap` doing comparable
//!   confinement when bubblewrap is installed;
//! - peak RSS of `harnessd run` during an endless-output attack (`yes`) against a
//!   task with no tool.
//!
//! `BENCH_SPAWN_PROFILE=N` makes only N calls through the spawn server (for a
//! profiler; `BENCH_SPAWN_RO=1`: the read-only profile) and prints nothing.
//!
//! Run: `cargo bench --bench sandbox_spawn` (prints the figures; asserts nothing).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]
// A figure run reads top to bottom; the function-length limit is for the crate.
#![allow(clippy::too_many_lines)]

use harnessd_testkit::fake_api;
use harnessd_testkit::rss;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harnessd::config::Settings;
use harnessd::exec::{Ending, ExecRequest, Executor, prepare_workspace};
use harnessd::sandbox::{Confinement, Job};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn time_runs(mut one: impl FnMut()) -> Duration {
    for _ in 0..10 {
        one();
    }
    median(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                one();
                t.elapsed()
            })
            .collect(),
    )
}

fn init_root(tag: &str) -> PathBuf {
    harnessd_testkit::root::init_root(env!("CARGO_BIN_EXE_harnessd"), tag, &[])
}

fn spawn_figures() {
    let root = init_root("spawn");
    let settings = Settings::parse(&harnessd::config::default_settings(), "settings.json")
        .unwrap()
        .settings;
    let workspace = root.join("workspace");
    // As the daemon does: "auto" becomes this root's own uid, kept in the root.
    let tool_user =
        harnessd::config::resolve_tool_user(&root.canonicalize().unwrap(), &settings.sandbox.user)
            .unwrap();
    prepare_workspace(&workspace, &tool_user.user).unwrap();
    let confine = Confinement::from_settings(
        &settings,
        &root,
        &tool_user.user,
        harnessd::sandbox::Profile::Write,
    );
    let served = Executor::new(PathBuf::from(env!("CARGO_BIN_EXE_harnessd")));
    let one_off =
        Executor::new(PathBuf::from(env!("CARGO_BIN_EXE_harnessd"))).without_spawn_servers();
    let never = CancellationToken::new();
    let job = Job::Exec {
        argv: vec!["true".into()],
    };
    // The read-only profile (a pattern-allowed call): its own mount namespace and
    // a tmpfs on /tmp besides every layer above.
    let read_only = Confinement {
        profile: harnessd::sandbox::Profile::ReadOnly,
        ..confine.clone()
    };
    let measure = |executor: &Executor, confine: &Confinement| {
        time_runs(|| {
            let o = executor.run(&ExecRequest {
                job: &job,
                workspace: &workspace,
                confine,
                timeout: Duration::from_secs(10),
                spool_prefix: None,
                spool_budget: harnessd::exec::SpoolBudget::unlimited(),
                keep_bytes: 4096,
                cancel: &never,
                relay_output: false,
            });
            assert_eq!(o.ending, Ending::Exited(0), "{}", o.stderr.text());
        })
    };
    // BENCH_SPAWN_PROFILE=N: only N calls through the spawn server, for a
    // profiler (`perf record -a -g -- …`), and no figures.
    if let Some(n) = std::env::var("BENCH_SPAWN_PROFILE")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        let ro = std::env::var("BENCH_SPAWN_RO").is_ok();
        for _ in 0..n / RUNS {
            measure(&served, if ro { &read_only } else { &confine });
        }
        return;
    }
    let sandboxed = measure(&served, &confine);
    let sandboxed_ro = measure(&served, &read_only);
    let helper = measure(&one_off, &confine);
    let helper_ro = measure(&one_off, &read_only);
    let bare = time_runs(|| {
        let s = Command::new("/bin/true")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(s.success());
    });
    println!("sandbox_spawn: `true`, median of {RUNS} runs");
    println!("  unconfined fork+exec:        {:.2} ms", ms(bare));
    println!(
        "  full sandbox (spawn server): {:.2} ms  (+{:.2} ms)",
        ms(sandboxed),
        ms(sandboxed.saturating_sub(bare))
    );
    println!(
        "  read-only profile:           {:.2} ms  (+{:.2} ms over the write profile)",
        ms(sandboxed_ro),
        ms(sandboxed_ro.saturating_sub(sandboxed))
    );
    println!(
        "  a helper per call:           {:.2} ms  (+{:.2} ms); read-only {:.2} ms",
        ms(helper),
        ms(helper.saturating_sub(bare)),
        ms(helper_ro)
    );
    if Path::new("/usr/bin/bwrap").exists() {
        let mut args: Vec<String> = Vec::new();
        for p in ["/usr", "/bin", "/lib", "/lib64", "/etc/ld.so.cache"] {
            if Path::new(p).exists() {
                args.extend(["--ro-bind".into(), p.into(), p.into()]);
            }
        }
        args.extend([
            "--bind".into(),
            workspace.display().to_string(),
            workspace.display().to_string(),
        ]);
        args.extend([
            "--dev".into(),
            "/dev".into(),
            "--unshare-all".into(),
            "--die-with-parent".into(),
            "--new-session".into(),
            "--chdir".into(),
            workspace.display().to_string(),
            "true".into(),
        ]);
        let bwrap = time_runs(|| {
            let s = Command::new("/usr/bin/bwrap")
                .args(&args)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(s.success());
        });
        println!(
            "  bwrap (ro binds, unshare-all): {:.2} ms  (harnessd is {:.1}x faster)",
            ms(bwrap),
            bwrap.as_secs_f64() / sandboxed.as_secs_f64()
        );
    } else {
        println!("  bwrap: not installed (apt-get install bubblewrap to compare)");
    }
    let _ = std::fs::remove_dir_all(&root);
}

fn run_peak_rss(script: Vec<fake_api::Reply>, tag: &str) -> f64 {
    let api = fake_api::FakeApi::start(script);
    let root = init_root(tag);
    let config = root.join("config/config.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("https://api.anthropic.com", &api.url);
    std::fs::write(&config, text).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_harnessd"))
        .arg("--root")
        .arg(&root)
        .args(["run", "--yes", "x"])
        .env("ANTHROPIC_API_KEY", "bench-key")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (status, peak) = rss::wait_measuring_rss(child);
    assert!(status.success());
    let _ = std::fs::remove_dir_all(&root);
    peak as f64 / 1024.0
}

fn flood_figures() {
    let idle = run_peak_rss(vec![fake_api::Reply::text("hi")], "idle");
    let flood = run_peak_rss(
        vec![
            fake_api::Reply::tool("y", "run_bash", json!({"command": "yes"})),
            fake_api::Reply::text("done"),
        ],
        "flood",
    );
    println!("endless output (`yes`, cut at 64 MiB, tree killed):");
    println!(
        "  peak RSS of harnessd run: no tool {idle:.1} MiB, with the flood {flood:.1} MiB (+{:.1} MiB)",
        flood - idle
    );
}

fn main() {
    spawn_figures();
    flood_figures();
}
