//! Whom tools run as: `sandbox.user` resolved, once per root, in the parent.
//!
//! `"auto"` (the default) gives each root a uid of its own, as systemd's
//! DynamicUser does, from the range [`FIRST_UID`]–[`LAST_UID`]: two roots on one
//! host that shared an account (`nobody`) would share every file their tools
//! create, so a tool of one root could chmod or rewrite the other's workspace. The
//! uid is chosen the first time a root daemon loads the root and kept in
//! [`UID_FILE`], so it is stable across restarts and the workspace ACLs granted to
//! it stay valid. The gid is the same number.
//!
//! The choice starts at a value derived from the root's canonical path and skips
//! uids that name an account or a group, that any process holds (real, effective,
//! saved or filesystem uid), or that the host-wide registry ([`REGISTRY_DIR`], a
//! file per uid naming its root, created exclusively under a lock) gives to
//! another root. A registry entry whose root no longer keeps that uid (a removed
//! or re-chosen root) is taken over. When the registry cannot be written (a
//! read-only `/var/lib`), the other checks still apply and [`ToolUser::registry`]
//! says what is missing, which `check` prints.
//!
//! Everything that needs the tool uid — the helper's privilege drop, the
//! workspace ACLs and the control socket's refusal — reads
//! [`ToolUser::user`] from the [`super::Loaded`] snapshot, so they cannot
//! disagree. An account name (`"nobody"`) is passed on as written. A daemon that
//! is not root resolves `"auto"` to its own uid: tools keep it, as they always do
//! then.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use nix::unistd::{Gid, Group, Uid, User};
use sha2::{Digest, Sha256};

/// The `sandbox.user` value that asks for a uid of the root's own.
pub const AUTO: &str = "auto";

/// Where a root keeps its uid, relative to the root: `config/` is always in the
/// root (unlike `paths.transcripts`), belongs to the operator and is outside the
/// tools' default write set; the file is also refused unless the daemon's user
/// owns it and nobody else may write it.
pub const UID_FILE: &str = "config/sandbox-uid";

/// The host-wide registry: one file per uid given to a root, naming that root.
pub const REGISTRY_DIR: &str = "/var/lib/harnessd/uids";

/// First uid `"auto"` may choose (systemd's DynamicUser range).
pub const FIRST_UID: u32 = 61184;

/// Last uid `"auto"` may choose.
pub const LAST_UID: u32 = 65519;

/// `sandbox.user` as resolved for one root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolUser {
    /// What the helper drops to and the workspace and socket checks look up: the
    /// uid as a decimal number for `"auto"`, the account as written otherwise.
    pub user: String,
    /// Where an `"auto"` uid is kept; `None` for an account name or a daemon
    /// that is not root.
    pub kept_in: Option<PathBuf>,
    /// How collisions with other roots are ruled out, in words (for `check`);
    /// `None` when there is no uid of the root's own.
    pub registry: Option<String>,
}

/// Why `"auto"` could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ToolUserError {
    /// The file keeping the uid exists but cannot be trusted or read.
    #[error("{}: {message}; remove it to let harnessd choose a uid again", path.display())]
    Kept {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The uid could not be written down.
    #[error("cannot keep the sandbox uid in {}: {source}", path.display())]
    Write {
        /// The file or directory written.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Another root on this host keeps the same uid (a copied root, say).
    #[error(
        "uid {uid} kept in {} is also the uid of the root {other} ({REGISTRY_DIR}/{uid}); \
         roots must not share a tool uid: remove {} so this root chooses its own",
        path.display(), path.display()
    )]
    Shared {
        /// The uid.
        uid: u32,
        /// This root's file.
        path: PathBuf,
        /// The other root.
        other: String,
    },
    /// Every uid of the range is taken.
    #[error(
        "no free uid left in {FIRST_UID}–{LAST_UID} for sandbox.user \"auto\"; name an account instead"
    )]
    Exhausted,
}

/// Resolves `user` (the `sandbox.user` setting) for the root at `root`
/// (canonical): see the module doc.
pub fn resolve_tool_user(root: &Path, user: &str) -> Result<ToolUser, ToolUserError> {
    if user != AUTO {
        return Ok(ToolUser {
            user: user.to_string(),
            kept_in: None,
            registry: None,
        });
    }
    let me = Uid::effective();
    if !me.is_root() {
        // Not root: there is nothing to drop to, and a file written here would
        // promise a uid tools never get.
        return Ok(ToolUser {
            user: me.to_string(),
            kept_in: None,
            registry: None,
        });
    }
    resolve_auto(root, Path::new(REGISTRY_DIR), &in_use_on_host)
}

