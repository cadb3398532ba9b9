//! The child side of tool execution: the `harnessd` binary re-executed as
//! `harnessd __sandbox-helper`, synchronous, single-threaded, no tokio.
//!
//! The executor writes one [`HelperRequest`] on the helper's stdin, as JSON after
//! its length ([`frame`]). The helper:
//! 1. reads exactly the request; stdin is then replaced by `/dev/null`, so a tool
//!    never reads from the daemon — except for a server ([`Job::McpServer`]) or
//!    a hook ([`Job::Hook`]), whose stdin stays the daemon's pipe, the rest of the
//!    stream after the job;
//! 2. confines itself with every layer of `confine` (session, parent-death signal,
//!    closed descriptors, PID and IPC namespaces, the read-only profile's mount
//!    namespace and private `/tmp`, rlimits, privilege drop, no_new_privs,
//!    Landlock, seccomp), refusing the job if `sandbox.require` is `full` and a
//!    layer cannot be had;
//! 3. performs a file job itself — opening exactly the path the daemon judged,
//!    following no link (see [`open`]) — or `exec`s `bash`, `python3` or the given
//!    program; for a server, after writing [`SERVER_READY`] on stderr. A `run_bash`
//!    command that is one proven simple command is `exec`ed the way bash would
//!    `exec` it, without bash, when that can be done exactly (see [`direct`]).
//!
//! It never decides policy: by the time a job reaches it, the call was allowed.
//! Building Landlock and seccomp rules allocates, which is why this happens here,
//! in a fresh single-threaded process, and not in `pre_exec` in the daemon.

mod confine;
mod direct;
mod environment;
mod files;
mod job;
mod landlock;
mod mounts;
mod open;
mod report;
mod seccomp;
pub mod spawn_server;
mod user;

pub use job::{
    Confinement, HelperRequest, Job, Limits, Network, Profile, Require, SERVER_READY, frame,
    read_framed,
};
pub use report::{Layer, Report, landlock_abi};
pub use user::resolve_user;

use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The argument that selects the helper entry point.
pub const HELPER_ARG: &str = "__sandbox-helper";

/// Exit code of the helper when it could not set up or start the job.
pub const SETUP_FAILED: i32 = 125;

/// Runs the helper and returns its exit code (for command jobs it does not return
/// on success: the process becomes the command).
pub fn helper_main() -> i32 {
    // Unbuffered: a buffer would swallow the first bytes a server is sent.
    // SAFETY: descriptor 0 is this process's stdin for its whole life; the
    // ManuallyDrop keeps it from being closed here.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let req = match read_framed(&mut *stdin) {
        Ok(req) => req,
        Err(e) => return setup_failed(&e),
    };
    let keeps_stdin = matches!(req.job, Job::McpServer { .. } | Job::Hook { .. });
    if !keeps_stdin && let Err(e) = stdin_from_dev_null() {
        return setup_failed(&format!("cannot reopen stdin on /dev/null: {e}"));
    }
    let mut report = Report {
        landlock_abi: landlock_abi(),
        layers: Vec::new(),
    };
    if let Err(e) = confine::apply(&req.confine, &mut report) {
        return setup_failed(&e);
    }
    run_job(req.job, &report)
}

/// Does `job` in this (confined) process: `exec`s the program of a command job
/// (returning only when that fails), performs a file job, prints a probe's report.
fn run_job(job: Job, report: &Report) -> i32 {
    match job {
        Job::Bash {
            command,
            direct: Some(argv),
        } => direct::run(&command, &argv),
        Job::Bash {
            command,
            direct: None,
        } => exec(Command::new("bash").arg("-c").arg(command)),
        Job::Python { code } => exec(Command::new("python3").arg("-c").arg(code)),
        Job::Exec { argv } => match argv.split_first() {
            Some((program, args)) => exec(Command::new(program).args(args)),
            None => setup_failed("no command given"),
        },
        Job::McpServer { argv, env } => become_program(&argv, &env, true),
        Job::Hook { argv, env } => become_program(&argv, &env, false),
        Job::Probe => {
            let json = serde_json::to_string(report).unwrap_or_default();
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{json}").is_err() {
                return 1;
            }
            0
        }
        file_job => files::run(file_job),
    }
}

/// Becomes the program `argv` (a server or a hook) with `env` added, once it is
/// found where the confined process can run it. For a server (`announce`) a
/// program that is missing or outside the read set is refused before
/// [`SERVER_READY`], so the daemon can tell the sandbox's refusal from the
/// server's own failure.
fn become_program(argv: &[String], env: &[(String, String)], announce: bool) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        return setup_failed("no command given");
    };
    for (key, value) in env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return setup_failed(&format!("invalid environment variable name {key:?}"));
        }
        // SAFETY: the helper is single-threaded (no tokio, no threads spawned).
        unsafe { std::env::set_var(key, value) };
    }
    let path = match find_program(program) {
        Ok(path) => path,
        Err(e) => {
            setup_failed(&e);
            return 127;
        }
    };
    if announce && writeln!(std::io::stderr(), "{SERVER_READY}").is_err() {
        return SETUP_FAILED;
    }
    exec(Command::new(path).arg0(program).args(args))
}

/// Where `program` is: itself when it names a path, else the first entry of
/// `PATH` holding it; in either case a file this (confined) process may open and
/// execute, so Landlock's verdict is known before the server is announced.
fn find_program(program: &str) -> Result<std::path::PathBuf, String> {
    let candidates: Vec<std::path::PathBuf> = if program.contains('/') {
        vec![program.into()]
    } else {
        let path = std::env::var("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .collect()
    };
    let mut refused = None;
    for candidate in candidates {
        if !candidate.is_file() {
            continue;
        }
        let runnable = nix::unistd::access(&candidate, nix::unistd::AccessFlags::X_OK)
            .map_err(std::io::Error::from)
            .and_then(|()| std::fs::File::open(&candidate).map(drop));
        match runnable {
            Ok(()) => return Ok(candidate),
            Err(e) => refused = refused.or(Some(format!("{}: {e}", candidate.display()))),
        }
    }
    Err(match refused {
        Some(why) => format!("cannot run {program}: {why} (is it in the read set?)"),
        None if program.contains('/') => {
            format!("cannot run {program}: no such file inside the sandbox")
        }
        None => format!(
            "cannot run {program}: not found on PATH ({}) inside the sandbox",
            std::env::var("PATH").unwrap_or_default()
        ),
    })
}

fn stdin_from_dev_null() -> std::io::Result<()> {
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null)?;
    Ok(())
}

// The helper has no logging: its stderr is the tool's, read back as the refusal.
#[allow(clippy::print_stderr)]
fn exec(cmd: &mut Command) -> i32 {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let err = cmd.exec();
    // 127 is what a shell reports for a command it cannot find.
    eprintln!("harnessd sandbox: cannot run {program}: {err}");
    127
}

// The helper's stderr is the tool's: the caller shows it as why the sandbox refused.
#[allow(clippy::print_stderr)]
fn setup_failed(message: &str) -> i32 {
    eprintln!("harnessd sandbox: {message}");
    SETUP_FAILED
}
