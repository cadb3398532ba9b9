//! Benchmark of MCP servers through the sandbox (figures of docs/benchmarks.md):
//!
//! - first call: start + handshake + one `tools/call`, median of runs;
//! - warm call: one `tools/call` on a running server, median;
//! - memory: RSS of the running server's processes (the sandbox helper that
//!   supervises the server's PID namespace, and the server);
//!
//! each for a stdio server started through the sandbox and the same server started
//! bare, for the stdlib server of tests/fixtures/mcp and, when
//! tests/fixtures/mcp/install.sh has run, the PyPI `mcp-server-time` and the npm
//! `server-everything`.
//!
//! Run: `cargo bench --bench mcp` (prints the figures; asserts nothing).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]
#![allow(clippy::too_many_lines)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use harnessd::config::Loaded;
use harnessd::mcp::client;
use harnessd::mcp::launch::{ExitStatus, Launch, Launched, Sandboxed, ServerCommand};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const FIRST_RUNS: usize = 15;
const WARM_RUNS: usize = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// RSS in KiB of `pid` and every descendant.
fn tree_rss_kib(pid: u32) -> u64 {
    let mut total = 0;
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{p}/status")) {
            total += status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        for task in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            stack.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    total
}

struct Figures {
    first: Duration,
    warm: Duration,
    rss_kib: u64,
}

async fn measure(
    launch: &dyn Launch,
    loaded: &Loaded,
    command: &ServerCommand,
    tool: &str,
    args: &Value,
) -> Figures {
    let never = CancellationToken::new();
    let timeout = Duration::from_secs(30);
    let arguments = args.as_object().cloned().unwrap();
    let mut firsts = Vec::new();
    let mut last = None;
    for _ in 0..FIRST_RUNS {
        let t = Instant::now();
        let launched = launch.launch(loaded, command).await.unwrap();
        let (pid, keep) = (launched.pid, launched.keep);
        let (conn, _notes) = client::connect(launched.read, launched.write)
            .await
            .unwrap();
        conn.call(tool, arguments.clone(), timeout, &never)
            .await
            .unwrap();
        firsts.push(t.elapsed());
        if let Some((old, old_keep, _)) = last.replace((conn, keep, pid)) {
            old.close().await;
            drop(old_keep);
        }
    }
    let (conn, keep, pid) = last.unwrap();
    let mut warm = Vec::new();
    for _ in 0..WARM_RUNS {
        let t = Instant::now();
        conn.call(tool, arguments.clone(), timeout, &never)
            .await
            .unwrap();
        warm.push(t.elapsed());
    }
    let rss_kib = tree_rss_kib(pid);
    conn.close().await;
    drop(keep);
    Figures {
        first: median(firsts),
        warm: median(warm),
        rss_kib,
    }
}

fn shared_copy(root: &Path) -> PathBuf {
    let dir = root.join("mcp-code");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = dir.join("hostile.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/hostile.py"),
        &script,
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    dir
}