/// `"auto"` as root, with the registry at `registry` and `in_use` saying which
/// uids the host already uses (parameters so tests can give their own).
pub(crate) fn resolve_auto(
    root: &Path,
    registry: &Path,
    in_use: &dyn Fn() -> HashSet<u32>,
) -> Result<ToolUser, ToolUserError> {
    let path = root.join(UID_FILE);
    let reg = Registry::open(registry);
    let uid = match read_kept(&path)? {
        Some(uid) => {
            if let Ok(reg) = &reg {
                match reg.claim(uid, root)? {
                    Claim::Ours => {}
                    Claim::Other(other) => return Err(ToolUserError::Shared { uid, path, other }),
                }
            }
            uid
        }
        None => {
            let uid = choose(root, reg.as_ref().ok(), &in_use())?;
            match keep(&path, uid)? {
                // Another process of this root wrote it first: theirs stands, and
                // the uid claimed here is given back.
                Some(theirs) if theirs != uid => {
                    if let Ok(reg) = &reg {
                        reg.release(uid, root);
                    }
                    theirs
                }
                _ => uid,
            }
        }
    };
    let registry = match &reg {
        Ok(_) => format!("registered in {}/{uid}", registry.display()),
        Err(e) => format!(
            "host registry {} unusable ({e}): collisions with other roots are ruled out only \
             by the account and process checks made when the uid was chosen",
            registry.display()
        ),
    };
    Ok(ToolUser {
        user: uid.to_string(),
        kept_in: Some(path),
        registry: Some(registry),
    })
}

/// The uid kept in `path`, `None` when there is none yet.
fn read_kept(path: &Path) -> Result<Option<u32>, ToolUserError> {
    let kept = |message: String| ToolUserError::Kept {
        path: path.to_path_buf(),
        message,
    };
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(kept(format!("cannot open it: {e}"))),
    };
    let meta = file.metadata().map_err(|e| kept(e.to_string()))?;
    // Whoever could write this file would choose the uid tools run as.
    if !meta.is_file() || meta.uid() != Uid::effective().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(kept(format!(
            "must be a regular file owned by uid {} and writable by it alone",
            Uid::effective()
        )));
    }
    let mut text = String::new();
    Read::by_ref(&mut file)
        .take(64)
        .read_to_string(&mut text)
        .map_err(|e| kept(e.to_string()))?;
    match text.trim().parse::<u32>() {
        Ok(uid) if (FIRST_UID..=LAST_UID).contains(&uid) => Ok(Some(uid)),
        _ => Err(kept(format!(
            "holds {:?}, not a uid in {FIRST_UID}–{LAST_UID}",
            text.trim()
        ))),
    }
}

/// Writes `uid` to `path` without ever replacing a file there: a temporary file
/// is written whole, then hard-linked into place (which fails if `path` exists).
/// Returns the uid a concurrent writer kept instead, if one did.
fn keep(path: &Path, uid: u32) -> Result<Option<u32>, ToolUserError> {
    let write_err = |p: &Path, source| ToolUserError::Write {
        path: p.to_path_buf(),
        source,
    };
    let tmp = path.with_file_name(format!(".sandbox-uid.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| write_err(&tmp, e))?;
    let written = file
        .write_all(format!("{uid}\n").as_bytes())
        .and_then(|()| file.sync_all());
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_parent(path);
            Ok(None)
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => read_kept(path),
        Err(e) => Err(write_err(path, e)),
    }
}

/// Makes a new directory entry durable; a failure only loses durability.
fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent().and_then(|d| File::open(d).ok()) {
        let _ = dir.sync_all();
    }
}

/// The first free uid from where `root`'s path hashes to, claimed in `reg`.
fn choose(
    root: &Path,
    reg: Option<&Registry>,
    in_use: &HashSet<u32>,
) -> Result<u32, ToolUserError> {
    let span = LAST_UID - FIRST_UID + 1;
    let start = start_offset(root, span);
    for i in 0..span {
        let uid = FIRST_UID + (start + i) % span;
        if in_use.contains(&uid) || has_account(uid) {
            continue;
        }
        match reg.map(|r| r.claim(uid, root)).transpose()? {
            None | Some(Claim::Ours) => return Ok(uid),
            Some(Claim::Other(_)) => {}
        }
    }
    Err(ToolUserError::Exhausted)
}

