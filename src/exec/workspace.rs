//! The workspace as tools find it at every start (`serve`, `run`, `sandbox`): a real
//! directory with a usable `.tmp`, and, when harnessd runs as root, reachable by
//! `sandbox.user` so tools can edit what the operator put there — without taking
//! it from its owner: every entry keeps its owner, group and permission bits and
//! gets a POSIX ACL entry for the tool user ([`super::acl`]); directories get it in
//! their default ACL too, so what the operator adds later is reachable as well.
//! Only `.tmp`, which harnessd makes for tools, is owned by the tool user.
//!
//! The workspace is tool-writable, so everything here is done as docs/sandbox.md asks:
//! never by a path a tool could rewrite between two calls. The workspace is opened
//! once (`O_DIRECTORY|O_NOFOLLOW`), and every entry below it is reached relative to
//! its parent's descriptor with no symlink following, opened as an `O_PATH`
//! descriptor, inspected with `fstat` and changed through that same descriptor —
//! so the inode changed is the inode inspected, whatever a tool renames or swaps
//! meanwhile. A swap observed mid-walk (ENOENT, ELOOP, ENOTDIR) skips that entry.
//! Nothing a tool leaves here can stop a start: a planted `.tmp` is moved aside.
//!
//! On a filesystem without ACLs (EOPNOTSUPP on the workspace itself) tools could
//! not write anything the operator owns, so the tree is given to the tool user as
//! before ACLs, through the same descriptors, with a warning naming the
//! filesystem: tools that work matter more to an operator than the owner of files
//! on such a filesystem, and the warning says how to keep owners.
//!
//! When harnessd runs unprivileged, tools run as its own uid and nothing changes;
//! only `.tmp` is checked.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags, openat, renameat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};
use nix::unistd::{Gid, Uid, fchownat};

use super::{TMP_DIR, acl};

/// Entries visited at most in one walk; a workspace beyond it is opened to tools in
/// part (and says so) rather than stalling the start.
const MAX_ENTRIES: usize = 1_000_000;

/// Directory levels descended at most; each level holds one open descriptor.
const MAX_DEPTH: usize = 64;

/// Rounds of "move the planted thing aside, make `.tmp`" before giving up on it
/// for this start (a tool still running may keep replanting it).
const TMP_ATTEMPTS: usize = 4;

/// Prefix of the name a planted `.tmp` is moved aside to.
pub const PLANTED_PREFIX: &str = ".tmp.planted-";

/// Why the workspace cannot be used at all. Problems with single entries are
/// never errors: they become [`WorkspaceChanges::warnings`].
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The workspace directory itself cannot be opened.
    #[error("cannot open the workspace {path}: {error}; create it or fix paths.workspace")]
    Open {
        /// The workspace.
        path: String,
        /// The error (in the message, so not chained a second time).
        error: std::io::Error,
    },
    /// The workspace is a symbolic link, which harnessd does not follow as root.
    #[error(
        "the workspace {path} is a symbolic link; harnessd works in the workspace through \
         descriptors and never follows a link there: set paths.workspace to the directory \
         itself{target}"
    )]
    Symlink {
        /// The workspace.
        path: String,
        /// ` (…)` with where the link points, when readable.
        target: String,
    },
    /// The sandbox user cannot be given access to the workspace directory.
    #[error("cannot give {user} (uid {uid}) access to the workspace {path}: {error}")]
    Access {
        /// The workspace.
        path: String,
        /// `sandbox.user`.
        user: String,
        /// Its uid.
        uid: u32,
        /// The error (in the message, so not chained a second time).
        error: std::io::Error,
    },
}

/// What [`prepare_workspace`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct WorkspaceChanges {
    /// Entries changed: an ACL entry for the sandbox user added (or, on a
    /// filesystem without ACLs, their owner changed), and `.tmp` given to it.
    pub changed: usize,
    /// What an operator should know (a planted `.tmp` moved aside, entries left
    /// as they were); each was also logged with `tracing::warn!`.
    pub warnings: Vec<String>,
}

