//! A command's child that shares its spawn server's memory until it execs
//! (docs/sandbox.md "How a call is started"): real servers, real children, a real
//! kill. The child sets nothing in the server (every call starts from the same
//! environment) and inherits most of its seccomp filters from it; a child killed
//! before its exec retires the server, which then starts nothing; a server whose
//! children leaked past its bound retires, and the daemon's next call runs in its
//! successor, none failing; a server that does not start a call within its
//! timeout is killed.

use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harnessd::exec::{Ending, ExecOutcome, ExecRequest, Executor, SpoolBudget};
use harnessd::sandbox::spawn_server::{
    CALL_COMMAND, CALL_COPY, EXITED, RETIRED, SPAWN_SERVER_ARG, STARTED, Setup, read_record,
};
use harnessd::sandbox::{Confinement, HelperRequest, Job, Profile};
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, sendmsg, socketpair,
};
use tokio_util::sync::CancellationToken;

use crate::spawn_server::{pids_running, setup, signal_the_server};

fn executor() -> Executor {
    Executor::new(PathBuf::from(env!("CARGO_BIN_EXE_harnessd")))
}

fn bash(
    executor: &Executor,
    workspace: &Path,
    confine: &Confinement,
    command: &str,
) -> ExecOutcome {
    let job = Job::Bash {
        command: command.into(),
        direct: None,
    };
    run_job(executor, workspace, confine, &job)
}

fn run_job(executor: &Executor, workspace: &Path, confine: &Confinement, job: &Job) -> ExecOutcome {
    let never = CancellationToken::new();
    executor.run(&ExecRequest {
        job,
        workspace,
        confine,
        timeout: Duration::from_secs(60),
        spool_prefix: None,
        spool_budget: SpoolBudget::unlimited(),
        keep_bytes: 64 * 1024,
        cancel: &never,
        relay_output: false,
    })
}

#[test]
fn every_call_starts_from_the_servers_environment() {
    // The read-only profile is the one that sets variables (HOME, TMPDIR, git's
    // command-scope configuration, numbered from the count already there): set
    // on a process that shares the server's memory, each call would find the
    // last one's, and the count would climb.
    let (_root, workspace, confine) = setup();
    let read_only = Confinement {
        profile: Profile::ReadOnly,
        ..confine
    };
    let executor = executor();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let out = bash(&executor, &workspace, &read_only, "env | sort");
        assert_eq!(out.ending, Ending::Exited(0), "{}", out.stderr.text());
        seen.push(out.stdout.text());
    }
    assert_eq!(
        executor.spawn_server_pids().len(),
        1,
        "one server for them all"
    );
    // The count names exactly the entries there are, the profile's three last.
    let keys = seen[0].matches("GIT_CONFIG_KEY_").count();
    assert!(keys >= 3, "{}", seen[0]);
    assert!(
        seen[0].contains(&format!("GIT_CONFIG_COUNT={keys}\n")),
        "{}",
        seen[0]
    );
    assert!(
        seen[0].contains(&format!("GIT_CONFIG_KEY_{}=core.fsmonitor\n", keys - 3)),
        "{}",
        seen[0]
    );
    assert_eq!(seen[1], seen[0]);
    assert_eq!(seen[2], seen[0]);
}

