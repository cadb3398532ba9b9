//! The spawn server (docs/sandbox.md "How a call is started"): real servers, real
//! children, real kills. A policy change reaches the next call and retires the
//! old server; a killed server is replaced and the next call runs; a call whose
//! server dies ends, its tree with it; no server outlives the daemon, kill -9
//! included; and a tool that can see the server in /proc can neither read nor
//! signal it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use harnessd::config::Settings;
use harnessd::exec::{Ending, ExecOutcome, ExecRequest, Executor, SpoolBudget, prepare_workspace};
use harnessd::sandbox::{Confinement, Job, Profile};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::sandbox;
use crate::common::{FakeApi, Reply, TestRoot, chown_tree, stderr, stdout};

/// A root, its workspace, and the confinement its default settings give.
pub(crate) fn setup() -> (TestRoot, PathBuf, Confinement) {
    let root = TestRoot::new("http://127.0.0.1:9");
    let settings = Settings::parse(&harnessd::config::default_settings(), "settings.json")
        .unwrap()
        .settings;
    let dir = root.dir.canonicalize().unwrap();
    let tool_user = harnessd::config::resolve_tool_user(&dir, &settings.sandbox.user).unwrap();
    let workspace = dir.join("workspace");
    prepare_workspace(&workspace, &tool_user.user).unwrap();
    let confine = Confinement::from_settings(&settings, &dir, &tool_user.user, Profile::Write);
    (root, workspace, confine)
}

fn executor() -> Executor {
    Executor::new(PathBuf::from(env!("CARGO_BIN_EXE_harnessd")))
}

fn run(executor: &Executor, workspace: &Path, confine: &Confinement, script: &str) -> ExecOutcome {
    let never = CancellationToken::new();
    executor.run(&ExecRequest {
        job: &Job::Bash {
            command: script.into(),
            direct: None,
        },
        workspace,
        confine,
        timeout: Duration::from_secs(30),
        spool_prefix: None,
        spool_budget: SpoolBudget::unlimited(),
        keep_bytes: 64 * 1024,
        cancel: &never,
        relay_output: false,
    })
}

/// Sends `signal` to the executor's one spawn server; returns its pid.
pub(crate) fn signal_the_server(executor: &Executor, signal: nix::sys::signal::Signal) -> u32 {
    let servers = executor.spawn_server_pids();
    assert_eq!(servers.len(), 1, "one spawn server: {servers:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(servers[0] as i32), signal).unwrap();
    servers[0]
}

/// Whether a process `pid` exists and is not a zombie.
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
        })
        .unwrap_or(false)
}

fn wait_gone(pid: u32, what: &str) {
    let start = Instant::now();
    while alive(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what} (pid {pid}) is still alive"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pids of the processes whose command line is exactly `argv`.
pub(crate) fn pids_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| alive(*pid))
        .collect()
}

/// Spawn servers whose parent is `parent`.
fn servers_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            cmd.ends_with(b"__spawn-server\0") && ppid == Some(parent) && alive(*pid)
        })
        .collect()
}

#[test]
fn a_policy_change_reaches_the_next_call_and_retires_the_old_server() {
    let (_root, workspace, confine) = setup();
    let executor = executor();
    let first = run(&executor, &workspace, &confine, "ulimit -n");
    assert_eq!(first.ending, Ending::Exited(0), "{}", first.stderr.text());
    assert_eq!(
        first.stdout.text().trim(),
        confine.limits.max_open_files.to_string()
    );
    let old = executor.spawn_server_pids();
    assert_eq!(old.len(), 1, "one server for one confinement: {old:?}");
    // The same confinement again: the same server.
    let again = run(&executor, &workspace, &confine, "true");
    assert_eq!(again.ending, Ending::Exited(0));
    assert_eq!(executor.spawn_server_pids(), old);
    // The policy moves on: the next call has the new limit, from a new server,
    // and the old one exits.
    let mut changed = confine.clone();
    changed.limits.max_open_files = confine.limits.max_open_files - 7;
    let next = run(&executor, &workspace, &changed, "ulimit -n");
    assert_eq!(next.ending, Ending::Exited(0), "{}", next.stderr.text());
    assert_eq!(
        next.stdout.text().trim(),
        changed.limits.max_open_files.to_string()
    );
    let new = executor.spawn_server_pids();
    assert_eq!(new.len(), 1, "the old version was retired: {new:?}");
    assert_ne!(new, old);
    wait_gone(old[0], "the retired spawn server");
    // Another profile is another server, beside it.
    let read_only = Confinement {
        profile: Profile::ReadOnly,
        ..changed.clone()
    };
    let ro = run(&executor, &workspace, &read_only, "touch x 2>&1; true");
    assert!(ro.stdout.text().contains("Permission denied"), "{ro:?}");
    assert_eq!(executor.spawn_servers(), 2);
}