/// Where the search starts for `root`: a hash of its path, so roots usually
/// start apart and a root removed and recreated at the same path tends to get
/// its old uid back.
fn start_offset(root: &Path, span: u32) -> u32 {
    let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // The remainder is below `span`, a u32.
    u32::try_from(u64::from_le_bytes(first) % u64::from(span)).unwrap_or(0)
}

/// Whether `uid` names an account, or the same number a group (tools get it
/// as their gid).
fn has_account(uid: u32) -> bool {
    // A lookup that fails says nothing: treat the uid as taken.
    !matches!(User::from_uid(Uid::from_raw(uid)), Ok(None))
        || !matches!(Group::from_gid(Gid::from_raw(uid)), Ok(None))
}

/// Every uid a process on this host holds, from the `Uid:` lines of
/// `/proc/*/status` (real, effective, saved, filesystem).
fn in_use_on_host() -> HashSet<u32> {
    let mut uids = HashSet::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return uids;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        if let Some(line) = status.lines().find(|l| l.starts_with("Uid:")) {
            uids.extend(
                line.trim_start_matches("Uid:")
                    .split_whitespace()
                    .filter_map(|v| v.parse::<u32>().ok()),
            );
        }
    }
    uids
}

/// The host-wide registry, locked while this process uses it.
struct Registry {
    dir: PathBuf,
    _lock: Flock<File>,
}

/// Whose a registry entry is.
enum Claim {
    /// This root's (now, or already).
    Ours,
    /// The root named.
    Other(String),
}

