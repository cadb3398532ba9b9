//! `harnessd serve`: installs the signal handlers (SIGTERM and SIGINT stop, SIGHUP
//! reloads), prepares the root and hands them to [`crate::daemon::serve::serve`].

use std::path::PathBuf;

use crate::daemon::serve::{PreparedSocket, ServeOptions, serve};
use crate::services::Prepared;

/// Runs `serve` on a fresh tokio runtime; returns the exit code (0 after a clean
/// stop). A config error comes back as [`crate::services::StartError::Config`] for
/// `main` to show (exit 2).
pub fn run(
    root: PathBuf,
    helper: PathBuf,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<i32> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let shutdown = super::signals::terminate()?;
        let hangups = super::signals::hangups();
        let prepared = Prepared::load(&root, env)?;
        let socket = PreparedSocket::prepare(&prepared.loaded)?;
        serve(prepared, socket, ServeOptions { helper, hangups }, shutdown).await?;
        Ok(0)
    })
}