/// How the sandbox user is given access to the operator's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// A POSIX ACL entry; owners stay.
    Acl,
    /// The filesystem has no ACLs: the entry is given to the user.
    Chown,
}

/// Opens the workspace, makes `.tmp` a directory tools can use (moving a planted
/// one aside) and, as root, gives `user` access to the workspace tree (see the
/// module doc for how). Fails only when the workspace directory itself is
/// unusable.
pub fn prepare_workspace(workspace: &Path, user: &str) -> Result<WorkspaceChanges, WorkspaceError> {
    let ws = open_workspace(workspace)?;
    let owner = tool_owner(user);
    let mut prepared = WorkspaceChanges::default();
    let mut how = Grant::Acl;
    if let Some((uid, gid)) = owner {
        let error = |e| access_error(workspace, user, uid, e);
        let st = fstat(ws.as_fd()).map_err(error)?;
        how = grant_top(ws.as_fd(), &st, (uid, gid), user, &mut prepared).map_err(error)?;
    }
    prepared.changed += ensure_tmp(ws.as_fd(), owner, &mut prepared.warnings);
    if let Some(owner) = owner {
        let walk = walk(ws, owner, how);
        prepared.changed += walk.changed;
        prepared.warnings.extend(walk.warnings(user));
    }
    for w in &prepared.warnings {
        tracing::warn!("workspace {}: {w}", workspace.display());
    }
    Ok(prepared)
}

/// Gives `user` access to the workspace directory itself, and finds out whether
/// its filesystem has ACLs: the rest of the walk does the same as here.
fn grant_top(
    ws: BorrowedFd<'_>,
    st: &FileStat,
    (uid, gid): (Uid, Gid),
    user: &str,
    prepared: &mut WorkspaceChanges,
) -> nix::Result<Grant> {
    if st.st_uid == uid.as_raw() {
        // Already the tool user's (made by a tool, or by harnessd before ACLs).
        return Ok(Grant::Acl);
    }
    match acl::grant(ws, st.st_mode, true, uid.as_raw()) {
        Ok(changed) => {
            prepared.changed += usize::from(changed);
            Ok(Grant::Acl)
        }
        Err(Errno::EOPNOTSUPP) => {
            prepared.warnings.push(format!(
                "its filesystem ({}) does not support POSIX ACLs, so tools can reach the \
                 operator's files only if they own them: the workspace tree is given to {user} \
                 (uid {uid}) and its files change owner; to keep owners, mount it with ACL \
                 support (e.g. ext4, xfs, btrfs, tmpfs) or move the workspace",
                filesystem(st.st_dev)
            ));
            if st.st_gid != gid.as_raw() || st.st_uid != uid.as_raw() {
                chown_fd(ws, uid, gid)?;
                prepared.changed += 1;
            }
            Ok(Grant::Chown)
        }
        Err(e) => Err(e),
    }
}

/// The type and mount point of the filesystem on device `dev`, from
/// `/proc/self/mountinfo`, for the operator.
fn filesystem(dev: u64) -> String {
    let id = format!(
        "{}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let fstype = line.split(" - ").nth(1).and_then(|t| t.split(' ').next());
        if let (Some(&found), Some(&mount), Some(fstype)) = (fields.get(2), fields.get(4), fstype)
            && found == id
        {
            return format!("{fstype} mounted at {mount}");
        }
    }
    format!("device {id}")
}

fn access_error(workspace: &Path, user: &str, uid: Uid, e: Errno) -> WorkspaceError {
    WorkspaceError::Access {
        path: workspace.display().to_string(),
        user: user.to_string(),
        uid: uid.as_raw(),
        error: e.into(),
    }
}

/// The owner tools' files should have: `None` when harnessd is not root (tools
/// keep its uid). Mirrors the helper's drop: an unknown user, or one that is
/// root, means tools run as uid 65534.
fn tool_owner(user: &str) -> Option<(Uid, Gid)> {
    if !Uid::effective().is_root() {
        return None;
    }
    match crate::sandbox::resolve_user(user) {
        Ok((uid, gid)) if !uid.is_root() => Some((uid, gid)),
        _ => crate::sandbox::resolve_user("65534").ok(),
    }
}

