//! The child side of tool execution: the `harnessd` binary re-executed as
//! `harnessd __sandbox-helper`, synchronous, no tokio.
//!
//! The executor writes one [`Job`] as JSON on the helper's stdin. The helper:
//! 1. reads the job (stdin is then replaced by `/dev/null`, so a tool never reads
//!    from the daemon);
//! 2. confines itself — the layers of SPEC §10 go here, between reading the job and
//!    acting on it, so every tool, file tools included, runs under them;
//! 3. performs a file job itself, or `exec`s `bash` / `python3` for a command job.
//!
//! It never decides policy: by the time a job reaches it, the call was allowed.

mod files;
mod job;

pub use job::Job;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The argument that selects the helper entry point.
pub const HELPER_ARG: &str = "__sandbox-helper";

/// Exit code of the helper when it could not set up or start the job.
pub const SETUP_FAILED: i32 = 125;

/// Runs the helper and returns its exit code (on success for command jobs it never
/// returns: the process becomes `bash` or `python3`).
pub fn helper_main() -> i32 {
    let mut raw = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut raw) {
        return setup_failed(&format!("cannot read the job from stdin: {e}"));
    }
    let job: Job = match serde_json::from_str(&raw) {
        Ok(job) => job,
        Err(e) => return setup_failed(&format!("malformed job: {e}")),
    };
    if let Err(e) = stdin_from_dev_null() {
        return setup_failed(&format!("cannot reopen stdin on /dev/null: {e}"));
    }
    match job {
        Job::Bash { command } => exec(Command::new("bash").arg("-c").arg(command)),
        Job::Python { code } => exec(Command::new("python3").arg("-c").arg(code)),
        file_job => files::run(file_job),
    }
}

fn stdin_from_dev_null() -> std::io::Result<()> {
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null)?;
    Ok(())
}

fn exec(cmd: &mut Command) -> i32 {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let err = cmd.exec();
    // 127 is what a shell reports for a command it cannot find.
    eprintln!("harnessd sandbox: cannot run {program}: {err}");
    127
}

fn setup_failed(message: &str) -> i32 {
    eprintln!("harnessd sandbox: {message}");
    SETUP_FAILED
}
