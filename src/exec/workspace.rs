//! Ownership of the workspace. When harnessd runs as root, tools run as
//! `sandbox.user`, so the workspace (and its `.tmp`) must belong to that account for
//! tools to create and edit files there; root — the operator — can always edit them.
//! When harnessd runs unprivileged, tools run as the same user and nothing changes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::unistd::Uid;

use super::TMP_DIR;

/// Creates `<workspace>/.tmp` and, as root, gives the workspace tree to `user`
/// (symlinks themselves, never what they point to). Returns how many entries
/// changed owner.
pub fn prepare_workspace(workspace: &Path, user: &str) -> std::io::Result<usize> {
    std::fs::create_dir_all(workspace.join(TMP_DIR))?;
    if !Uid::effective().is_root() {
        return Ok(0);
    }
    // An unknown user is reported by the helper, which refuses to run tools, or
    // under best_effort drops to nobody's uid: the workspace goes to that one.
    let Ok((uid, gid)) =
        crate::sandbox::resolve_user(user).or_else(|_| crate::sandbox::resolve_user("65534"))
    else {
        return Ok(0);
    };
    let (uid, gid) = (uid.as_raw(), gid.as_raw());
    let mut changed = 0;
    let mut stack = vec![workspace.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.uid() != uid || meta.gid() != gid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
            changed += 1;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(changed)
}