fn open_workspace(workspace: &Path) -> Result<OwnedFd, WorkspaceError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    nix::fcntl::open(workspace, flags, Mode::empty()).map_err(|e| {
        let path = workspace.display().to_string();
        let is_link = std::fs::symlink_metadata(workspace).is_ok_and(|m| m.is_symlink());
        if e == Errno::ELOOP || is_link {
            let target = std::fs::read_link(workspace)
                .map(|t| format!(" (the link points to {})", t.display()))
                .unwrap_or_default();
            WorkspaceError::Symlink { path, target }
        } else {
            WorkspaceError::Open {
                path,
                error: e.into(),
            }
        }
    })
}

/// An `O_PATH` descriptor of `name` in `dir`, the link itself if it is one.
fn open_entry(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(dir, name, flags, Mode::empty())
}

/// Changes the owner of the inode `fd` refers to (a link itself, for a link's
/// `O_PATH` descriptor), by descriptor.
fn chown_fd(fd: BorrowedFd<'_>, uid: Uid, gid: Gid) -> nix::Result<()> {
    fchownat(fd, "", Some(uid), Some(gid), AtFlags::AT_EMPTY_PATH)
}

fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// What a planted `.tmp` is, in words.
fn describe(st: &FileStat) -> String {
    let t = file_type(st);
    if t == SFlag::S_IFLNK {
        "a symbolic link".into()
    } else if t == SFlag::S_IFIFO {
        "a FIFO".into()
    } else if t == SFlag::S_IFREG {
        "a regular file".into()
    } else if t == SFlag::S_IFSOCK {
        "a socket".into()
    } else if t == SFlag::S_IFCHR || t == SFlag::S_IFBLK {
        "a device node".into()
    } else {
        format!("a directory owned by uid {}", st.st_uid)
    }
}

/// Makes `.tmp` a directory of the tools' owner (or of ours), moving anything else
/// found there aside. Never fails: what goes wrong is a warning. Returns how many
/// entries changed owner.
fn ensure_tmp(ws: BorrowedFd<'_>, owner: Option<(Uid, Gid)>, warnings: &mut Vec<String>) -> usize {
    let me = Uid::effective().as_raw();
    let tools = owner.map_or(me, |(uid, _)| uid.as_raw());
    for _ in 0..TMP_ATTEMPTS {
        let fd = match open_entry(ws, OsStr::new(TMP_DIR)) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => {
                match mkdirat(ws, TMP_DIR, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => {
                        warnings.push(format!(
                            "cannot create {TMP_DIR}: {e}; tools have no TMPDIR"
                        ));
                        return 0;
                    }
                }
                // Inspect what is there now, through a descriptor.
                continue;
            }
            Err(e) => {
                warnings.push(format!(
                    "cannot inspect {TMP_DIR}: {e}; tools may have no TMPDIR"
                ));
                return 0;
            }
        };
        let st = match fstat(fd.as_fd()) {
            Ok(st) => st,
            Err(e) => {
                warnings.push(format!(
                    "cannot inspect {TMP_DIR}: {e}; tools may have no TMPDIR"
                ));
                return 0;
            }
        };
        let is_dir = file_type(&st) == SFlag::S_IFDIR;
        if is_dir && (st.st_uid == tools || st.st_uid == me) {
            let Some((uid, gid)) = owner else { return 0 };
            if st.st_uid == uid.as_raw() && st.st_gid == gid.as_raw() {
                return 0;
            }
            return match chown_fd(fd.as_fd(), uid, gid) {
                Ok(()) => 1,
                Err(e) => {
                    warnings.push(format!("cannot give {TMP_DIR} to uid {uid}: {e}"));
                    0
                }
            };
        }
        let what = describe(&st);
        match move_aside(ws, OsStr::new(TMP_DIR)) {
            Ok(aside) => warnings.push(format!(
                "{TMP_DIR} was {what}, not a directory harnessd made (a tool may have planted \
                 it); moved it aside to {aside} and made a new {TMP_DIR}"
            )),
            Err(e) => {
                warnings.push(format!(
                    "{TMP_DIR} is {what}, not a directory harnessd made, and cannot be moved \
                     aside: {e}; tools have no TMPDIR until it is removed"
                ));
                return 0;
            }
        }
    }
    warnings.push(format!(
        "{TMP_DIR} kept being replaced while harnessd made it ({TMP_ATTEMPTS} attempts); tools \
         may have no TMPDIR until the next start"
    ));
    0
}

