//! Replacing a policy file whole: its new content written to a temporary file
//! beside it (created new, with the mode and owner it is to have, synced), which the
//! caller renames over it. One way for every file harnessd rewrites
//! (`settings.json` by `approve --remember`, the MCP lock file).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A fresh name beside `path` for its replacement: `.<name>.<tag>-<pid>-<random>`.
pub fn temp_beside(path: &Path, tag: &str) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(format!(
        ".{name}.{tag}-{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ))
}

/// Writes `bytes` to the new file `tmp` with exactly `mode` (not through the
/// umask) and, when given and we may (only root may give a file away), `owner`;
/// synced before it returns.
pub fn write_new(
    tmp: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)?;
    if let Some((uid, gid)) = owner {
        let _ = std::os::unix::fs::fchown(&f, Some(uid), Some(gid));
    }
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    f.write_all(bytes)?;
    f.sync_all()
}
