//! Free space on a filesystem, for the two that must leave room for the audit log:
//! the spool budget of tool output (`exec::budget`) and the reserve the event
//! writer holds (`events::reserve`). It only asks the kernel; it decides nothing.

use std::path::Path;

/// Bytes an unprivileged writer may still use on the filesystem of `dir`
/// (`statvfs` `f_bavail` × `f_frsize`); `None` when it cannot be asked.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64))
}
