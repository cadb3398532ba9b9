//! `harnessd serve`: installs the signal handlers (SIGTERM and SIGINT stop, SIGHUP
//! reloads), prepares the root and hands them to [`crate::daemon::serve::serve`].

use super::error::CliError;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::daemon::serve::{PreparedSocket, ServeOptions, serve};
use crate::services::Prepared;

/// Runs `serve` on a fresh tokio runtime; returns the exit code (0 after a clean
/// stop). A config error comes back as [`crate::services::StartError::Config`] for
/// `main` to show (exit 2).
pub fn run(
    root: PathBuf,
    helper: PathBuf,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ExitCode, CliError> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let shutdown = super::signals::terminate()?;
        let hangups = super::signals::hangups();
        let prepared = Prepared::load(&root, env)?;
        let socket = PreparedSocket::prepare(&prepared.loaded)?;
        // Early, with the root locked: memory charged before the move stays outside
        // the limit. `daemon_started` and `check` say how it went.
        let memory_mb = prepared.loaded.config.daemon.memory_mb;
        if let Err(why) = crate::exec::confine_daemon(memory_mb) {
            eprintln!(
                "warning: harnessd serve runs without its own memory limit \
                 (daemon.memory_mb = {memory_mb}): {why}"
            );
        }
        let served = serve(prepared, socket, ServeOptions { helper, hangups }, shutdown).await;
        crate::exec::leave_daemon_cgroup();
        served?;
        Ok(ExitCode::SUCCESS)
    })
}
