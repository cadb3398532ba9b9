//! `sandbox.user`: an account name, or a numeric uid (its gid taken equal), which
//! lets an operator give each deployment its own id without an /etc/passwd entry.

use nix::unistd::{Gid, Uid, User};

/// The uid and gid `sandbox.user` names; the error says what to fix.
pub fn resolve_user(user: &str) -> Result<(Uid, Gid), String> {
    if let Ok(id) = user.parse::<u32>() {
        return Ok((Uid::from_raw(id), Gid::from_raw(id)));
    }
    let account = User::from_name(user)
        .map_err(|e| format!("cannot look up sandbox.user {user:?}: {e}"))?
        .ok_or_else(|| {
            format!("sandbox.user {user:?} does not exist; create it or give a numeric uid")
        })?;
    Ok((account.uid, account.gid))
}
