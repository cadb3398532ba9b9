//! The child side of tool execution: the `harnessd` binary re-executed as
//! `harnessd __sandbox-helper`, synchronous, single-threaded, no tokio.
//!
//! The executor writes one [`HelperRequest`] as JSON on the helper's stdin. The
//! helper:
//! 1. reads the request; stdin is then replaced by `/dev/null`, so a tool never
//!    reads from the daemon;
//! 2. confines itself with every layer of `confine` (session, parent-death signal,
//!    closed descriptors, PID and IPC namespaces, the read-only profile's mount
//!    namespace and private `/tmp`, rlimits, privilege drop, no_new_privs,
//!    Landlock, seccomp), refusing the job if `sandbox.require` is `full` and a
//!    layer cannot be had;
//! 3. performs a file job itself — opening exactly the path the daemon judged,
//!    following no link (see [`open`]) — or `exec`s `bash`, `python3` or the given
//!    program.
//!
//! It never decides policy: by the time a job reaches it, the call was allowed.
//! Building Landlock and seccomp rules allocates, which is why this happens here,
//! in a fresh single-threaded process, and not in `pre_exec` in the daemon.

mod confine;
mod environment;
mod files;
mod job;
mod landlock;
mod mounts;
mod open;
mod report;
mod seccomp;
mod user;

pub use job::{Confinement, HelperRequest, Job, Limits, Profile, Require};
pub use report::{Layer, Report, landlock_abi};
pub use user::resolve_user;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The argument that selects the helper entry point.
pub const HELPER_ARG: &str = "__sandbox-helper";

/// Exit code of the helper when it could not set up or start the job.
pub const SETUP_FAILED: i32 = 125;

/// Runs the helper and returns its exit code (for command jobs it does not return
/// on success: the process becomes the command).
pub fn helper_main() -> i32 {
    let mut raw = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut raw) {
        return setup_failed(&format!("cannot read the job from stdin: {e}"));
    }
    let req: HelperRequest = match serde_json::from_str(&raw) {
        Ok(req) => req,
        Err(e) => return setup_failed(&format!("malformed job: {e}")),
    };
    if let Err(e) = stdin_from_dev_null() {
        return setup_failed(&format!("cannot reopen stdin on /dev/null: {e}"));
    }
    let mut report = Report {
        landlock_abi: landlock_abi(),
        layers: Vec::new(),
    };
    if let Err(e) = confine::apply(&req.confine, &mut report) {
        return setup_failed(&e);
    }
    match req.job {
        Job::Bash { command } => exec(Command::new("bash").arg("-c").arg(command)),
        Job::Python { code } => exec(Command::new("python3").arg("-c").arg(code)),
        Job::Exec { argv } => match argv.split_first() {
            Some((program, args)) => exec(Command::new(program).args(args)),
            None => setup_failed("no command given"),
        },
        Job::Probe => {
            let json = serde_json::to_string(&report).unwrap_or_default();
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{json}").is_err() {
                return 1;
            }
            0
        }
        file_job => files::run(file_job),
    }
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
