//! `harnessd init [DIR]`: write a root with the default files, keeping any file
//! that already exists.

use std::io::Write;
use std::path::Path;

/// Runs `init`.
pub fn run(dir: &Path) -> anyhow::Result<i32> {
    let written = crate::config::init(dir)
        .map_err(|e| anyhow::anyhow!("cannot write a root into {}: {e}", dir.display()))?;
    let mut out = std::io::stdout().lock();
    if written.is_empty() {
        writeln!(
            out,
            "{} already holds every default file; nothing written",
            dir.display()
        )?;
    }
    for path in written {
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(0)
}
