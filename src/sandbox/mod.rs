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

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use environment::Overrides;

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
    match confine::apply(&req.confine, &mut report) {
        Ok(env) => run_job(req.job, &report, &env),
        Err(e) => setup_failed(&e),
    }
}

/// Does `job` in this (confined) process: `exec`s the program of a command job
/// with the profile's variables `env` (returning only when that fails), performs a
/// file job, prints a probe's report.
fn run_job(job: Job, report: &Report, env: &Overrides) -> i32 {
    match job {
        Job::Bash {
            command,
            direct: Some(argv),
        } => direct::run(&command, &argv, env),
        Job::Bash {
            command,
            direct: None,
        } => exec_bash(&command, env),
        Job::Python { code } => exec("python3", &["python3", "-c", &code], env),
        Job::Exec { argv } => match argv.first() {
            Some(program) => exec(program, &argv, env),
            None => setup_failed("no command given"),
        },
        Job::McpServer { argv, env: added } => become_program(&argv, &added, env, true),
        Job::Hook { argv, env: added } => become_program(&argv, &added, env, false),
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

/// Becomes the program `argv` (a server or a hook) with `added` set on top of the
/// profile's `env`, once it is found where the confined process can run it. For a
/// server (`announce`) a program that is missing or outside the read set is
/// refused before [`SERVER_READY`], so the daemon can tell the sandbox's refusal
/// from the server's own failure.
fn become_program(
    argv: &[String],
    added: &[(String, String)],
    env: &Overrides,
    announce: bool,
) -> i32 {
    let Some(program) = argv.first() else {
        return setup_failed("no command given");
    };
    let mut env = env.clone();
    for (key, value) in added {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return setup_failed(&format!("invalid environment variable name {key:?}"));
        }
        env.set(key, value);
    }
    // The search uses the PATH the program will have, as a shell given that
    // environment would.
    let search = env
        .environment()
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path = match find_program(program, &search) {
        Ok(path) => path,
        Err(e) => {
            setup_failed(&e);
            return 127;
        }
    };
    if announce && writeln!(std::io::stderr(), "{SERVER_READY}").is_err() {
        return SETUP_FAILED;
    }
    exec(path, argv, &env)
}

/// Where `program` is: itself when it names a path, else the first entry of
/// `PATH` holding it; in either case a file this (confined) process may open and
/// execute, so Landlock's verdict is known before the server is announced.
fn find_program(program: &str, path: &str) -> Result<std::path::PathBuf, String> {
    let candidates: Vec<std::path::PathBuf> = if program.contains('/') {
        vec![program.into()]
    } else {
        std::env::split_paths(path)
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
        None => format!("cannot run {program}: not found on PATH ({path}) inside the sandbox"),
    })
}

fn stdin_from_dev_null() -> std::io::Result<()> {
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null)?;
    Ok(())
}

/// `bash -c command`.
fn exec_bash(command: &str, env: &Overrides) -> i32 {
    exec("bash", &["bash", "-c", command], env)
}

/// `exec`s `program` (searched on `PATH` as `execvp` does when it holds no `/`)
/// with `argv` and the process's environment with `env` set, the signal mask
/// empty and SIGPIPE at its default (as `std::process::Command` leaves them).
/// Returns 127 (what a shell reports for a command it cannot run) when the exec
/// fails, having said why on stderr.
///
/// The environment is built apart and handed to `execvpe`: nothing here writes
/// the process's environment or takes std's environment lock, which a spawn
/// server's child that shares the server's memory must not (see
/// [`spawn_server`]).
// The helper has no logging: its stderr is the tool's, read back as the refusal.
#[allow(clippy::print_stderr)]
fn exec(program: impl AsRef<OsStr>, argv: &[impl AsRef<OsStr>], env: &Overrides) -> i32 {
    let program = program.as_ref();
    let cstring = |s: &OsStr| CString::new(s.as_bytes());
    let built = (|| {
        let path = cstring(program)?;
        let argv = argv
            .iter()
            .map(|a| cstring(a.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = env
            .environment()
            .into_iter()
            .map(|(k, v)| {
                let mut entry = k.into_vec();
                entry.push(b'=');
                entry.extend(v.into_vec());
                CString::new(entry)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok::<_, std::ffi::NulError>((path, argv, envp))
    })();
    let err = match built {
        Ok((path, argv, envp)) => {
            let (argv, envp) = (pointers(&argv), pointers(&envp));
            reset_signals();
            let mark = spawn_server::before_exec();
            // SAFETY: NUL-terminated arrays of pointers to C strings that outlive
            // the call; execvpe returns only on failure.
            unsafe { libc::execvpe(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            let e = std::io::Error::last_os_error();
            drop(mark);
            e
        }
        Err(_) => std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        ),
    };
    // A program named by the model may be long: the message stays short, so it
    // fits the stderr pipe before anyone reads it.
    let name: String = program.to_string_lossy().chars().take(200).collect();
    eprintln!("harnessd sandbox: cannot run {name}: {err}");
    127
}

/// `strings` as `execve` takes them: pointers, then a null one. Built before the
/// exec is marked (see [`spawn_server::before_exec`]): nothing allocates between
/// the mark and the system call.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The signal mask empty and SIGPIPE at its default (std ignores it), as a
/// program expects to start.
fn reset_signals() {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, signal, sigprocmask};
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    // SAFETY: this process is single-threaded; SIG_DFL installs no handler.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

// The helper's stderr is the tool's: the caller shows it as why the sandbox refused.
#[allow(clippy::print_stderr)]
fn setup_failed(message: &str) -> i32 {
    eprintln!("harnessd sandbox: {message}");
    SETUP_FAILED
}