impl Registry {
    /// Creates and locks the registry directory.
    fn open(dir: &Path) -> Result<Registry, String> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| e.to_string())?;
        // A registry that exists on a read-only filesystem (ProtectSystem=strict
        // without /var/lib/harnessd writable) cannot take a claim: unusable, not
        // full.
        nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).map_err(|e| e.to_string())?;
        let file = File::open(dir).map_err(|e| e.to_string())?;
        let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e.to_string())?;
        // A registry anyone could write would let them hand out uids.
        let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
        if !meta.is_dir() || meta.uid() != Uid::effective().as_raw() || meta.mode() & 0o022 != 0 {
            return Err(
                "not a directory owned by the daemon's user and writable by it alone".into(),
            );
        }
        Ok(Registry {
            dir: dir.to_path_buf(),
            _lock: lock,
        })
    }

    /// Claims `uid` for `root`: a new entry, this root's own, or a stale one
    /// taken over (its root no longer keeps that uid). `Err`: the registry could
    /// be opened but not written (a full disk), which says nothing about the uid.
    fn claim(&self, uid: u32, root: &Path) -> Result<Claim, ToolUserError> {
        let entry = self.dir.join(uid.to_string());
        let failed = |source| ToolUserError::Write {
            path: entry.clone(),
            source,
        };
        let mine = root.display().to_string();
        for _ in 0..2 {
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&entry)
            {
                Ok(mut f) => {
                    let written = f
                        .write_all(format!("{mine}\n").as_bytes())
                        .and_then(|()| f.sync_all());
                    if let Err(e) = written {
                        let _ = std::fs::remove_file(&entry);
                        return Err(failed(e));
                    }
                    sync_parent(&entry);
                    return Ok(Claim::Ours);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(failed(e)),
            }
            let other = std::fs::read_to_string(&entry).unwrap_or_default();
            let other = other.trim_end_matches('\n');
            if other == mine {
                return Ok(Claim::Ours);
            }
            let other_keeps = read_kept(&Path::new(other).join(UID_FILE));
            if !other.is_empty() && matches!(other_keeps, Ok(Some(u)) if u == uid) {
                return Ok(Claim::Other(other.to_string()));
            }
            // Stale: its root is gone or chose again. Taken over under the lock.
            std::fs::remove_file(&entry).map_err(failed)?;
        }
        // Removed, then found again: someone writes the registry without the lock.
        Err(failed(std::io::Error::other(
            "the entry reappeared while it was taken over",
        )))
    }

    /// Gives back an entry this root claimed but does not keep.
    fn release(&self, uid: u32, root: &Path) {
        let entry = self.dir.join(uid.to_string());
        let named = std::fs::read_to_string(&entry).unwrap_or_default();
        if named.trim_end_matches('\n') == root.display().to_string() {
            let _ = std::fs::remove_file(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system temp dir, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let p = std::env::temp_dir().join(format!("hd-tooluser-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(p.join("config")).unwrap();
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn nothing() -> HashSet<u32> {
        HashSet::new()
    }

    #[test]
    fn an_account_name_is_passed_on_as_written() {
        let t = resolve_tool_user(Path::new("/nonexistent"), "nobody").unwrap();
        assert_eq!(t.user, "nobody");
        assert_eq!(t.kept_in, None);
    }

    #[test]
    fn auto_is_kept_in_the_root_and_read_back() {
        let (root, reg) = (Dir::new("kept-root"), Dir::new("kept-reg"));
        let first = resolve_auto(&root.0, &reg.0, &nothing).unwrap();
        let uid: u32 = first.user.parse().unwrap();
        assert!((FIRST_UID..=LAST_UID).contains(&uid));
        let kept = std::fs::read_to_string(root.0.join(UID_FILE)).unwrap();
        assert_eq!(kept, format!("{uid}\n"));
        // Read back, whatever the host uses now.
        let all = || (FIRST_UID..=LAST_UID).collect();
        assert_eq!(resolve_auto(&root.0, &reg.0, &all).unwrap(), first);
    }

    #[test]
    fn two_roots_never_share_a_uid_even_when_they_hash_alike() {
        let reg = Dir::new("two-reg");
        let roots: Vec<Dir> = (0..5).map(|i| Dir::new(&format!("two-{i}"))).collect();
        // Every uid but two is in use: the roots must split those two, and the
        // third must be refused rather than share.
        let free = [FIRST_UID + 7, LAST_UID - 3];
        let busy = || {
            (FIRST_UID..=LAST_UID)
                .filter(|u| !free.contains(u))
                .collect()
        };
        let a = resolve_auto(&roots[0].0, &reg.0, &busy).unwrap().user;
        let b = resolve_auto(&roots[1].0, &reg.0, &busy).unwrap().user;
        assert_ne!(a, b);
        assert!(matches!(
            resolve_auto(&roots[2].0, &reg.0, &busy),
            Err(ToolUserError::Exhausted)
        ));
    }

    #[test]
    fn a_copied_root_is_refused_and_a_stale_entry_taken_over() {
        let reg = Dir::new("copy-reg");
        let (a, b) = (Dir::new("copy-a"), Dir::new("copy-b"));
        let uid = resolve_auto(&a.0, &reg.0, &nothing).unwrap().user;
        // `cp -a` of a root copies its uid file.
        std::fs::copy(a.0.join(UID_FILE), b.0.join(UID_FILE)).unwrap();
        let e = resolve_auto(&b.0, &reg.0, &nothing).unwrap_err();
        assert!(matches!(e, ToolUserError::Shared { .. }), "{e}");
        // Once the first root is gone, its entry is stale and the copy may keep it.
        std::fs::remove_file(a.0.join(UID_FILE)).unwrap();
        assert_eq!(resolve_auto(&b.0, &reg.0, &nothing).unwrap().user, uid);
    }

    #[test]
    fn a_kept_file_others_can_write_is_refused() {
        let (root, reg) = (Dir::new("mode-root"), Dir::new("mode-reg"));
        let path = root.0.join(UID_FILE);
        std::fs::write(&path, "61200\n").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .unwrap();
        let e = resolve_auto(&root.0, &reg.0, &nothing).unwrap_err();
        assert!(e.to_string().contains("writable by it alone"), "{e}");
        std::fs::write(&path, "0\n").unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let e = resolve_auto(&root.0, &reg.0, &nothing).unwrap_err();
        assert!(e.to_string().contains("not a uid in"), "{e}");
    }

    #[test]
    fn an_unusable_registry_falls_back_and_says_so() {
        let root = Dir::new("noreg-root");
        let not_a_dir = root.0.join("config/file");
        std::fs::write(&not_a_dir, "").unwrap();
        let t = resolve_auto(&root.0, &not_a_dir, &nothing).unwrap();
        assert!(t.registry.unwrap().contains("unusable"));
    }
}
