//! `harnessd sandbox [--read-only] -- CMD…`: run a command through exactly the path
//! a tool takes, with the current policy and the write profile (or the read-only
//! one of a pattern-allowed call), so an operator can try a policy out. The command gets
//! no terminal (docs/commands.md): stdin is `/dev/null`, stdout and stderr are pipes whose
//! bytes harnessd relays to its own (escaped where those are a terminal, byte for
//! byte to a pipe or a file), and the helper is a session leader with no
//! controlling terminal. Its exit code is the command's own (124 on timeout, 125
//! when the sandbox refused to start it).

use super::error::{CliError, exit};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::exec::{Ending, ExecRequest, Executor, prepare_workspace};
use crate::sandbox::{Confinement, Job, Profile};

/// Exit code of a command killed at its timeout (as `timeout(1)` uses).
pub const EXIT_TIMEOUT: i32 = 124;

/// Runs `sandbox`.
pub fn run(
    root: &Path,
    argv: Vec<String>,
    profile: Profile,
    helper: &Path,
) -> Result<ExitCode, CliError> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(exit(code)),
    };
    let settings = &loaded.policy.settings;
    // Its warnings (a planted `.tmp` moved aside…) are logged where they arise,
    // to stderr by default.
    prepare_workspace(&loaded.paths.workspace, &loaded.tool_user.user)?;
    let confine = Confinement::for_root(&loaded, profile);
    let never = CancellationToken::new();
    let outcome = Executor::new(PathBuf::from(helper)).run(&ExecRequest {
        job: &Job::Exec { argv },
        workspace: &loaded.paths.workspace,
        confine: &confine,
        timeout: Duration::from_secs(settings.sandbox.timeout_secs),
        spool_prefix: None,
        spool_budget: crate::exec::SpoolBudget::unlimited(),
        keep_bytes: 0,
        cancel: &never,
        relay_output: true,
    });
    // The call's cgroup went back to the pool; nothing else will use it.
    crate::exec::remove_pooled_cgroups();
    Ok(exit(match outcome.ending {
        Ending::Exited(code) => code,
        Ending::Signaled(sig) => 128 + sig,
        Ending::TimedOut => {
            eprintln!(
                "harnessd sandbox: timed out after {} s; the process tree was killed",
                settings.sandbox.timeout_secs
            );
            EXIT_TIMEOUT
        }
        Ending::Flooded | Ending::Cancelled => 1,
        Ending::SpawnFailed(e) => {
            eprintln!("harnessd sandbox: {}", crate::text::escape_text(&e));
            1
        }
    }))
}