#[test]
fn a_killed_spawn_server_is_replaced_and_the_next_call_runs() {
    let (_root, workspace, confine) = setup();
    let executor = executor();
    let first = run(&executor, &workspace, &confine, "echo one");
    assert_eq!(first.stdout.text(), "one\n");
    let old = signal_the_server(&executor, nix::sys::signal::Signal::SIGKILL);
    wait_gone(old, "the killed spawn server");
    let next = run(&executor, &workspace, &confine, "echo two");
    assert_eq!(next.ending, Ending::Exited(0), "{}", next.stderr.text());
    assert_eq!(next.stdout.text(), "two\n");
    let new = executor.spawn_server_pids();
    assert_eq!(new.len(), 1);
    assert_ne!(new, vec![old]);
}

#[test]
fn a_call_whose_server_dies_ends_and_its_tree_with_it() {
    let (_root, workspace, confine) = setup();
    let executor = executor();
    let started = Instant::now();
    let (outcome, killed) = std::thread::scope(|s| {
        let call = s.spawn(|| {
            run(
                &executor,
                &workspace,
                &confine,
                "sleep 4711.25 & sleep 4711.25",
            )
        });
        let start = Instant::now();
        while pids_running(&["sleep", "4711.25"]).len() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the call never ran"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let server = signal_the_server(&executor, nix::sys::signal::Signal::SIGKILL);
        (call.join().unwrap(), server)
    });
    assert!(started.elapsed() < Duration::from_secs(20));
    match &outcome.ending {
        Ending::SpawnFailed(e) => assert!(e.contains("spawn server exited"), "{e}"),
        other => panic!("the call should have failed with its server: {other:?}"),
    }
    wait_gone(killed, "the killed spawn server");
    let start = Instant::now();
    while !pids_running(&["sleep", "4711.25"]).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the call's processes outlived their server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `harnessd run` on `root` against `api`, every tool allowed.
fn start_run(root: &TestRoot, api: &FakeApi) -> std::process::Child {
    root.set_config("api", "base_url", &format!("{:?}", api.url));
    root.edit_settings(|s| {
        s["tools"]["default"] = json!("allow");
    });
    root.command(&["run", "--yes", "x"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The spawn server of `daemon` and the process of its call that sleeps `mark`
/// seconds, once both run.
fn running_call(daemon: &mut std::process::Child, mark: &str) -> (u32, u32) {
    let start = Instant::now();
    loop {
        let servers = servers_of(daemon.id());
        let sleeps = pids_running(&["sleep", mark]);
        if let (Some(server), Some(sleep)) = (servers.first(), sleeps.first()) {
            return (*server, *sleep);
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = daemon.kill();
            let _ = daemon.wait();
            panic!("the call never ran (servers {servers:?}, sleeps {sleeps:?})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn no_spawn_server_survives_the_daemon_killed() {
    let mark = "4242.75";
    let api = FakeApi::start(vec![
        Reply::tool(
            "c1",
            "run_bash",
            json!({"command": format!("sleep {mark}")}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let mut daemon = start_run(&root, &api);
    let (server, sleep) = running_call(&mut daemon, mark);
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    wait_gone(server, "the spawn server of a daemon killed with SIGKILL");
    wait_gone(sleep, "the call of a daemon killed with SIGKILL");
}

#[test]
fn no_spawn_server_survives_the_daemon_that_finished() {
    let api = FakeApi::start(vec![
        Reply::tool("c1", "run_bash", json!({"command": "echo hi"})),
        Reply::tool("c2", "run_bash", json!({"command": "sleep 0.3"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let mut daemon = start_run(&root, &api);
    let start = Instant::now();
    let mut seen = Vec::new();
    while daemon.try_wait().unwrap().is_none() {
        seen.extend(servers_of(daemon.id()));
        assert!(start.elapsed() < Duration::from_secs(30), "harnessd hung");
        std::thread::sleep(Duration::from_millis(10));
    }
    seen.sort_unstable();
    seen.dedup();
    assert!(!seen.is_empty(), "the calls ran through a spawn server");
    for pid in seen {
        wait_gone(pid, "the spawn server of a finished run");
    }
}

/// Looks for spawn servers in /proc and tries their files and a signal.
const SERVER_ATTACK: &str = r#"
import os, signal
found, got = 0, []
for p in os.listdir('/proc'):
    if not p.isdigit():
        continue
    try:
        cmd = open(f'/proc/{p}/cmdline', 'rb').read()
    except OSError:
        continue
    if not cmd.endswith(b'__spawn-server\0'):
        continue
    found += 1
    for f in ('environ', 'mem', 'maps', 'stack', 'syscall', 'fd/0', 'fd/3'):
        try:
            open(f'/proc/{p}/{f}', 'rb').read(1)
            got.append(f)
        except OSError:
            pass
    try:
        os.listdir(f'/proc/{p}/fd')
        got.append('fd list')
    except OSError:
        pass
    try:
        os.kill(int(p), signal.SIGKILL)
        got.append('kill')
    except OSError:
        pass
print('ESCAPED ' + ','.join(got) if got else f'found {found}, none reachable')
"#;

fn attack_the_server(as_uid: Option<u32>) {
    let root = TestRoot::new("http://127.0.0.1:9");
    // An operator who lets tools read /proc (check warns) still keeps them off
    // the server.
    root.edit_settings(|s| {
        s["allowed_paths"]["read"]
            .as_array_mut()
            .unwrap()
            .push(json!("/proc"));
    });
    if let Some(uid) = as_uid {
        chown_tree(&root.dir, uid);
    }
    let out = sandbox::run(&root, false, as_uid, &["python3", "-c", SERVER_ATTACK]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(!text.contains("ESCAPED"), "{text}");
    let found: usize = text
        .strip_prefix("found ")
        .and_then(|t| t.split(',').next()?.parse().ok())
        .unwrap_or(0);
    // Its own server at least (other tests' may run beside it).
    assert!(found >= 1 && text.contains("none reachable"), "{text}");
}

#[test]
fn a_tool_cannot_reach_its_spawn_server_as_root() {
    attack_the_server(None);
}

#[test]
fn a_tool_cannot_reach_its_spawn_server_as_an_unprivileged_daemon() {
    attack_the_server(Some(61012));
}

#[test]
fn a_workspace_replaced_under_its_server_is_where_the_next_call_runs() {
    let (root, workspace, confine) = setup();
    let executor = executor();
    let first = run(&executor, &workspace, &confine, "echo old > marker");
    assert_eq!(first.ending, Ending::Exited(0), "{}", first.stderr.text());
    let server = executor.spawn_server_pids();
    // The operator moves the workspace aside and makes a new one at its name.
    let aside = workspace.with_file_name("workspace.old");
    std::fs::rename(&workspace, &aside).unwrap();
    std::fs::create_dir(&workspace).unwrap();
    let tool_user = std::fs::read_to_string(root.dir.join("config/sandbox-uid"))
        .map(|u| u.trim().to_string())
        .unwrap_or_else(|_| "nobody".into());
    prepare_workspace(&workspace, &tool_user).unwrap();
    let next = run(&executor, &workspace, &confine, "cat marker 2>&1; pwd -P");
    assert_eq!(
        executor.spawn_server_pids(),
        server,
        "the same server served both"
    );
    let text = next.stdout.text();
    assert!(
        text.contains("No such file"),
        "the call ran in the old directory: {text}"
    );
    assert!(
        text.trim_end().ends_with(&workspace.display().to_string()),
        "{text}"
    );
}
