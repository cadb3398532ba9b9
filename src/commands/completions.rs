//! `harnessd completions SHELL` and `harnessd man`: the completion script and the
//! man page on stdout, as [`crate::cli_render`] renders them (the same bytes the
//! Debian package installs). They read no root.

use std::io::Write as _;
use std::process::ExitCode;

use super::error::CliError;

/// Prints the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Result<ExitCode, CliError> {
    print(&crate::cli_render::completions(shell))
}

/// Prints the man page (roff).
pub fn man() -> Result<ExitCode, CliError> {
    print(&crate::cli_render::man_page())
}

fn print(bytes: &[u8]) -> Result<ExitCode, CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