fn main() {
    let root = harnessd_testkit::root::init_root(env!("CARGO_BIN_EXE_harnessd"), "mcp-bench", &[]);
    // Node's server needs more address space than the default 1024 MiB.
    let settings = root.join("policies/settings.json");
    let mut s: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    s["sandbox"]["memory_mb"] = json!(2048);
    std::fs::write(&settings, serde_json::to_string_pretty(&s).unwrap()).unwrap();
    let loaded = harnessd::config::load(&root).unwrap();
    harnessd::exec::prepare_workspace(&loaded.paths.workspace, &loaded.tool_user.user).unwrap();
    let code = shared_copy(&root);
    let mut servers = vec![(
        "stdlib python (tests/fixtures/mcp/hostile.py)",
        ServerCommand {
            name: "hostile".into(),
            argv: vec![
                "python3".into(),
                code.join("hostile.py").display().to_string(),
            ],
            env: Vec::new(),
            read: vec![code.clone()],
            write: Vec::new(),
            network: false,
        },
        "echo",
        json!({"text": "x"}),
    )];
    let installed = PathBuf::from(
        std::env::var("HARNESSD_TEST_MCP").unwrap_or_else(|_| "/opt/harnessd-test/mcp".into()),
    );
    if installed.join("venv/.done").exists() {
        let venv = installed.join("venv");
        servers.push((
            "mcp-server-time (PyPI, python SDK)",
            ServerCommand {
                name: "time".into(),
                argv: vec![
                    venv.join("bin/python").display().to_string(),
                    "-m".into(),
                    "mcp_server_time".into(),
                    "--local-timezone".into(),
                    "UTC".into(),
                ],
                env: Vec::new(),
                read: vec![venv.clone()],
                write: Vec::new(),
                network: false,
            },
            "get_current_time",
            json!({"timezone": "UTC"}),
        ));
        let npm = installed.join("npm");
        servers.push((
            "server-everything (npm, node)",
            ServerCommand {
                name: "everything".into(),
                argv: vec![
                    "node".into(),
                    npm.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
                        .display()
                        .to_string(),
                    "stdio".into(),
                ],
                env: Vec::new(),
                read: vec![npm.clone(), PathBuf::from("/etc/ssl/openssl.cnf")],
                write: Vec::new(),
                network: false,
            },
            "echo",
            json!({"message": "x"}),
        ));
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sandboxed = Sandboxed {
        executor: harnessd::exec::Executor::new(PathBuf::from(env!("CARGO_BIN_EXE_harnessd"))),
    };
    println!("| server | started | first call (ms) | warm call (ms) | RSS (MiB) |");
    println!("|---|---|---|---|---|");
    for (label, command, tool, args) in &servers {
        for (how, launch) in [
            ("sandbox", &sandboxed as &dyn Launch),
            ("bare", &Bare as &dyn Launch),
        ] {
            let f = runtime.block_on(measure(launch, &loaded, command, tool, args));
            println!(
                "| {label} | {how} | {:.1} | {:.2} | {:.1} |",
                ms(f.first),
                ms(f.warm),
                f.rss_kib as f64 / 1024.0
            );
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Starts servers without any confinement, to measure what the sandbox costs:
/// here, not in the crate, where processes are spawned by `exec` alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bare;

impl Launch for Bare {
    fn launch<'a>(
        &'a self,
        loaded: &'a Loaded,
        command: &'a ServerCommand,
    ) -> BoxFuture<'a, Result<Launched, String>> {
        Box::pin(async move { bare(loaded, command) })
    }
}

fn bare(loaded: &Loaded, command: &ServerCommand) -> Result<Launched, String> {
    let (program, args) = command
        .argv
        .split_first()
        .ok_or_else(|| format!("server {}: no command", command.name))?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(harnessd::exec::tool_environment(&loaded.paths.workspace))
        .envs(command.env.iter().cloned())
        .current_dir(&loaded.paths.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    let pid = child.id().unwrap_or(0);
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the server's pipes are missing".into());
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ended, mut exit) = tokio::sync::watch::channel(None);
    // The child is owned here, not by the future handed out: the process lives
    // until `keep` is dropped, whoever awaits its end.
    tokio::spawn(async move {
        use std::os::unix::process::ExitStatusExt;
        let status = tokio::select! {
            s = child.wait() => s,
            _ = stopped => { let _ = child.kill().await; child.wait().await }
        };
        let status = status
            .map(|s| ExitStatus {
                code: s.code(),
                signal: s.signal(),
            })
            .unwrap_or_default();
        let _ = ended.send(Some(status));
    });
    let exited = Box::pin(async move {
        let ended = exit.wait_for(Option::is_some).await.map(|e| *e);
        ended.ok().flatten().unwrap_or_default()
    });
    Ok(Launched {
        read: Box::pin(stdout),
        write: Box::pin(stdin),
        exited,
        pid,
        keep: Box::new(stop),
    })
}