/// Renames `name` in `dir` to `.tmp.planted-<unix seconds>[-n]`, never replacing
/// an entry; returns the new name.
fn move_aside(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<String> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut last = Errno::EEXIST;
    for n in 0..100 {
        let aside = match n {
            0 => format!("{PLANTED_PREFIX}{ts}"),
            n => format!("{PLANTED_PREFIX}{ts}-{n}"),
        };
        match renameat2(
            dir,
            name,
            dir,
            aside.as_str(),
            RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => return Ok(aside),
            Err(Errno::EEXIST) => last = Errno::EEXIST,
            // A filesystem without RENAME_NOREPLACE: check, then rename. The check
            // and the rename race only with a tool creating exactly that name.
            Err(Errno::EINVAL) => {
                match fstatat(dir, aside.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Err(Errno::ENOENT) => {}
                    _ => continue,
                }
                nix::fcntl::renameat(dir, name, dir, aside.as_str())?;
                return Ok(aside);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// What one walk did and left alone.
#[derive(Debug, Default)]
struct Walk {
    changed: usize,
    /// Non-directories with other hard links: they may be files outside the
    /// workspace, so they get no access.
    hard_linked: usize,
    /// Entries on another filesystem than the workspace: left as they are.
    other_fs: usize,
    /// Entries that could not be inspected or changed (not counting swaps).
    failed: usize,
    /// Whether the walk stopped at [`MAX_ENTRIES`] or skipped levels below
    /// [`MAX_DEPTH`].
    cut: bool,
}

impl Walk {
    fn warnings(&self, user: &str) -> Vec<String> {
        let mut w = Vec::new();
        if self.hard_linked > 0 {
            w.push(format!(
                "{} file(s) have other hard links, so they may be files outside the workspace: \
                 {user} was given no access to them (tools cannot write them)",
                self.hard_linked
            ));
        }
        if self.other_fs > 0 {
            w.push(format!(
                "{} entr(ies) on another filesystem (a mount point) left as they are",
                self.other_fs
            ));
        }
        if self.failed > 0 {
            w.push(format!(
                "{} entr(ies) could not be opened to {user}; tools may not be able to write them",
                self.failed
            ));
        }
        if self.cut {
            w.push(format!(
                "the workspace is larger than harnessd walks at start ({MAX_ENTRIES} entries, \
                 {MAX_DEPTH} levels): {user} was given no access to the rest"
            ));
        }
        w
    }
}

/// A directory being walked: its descriptor and the names still to visit.
struct Frame {
    dir: OwnedFd,
    names: Vec<OsString>,
    depth: usize,
}

/// The id of the mount `fd` is on (`statx`, `STATX_MNT_ID`, Linux 5.8+); `None`
/// where the kernel cannot say, in which case only devices are compared.
fn mount_id(fd: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: statx writes only into `buf`, which is a plain C struct it fully
    // owns for the call; the path is a valid NUL-terminated empty string.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::statx(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            &mut buf,
        )
    };
    (r == 0 && buf.stx_mask & libc::STATX_MNT_ID != 0).then_some(buf.stx_mnt_id)
}

/// Gives `owner` access to every entry under `ws` (`how`), depth first,
/// iteratively, through descriptors (see the module doc). Skips `.tmp.planted-*`
/// at the top (kept as found, for the operator), device nodes, non-directories
/// with other hard links and other filesystems.
fn walk(ws: OwnedFd, owner: (Uid, Gid), how: Grant) -> Walk {
    let mut walk = Walk::default();
    let mut budget = MAX_ENTRIES;
    let Ok(dev) = fstat(ws.as_fd()).map(|st| st.st_dev) else {
        walk.failed += 1;
        return walk;
    };
    let mount = mount_id(ws.as_fd());
    let names = list(ws.as_fd(), &mut budget, &mut walk);
    let mut stack = vec![Frame {
        dir: ws,
        names,
        depth: 0,
    }];
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.names.pop() else {
            stack.pop();
            continue;
        };
        let depth = frame.depth;
        if depth == 0 && name.as_bytes().starts_with(PLANTED_PREFIX.as_bytes()) {
            continue;
        }
        let fd = match open_entry(frame.dir.as_fd(), &name) {
            Ok(fd) => fd,
            // Renamed, swapped or removed since it was listed: skipped, not followed.
            Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => continue,
            Err(_) => {
                walk.failed += 1;
                continue;
            }
        };
        let Ok(st) = fstat(fd.as_fd()) else {
            walk.failed += 1;
            continue;
        };
        // A bind mount of the same filesystem has the same device: the mount id
        // tells it (a bind of /etc into the workspace must get nothing).
        if st.st_dev != dev || mount_id(fd.as_fd()) != mount {
            walk.other_fs += 1;
            continue;
        }
        give(fd.as_fd(), &st, owner, how, &mut walk);
        if file_type(&st) != SFlag::S_IFDIR {
            continue;
        }
        if depth + 1 > MAX_DEPTH {
            walk.cut = true;
            continue;
        }
        // Reopened through the descriptor inspected above, never by name again.
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let Ok(dir) = openat(fd.as_fd(), ".", flags, Mode::empty()) else {
            walk.failed += 1;
            continue;
        };
        let names = list(dir.as_fd(), &mut budget, &mut walk);
        stack.push(Frame {
            dir,
            names,
            depth: depth + 1,
        });
    }
    walk
}

/// Gives `uid` access to one entry of the walk, through its `O_PATH` descriptor,
/// unless it must be left alone; counts what happened in `walk`.
fn give(fd: BorrowedFd<'_>, st: &FileStat, (uid, gid): (Uid, Gid), how: Grant, walk: &mut Walk) {
    let kind = file_type(st);
    let done = match how {
        // A tool's own entry needs nothing; a link's own permissions are never
        // checked, and Linux has no ACLs on links.
        Grant::Acl => st.st_uid == uid.as_raw() || kind == SFlag::S_IFLNK,
        Grant::Chown => st.st_uid == uid.as_raw() && st.st_gid == gid.as_raw(),
    };
    // A device node would hand the hardware over; it is never opened to tools.
    let device = kind == SFlag::S_IFCHR || kind == SFlag::S_IFBLK;
    if done || device {
        return;
    }
    // A non-directory with another link may be an inode outside the workspace
    // linked in by a tool; a symlink's own inode is always ours.
    if kind != SFlag::S_IFDIR && kind != SFlag::S_IFLNK && st.st_nlink > 1 {
        walk.hard_linked += 1;
        return;
    }
    let result = match how {
        Grant::Acl => acl::grant(fd, st.st_mode, kind == SFlag::S_IFDIR, uid.as_raw()),
        Grant::Chown => chown_fd(fd, uid, gid).map(|()| true),
    };
    match result {
        Ok(changed) => walk.changed += usize::from(changed),
        Err(_) => walk.failed += 1,
    }
}

/// The names in `dir` (without `.` and `..`), at most `budget` of them in all.
fn list(dir: BorrowedFd<'_>, budget: &mut usize, walk: &mut Walk) -> Vec<OsString> {
    // Read through a duplicate: the stream owns and closes its descriptor.
    let Ok(dup) = dir.try_clone_to_owned() else {
        walk.failed += 1;
        return Vec::new();
    };
    let raw = dup.into_raw_fd();
    // SAFETY: `raw` is a descriptor we own (just duplicated); on success the stream
    // owns it and `closedir` below closes it, on failure we close it.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        // SAFETY: still ours, fdopendir failed.
        unsafe { libc::close(raw) };
        walk.failed += 1;
        return Vec::new();
    }
    let mut names = Vec::new();
    loop {
        // SAFETY: `stream` is a valid open stream used by this thread only; the
        // entry is read before the next readdir call.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if *budget == 0 {
            walk.cut = true;
            break;
        }
        *budget -= 1;
        names.push(OsStr::from_bytes(name).to_os_string());
    }
    // SAFETY: the stream is valid and not used after this.
    unsafe { libc::closedir(stream) };
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::PathBuf;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let dir =
                std::env::temp_dir().join(format!("harnessd-ws-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn owner(p: &Path) -> (u32, u32) {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.uid(), m.gid())
    }

    /// The ACL `name` of `p` (not following a link), if it has one.
    fn acl_of(p: &Path, name: &std::ffi::CStr) -> Option<acl::Acl> {
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        let mut buf = vec![0u8; 4096];
        // SAFETY: NUL-terminated strings; `buf` is valid for its length.
        let n = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        buf.truncate(usize::try_from(n).ok()?);
        Some(acl::Acl::decode(&buf).unwrap())
    }

    /// What uid 65534 is granted on `p` by its access ACL.
    fn granted(p: &Path) -> u16 {
        acl_of(p, acl::ACCESS).map_or(0, |a| a.effective(65534))
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn creates_tmp_and_opens_the_tree_to_the_user_but_never_follows_a_link() {
        if !Uid::effective().is_root() {
            return; // Access only changes as root; CI runs as root.
        }
        let ws = TempDir::new("ws");
        let outside = TempDir::new("outside");
        std::fs::write(outside.0.join("root-only"), "x").unwrap();
        std::fs::create_dir_all(ws.0.join("a/b")).unwrap();
        std::fs::write(ws.0.join("a/b/f"), "x").unwrap();
        std::fs::set_permissions(ws.0.join("a/b/f"), PermissionsExt::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&outside.0, ws.0.join("a/out")).unwrap();
        std::os::unix::fs::symlink(outside.0.join("root-only"), ws.0.join("file-link")).unwrap();
        let p = prepare_workspace(&ws.0, "65534").unwrap();
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        for rel in [".", "a", "a/b", "a/b/f", "a/out", "file-link"] {
            assert_eq!(owner(&ws.0.join(rel)), (0, 0), "{rel} changed owner");
        }
        assert_eq!(owner(&ws.0.join(".tmp")), (65534, 65534));
        for rel in [".", "a", "a/b"] {
            assert_eq!(granted(&ws.0.join(rel)), 0o7, "{rel}");
            let default = acl_of(&ws.0.join(rel), acl::DEFAULT).unwrap();
            assert_eq!(default.effective(65534), 0o7, "{rel}");
        }
        assert_eq!(granted(&ws.0.join("a/b/f")), acl::READ | acl::WRITE);
        // Owner and others as they were; the group bits show the ACL's mask.
        assert_eq!(mode(&ws.0.join("a/b/f")), 0o664);
        assert_eq!(owner(&outside.0), (0, 0));
        for p in [&outside.0, &outside.0.join("root-only")] {
            assert!(acl_of(p, acl::ACCESS).is_none(), "{}", p.display());
        }
        // Nothing left to change the second time.
        assert_eq!(prepare_workspace(&ws.0, "65534").unwrap().changed, 0);
    }

    #[test]
    fn an_operators_acl_entries_are_kept() {
        if !Uid::effective().is_root() {
            return;
        }
        let ws = TempDir::new("ws");
        let f = ws.0.join("shared");
        std::fs::write(&f, "x").unwrap();
        let theirs = acl::Acl::from_mode(0o640).with_user(1234, acl::READ);
        let dir = nix::fcntl::open(&ws.0, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty());
        let fd = open_entry(dir.unwrap().as_fd(), OsStr::new("shared")).unwrap();
        acl::set(fd.as_fd(), acl::ACCESS, &theirs.encode()).unwrap();
        prepare_workspace(&ws.0, "65534").unwrap();
        let now = acl_of(&f, acl::ACCESS).unwrap();
        assert_eq!(now.effective(1234), acl::READ);
        assert_eq!(now.effective(65534), acl::READ | acl::WRITE);
        assert_eq!(mode(&f) & 0o707, 0o600);
    }

    #[test]
    fn a_hard_link_or_a_device_is_never_opened_to_tools_but_a_fifo_is() {
        if !Uid::effective().is_root() {
            return;
        }
        let ws = TempDir::new("ws");
        let outside = TempDir::new("outside");
        let secret = outside.0.join("secret");
        std::fs::write(&secret, "x").unwrap();
        // Same filesystem (both under the temp dir): a link into the workspace.
        std::fs::hard_link(&secret, ws.0.join("linked")).unwrap();
        nix::unistd::mkfifo(&ws.0.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        // /dev/null's numbers: a character device.
        nix::sys::stat::mknod(
            &ws.0.join("null"),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o600),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        let p = prepare_workspace(&ws.0, "65534").unwrap();
        for p in [&secret, &ws.0.join("null"), &ws.0.join("fifo")] {
            assert_eq!(owner(p), (0, 0), "{}", p.display());
        }
        assert!(acl_of(&secret, acl::ACCESS).is_none());
        assert!(acl_of(&ws.0.join("null"), acl::ACCESS).is_none());
        assert_eq!(granted(&ws.0.join("fifo")), acl::READ | acl::WRITE);
        assert!(
            p.warnings.iter().any(|w| w.contains("hard links")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn a_planted_tmp_is_moved_aside_and_replaced() {
        let ws = TempDir::new("ws");
        std::os::unix::fs::symlink("/nonexistent/x", ws.0.join(".tmp")).unwrap();
        let p = prepare_workspace(&ws.0, "65534").unwrap();
        assert!(
            std::fs::symlink_metadata(ws.0.join(".tmp"))
                .unwrap()
                .is_dir()
        );
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        assert!(
            p.warnings[0].contains("a symbolic link"),
            "{}",
            p.warnings[0]
        );
        let aside: Vec<_> = std::fs::read_dir(&ws.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(PLANTED_PREFIX))
            .collect();
        assert_eq!(aside.len(), 1);
        assert!(p.warnings[0].contains(&aside[0]));
        assert_eq!(
            std::fs::read_link(ws.0.join(&aside[0])).unwrap(),
            Path::new("/nonexistent/x")
        );
        // A second plant in the same second gets its own name.
        std::fs::remove_dir(ws.0.join(".tmp")).unwrap();
        std::fs::write(ws.0.join(".tmp"), "file").unwrap();
        let p = prepare_workspace(&ws.0, "65534").unwrap();
        assert!(p.warnings[0].contains("a regular file"), "{:?}", p.warnings);
        assert!(
            std::fs::symlink_metadata(ws.0.join(".tmp"))
                .unwrap()
                .is_dir()
        );
    }

    #[test]
    fn a_symlinked_workspace_is_refused_with_its_target() {
        let real = TempDir::new("real");
        let holder = TempDir::new("holder");
        let link = holder.0.join("ws");
        std::os::unix::fs::symlink(&real.0, &link).unwrap();
        let e = prepare_workspace(&link, "65534").unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert!(e.contains(&real.0.display().to_string()), "{e}");
        assert!(!real.0.join(".tmp").exists());
    }

    #[test]
    fn the_walk_is_bounded_in_depth() {
        if !Uid::effective().is_root() {
            return;
        }
        let ws = TempDir::new("deep");
        let mut p = ws.0.clone();
        for _ in 0..(MAX_DEPTH + 3) {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        let prepared = prepare_workspace(&ws.0, "65534").unwrap();
        assert!(
            prepared.warnings.iter().any(|w| w.contains("larger than")),
            "{:?}",
            prepared.warnings
        );
        assert_eq!(granted(&ws.0.join("d")), 0o7);
        assert_eq!(granted(&p), 0);
    }
}
