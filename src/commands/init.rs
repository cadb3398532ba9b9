//! `harnessd init [DIR]`: write a root with the default files, keeping any file
//! that already exists.

use super::error::CliError;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::text::escape_line;

/// Runs `init`.
pub fn run(dir: &Path) -> Result<ExitCode, CliError> {
    let written = crate::config::init(dir).map_err(|e| {
        CliError::Failed(format!(
            "cannot write a root into {}: {e}",
            escape_line(&dir.display().to_string())
        ))
    })?;
    let mut out = std::io::stdout().lock();
    if written.is_empty() {
        writeln!(
            out,
            "{} already holds every default file; nothing written",
            escape_line(&dir.display().to_string())
        )?;
    }
    for path in written {
        writeln!(out, "wrote {}", escape_line(&path.display().to_string()))?;
    }
    Ok(ExitCode::SUCCESS)
}