#[test]
fn a_child_inherits_most_filters_from_its_server_and_installs_the_setup_calls_last() {
    // The server installs on itself what its children inherit (three filters:
    // clone3, the refusals, x32); each child adds the refusal of the calls it
    // set up with, so the tool is under four, and those calls are refused too.
    let (_root, workspace, confine) = setup();
    let executor = executor();
    let mark = "4711.625";
    let filters = std::thread::scope(|s| {
        let call = s.spawn(|| bash(&executor, &workspace, &confine, &format!("sleep {mark}")));
        let start = Instant::now();
        let pid = loop {
            if let Some(pid) = pids_running(&["sleep", mark]).first() {
                break *pid;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the call never ran"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        // Read from outside: the tool may not read its own /proc files.
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let filters = status
            .lines()
            .find_map(|l| l.strip_prefix("Seccomp_filters:"))
            .map(|n| n.trim().to_string());
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let _ = call.join().unwrap();
        filters
    });
    assert_eq!(filters.as_deref(), Some("4"));
    let out = bash(
        &executor,
        &workspace,
        &confine,
        "unshare --mount true 2>&1; echo unshare=$?; \
         python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)' 2>&1 | tail -1",
    );
    let text = out.stdout.text();
    assert!(
        text.contains("unshare: unshare failed: Operation not permitted"),
        "{text}"
    );
    assert!(text.contains("unshare=1\n"), "{text}");
    assert!(
        text.contains("PermissionError: [Errno 1] Operation not permitted"),
        "{text}"
    );
}

#[test]
fn a_server_whose_children_leaked_past_its_bound_retires_and_the_next_call_runs() {
    // Each call's child reads its job into the server's heap and execs without
    // freeing it: a job of about 0.9 MiB (ten arguments of 90 KiB, under the
    // kernel's bounds and the daemon's 1 MiB for a shared child) leaks some
    // 1.8 MiB, so a few calls pass the bound (16 MiB).
    let (_root, workspace, confine) = setup();
    let executor = executor();
    let mut argv = vec!["true".to_string()];
    argv.extend((0..10).map(|i| format!("{i}{}", "x".repeat(90 << 10))));
    let mut servers = Vec::new();
    for call in 0..40 {
        let job = Job::Exec { argv: argv.clone() };
        let out = run_job(&executor, &workspace, &confine, &job);
        // A retired server's call is run by its successor: none fails.
        assert_eq!(
            out.ending,
            Ending::Exited(0),
            "call {call}: {}",
            out.stderr.text()
        );
        let now = executor.spawn_server_pids();
        assert_eq!(now.len(), 1, "{now:?}");
        if servers.last() != Some(&now[0]) {
            servers.push(now[0]);
        }
        if servers.len() == 2 {
            break;
        }
    }
    assert_eq!(servers.len(), 2, "the server never retired: {servers:?}");
    // The next call runs too, in the successor.
    let next = bash(&executor, &workspace, &confine, "echo two");
    assert_eq!(next.stdout.text(), "two\n", "{}", next.stderr.text());
    assert_eq!(executor.spawn_server_pids(), vec![servers[1]]);
}

/// A spawn server started by hand: its control socket and process.
struct Server {
    ctrl: OwnedFd,
    process: std::process::Child,
}

impl Server {
    fn start(workspace: &Path, confine: &Confinement) -> Server {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let process = Command::new(env!("CARGO_BIN_EXE_harnessd"))
            .arg(SPAWN_SERVER_ARG)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir(workspace)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let setup = serde_json::to_vec(&Setup {
            confine: confine.clone(),
        })
        .unwrap();
        sendmsg::<()>(
            ours.as_raw_fd(),
            &[IoSlice::new(&setup)],
            &[],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        let mut ready = vec![0u8; 4096];
        let n = nix::sys::socket::recv(ours.as_raw_fd(), &mut ready, MsgFlags::empty()).unwrap();
        let ready: serde_json::Value = serde_json::from_slice(&ready[..n]).unwrap();
        assert_eq!(ready["error"], serde_json::Value::Null, "{ready}");
        Server {
            ctrl: ours,
            process,
        }
    }

    /// Sends one call tagged `tag`; the daemon's end of its socket and stdout.
    fn call(&self, tag: u8) -> (UnixStream, std::fs::File) {
        let (sock, theirs) = UnixStream::pair().unwrap();
        let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (_err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let fds = [theirs.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
        sendmsg::<()>(
            self.ctrl.as_raw_fd(),
            &[IoSlice::new(&[tag])],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        (sock, std::fs::File::from(out_r))
    }

    /// The pids of the server's children.
    fn children(&self) -> Vec<i32> {
        let pid = self.process.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

fn job(confine: &Confinement, command: &str) -> Vec<u8> {
    harnessd::sandbox::frame(&HelperRequest {
        job: Job::Bash {
            command: command.into(),
            direct: None,
        },
        confine: confine.clone(),
    })
    .unwrap()
}

fn record(sock: &UnixStream) -> (u8, i32) {
    let (tag, value, _) = read_record(sock.as_raw_fd())
        .unwrap()
        .expect("a record before the end of the call socket");
    (tag, value)
}

#[test]
fn a_child_killed_before_its_exec_retires_its_server() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "shared children are root's"
    );
    let (_root, workspace, confine) = setup();
    let mut server = Server::start(&workspace, &confine);
    // A whole call first: the server goes on after it.
    let (sock, mut out) = server.call(CALL_COMMAND);
    (&sock).write_all(&job(&confine, "echo ran")).unwrap();
    assert_eq!(record(&sock).0, STARTED);
    assert_eq!(record(&sock), (EXITED, 0));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut out, &mut text).unwrap();
    assert_eq!(text, "ran\n");
    // A call whose job never comes: its child waits for it in the server's
    // memory, the server suspended, until it is killed there.
    let (stuck, _out) = server.call(CALL_COMMAND);
    let start = Instant::now();
    let child = loop {
        if let Some(pid) = server.children().first() {
            break *pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no child appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_eq!(record(&stuck).0, STARTED);
    assert_eq!(record(&stuck), (EXITED, 128 + libc::SIGKILL));
    // From then on nothing starts: each call, command or not, is answered
    // "retired" and its job never read.
    for tag in [CALL_COMMAND, CALL_COPY] {
        let (sock, _out) = server.call(tag);
        let _ = (&sock).write_all(&job(&confine, "echo must-not-run > ran.txt"));
        assert_eq!(record(&sock).0, RETIRED, "tag {tag}");
        // Then the end (a reset: the job was left unread), no start.
        let after = read_record(sock.as_raw_fd());
        assert!(!matches!(after, Ok(Some(_))), "tag {tag}: {after:?}");
    }
    assert!(!workspace.join("ran.txt").exists());
    // Its control socket closed, the retired server exits.
    drop(server.ctrl);
    let start = Instant::now();
    while server.process.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_call_whose_server_does_not_start_it_in_time_kills_the_server_and_the_next_runs() {
    // A server that cannot start its call (stopped here; a command's child
    // stalled in its setup holds it the same way) must not hold every call
    // behind it: within the call's timeout the server is killed, the call fails,
    // and the next call runs in a successor.
    let (_root, workspace, confine) = setup();
    let executor = executor();
    assert_eq!(
        bash(&executor, &workspace, &confine, "echo one")
            .stdout
            .text(),
        "one\n"
    );
    let old = signal_the_server(&executor, nix::sys::signal::Signal::SIGSTOP);
    let never = CancellationToken::new();
    let started = Instant::now();
    let stuck = executor.run(&ExecRequest {
        job: &Job::Bash {
            command: "touch must-not-run".into(),
            direct: None,
        },
        workspace: &workspace,
        confine: &confine,
        timeout: Duration::from_secs(1),
        spool_prefix: None,
        spool_budget: SpoolBudget::unlimited(),
        keep_bytes: 64 * 1024,
        cancel: &never,
        relay_output: false,
    });
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    match &stuck.ending {
        Ending::SpawnFailed(e) => assert!(e.contains("did not start within"), "{e}"),
        other => panic!("the call should have failed to start: {other:?}"),
    }
    let start = Instant::now();
    while crate::spawn_server::alive(old) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the stuck server lives on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!workspace.join("must-not-run").exists());
    let next = bash(&executor, &workspace, &confine, "echo two");
    assert_eq!(next.stdout.text(), "two\n", "{}", next.stderr.text());
    assert_ne!(executor.spawn_server_pids(), vec![old]);
}
