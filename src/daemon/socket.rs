//! The control socket's directory (`daemon.socket`'s parent, `run/` by default),
//! the root's lock and the socket itself, handled through the directory's
//! descriptor.
//!
//! At start the directory must be a real directory (a symlink is refused, never
//! followed), owned by the daemon's euid with mode 0700 (0710 and the operators
//! group with `daemon.operators_group`, so members can reach the socket). What is
//! ours to fix is fixed through the `O_DIRECTORY|O_NOFOLLOW` descriptor
//! (`fchown`/`fchmod`), never by name: root takes back a directory another uid was
//! left owning; an unprivileged daemon refuses one it does not own. Once the
//! directory is ours and closed to others, no one else can create, rename or swap
//! entries in it, so the lock and socket names inside it are safe to use; they are
//! still reached relative to the descriptor and without following links.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, Flock, FlockArg, OFlag, openat};
use nix::sys::stat::{FchmodatFlags, Mode, SFlag, fchmod, fchmodat, fstat, fstatat};
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, fchownat, unlinkat};
use tokio::net::UnixListener;

/// Mode of the socket directory without an operators group.
const DIR_MODE: u32 = 0o700;
/// Mode of the socket directory with an operators group: members may traverse it.
const DIR_MODE_GROUP: u32 = 0o710;
/// Mode of the socket without an operators group.
const SOCKET_MODE: u32 = 0o600;
/// Mode of the socket with an operators group.
const SOCKET_MODE_GROUP: u32 = 0o660;

/// How long a held root lock is tried again before another daemon is taken to
/// hold it (see [`SocketDir::lock_at_start`]).
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Why the socket directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// `daemon.socket` names no file in a directory.
    #[error("daemon.socket {0} does not name a socket file in a directory")]
    BadPath(String),
    /// The directory is a symbolic link.
    #[error(
        "the socket directory {0} is a symbolic link; harnessd does not follow it (whoever \
         controls the link would choose where the daemon's socket and lock go): remove the \
         link (harnessd creates the directory) or point daemon.socket at a real directory"
    )]
    Symlink(String),
    /// The directory is shared (sticky, like /tmp).
    #[error(
        "the socket directory {0} is a shared directory (sticky bit, like /tmp); give the \
         socket a directory of its own, e.g. daemon.socket = \"run/harnessd.sock\""
    )]
    Shared(String),
    /// The directory belongs to another user and we are not root.
    #[error(
        "the socket directory {path} belongs to uid {owner}, not to this daemon's uid {me}; \
         remove it or chown it to uid {me}"
    )]
    NotOurs {
        /// The directory.
        path: String,
        /// Its owner.
        owner: u32,
        /// Our euid.
        me: u32,
    },
    /// An operation on the directory or inside it failed.
    #[error("{what} {path}: {error}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path concerned.
        path: String,
        /// The error (in the message, so not chained a second time).
        error: std::io::Error,
    },
    /// Another daemon holds the lock.
    #[error("another harnessd is already serving this root (it holds {0}); stop it first")]
    Locked(String),
}

fn io(what: &'static str, path: &Path, e: impl Into<std::io::Error>) -> SocketError {
    SocketError::Io {
        what,
        path: path.display().to_string(),
        error: e.into(),
    }
}

/// The checked socket directory, held open while the daemon lives.
#[derive(Debug)]
pub struct SocketDir {
    /// The directory, opened `O_DIRECTORY|O_NOFOLLOW`.
    dir: OwnedFd,
    /// Its path, for messages.
    path: PathBuf,
    /// The socket's file name in it.
    socket: String,
    /// The operators group, if any.
    group: Option<Gid>,
}

impl SocketDir {
    /// Creates (if missing), checks and fixes the directory of `socket`; `group` is
    /// the operators group's gid. Returns it and what an operator should know.
    pub fn prepare(
        socket: &Path,
        group: Option<Gid>,
    ) -> Result<(SocketDir, Vec<String>), SocketError> {
        let bad = || SocketError::BadPath(socket.display().to_string());
        let path = socket.parent().ok_or_else(bad)?.to_path_buf();
        let name = socket
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(bad)?
            .to_string();
        if let Some(parent) = path.parent() {
            // The directories above belong to the operator, as the root does.
            std::fs::create_dir_all(parent).map_err(|e| io("cannot create", parent, e))?;
        }
        // mkdir never follows a link in its last component; EEXIST is checked below.
        match nix::unistd::mkdir(&path, Mode::from_bits_truncate(DIR_MODE)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(io("cannot create", &path, e)),
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let dir = nix::fcntl::open(&path, flags, Mode::empty()).map_err(|e| {
            // O_DIRECTORY answers ENOTDIR for a link, O_NOFOLLOW ELOOP: say which.
            let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
            if e == Errno::ELOOP || is_link {
                SocketError::Symlink(path.display().to_string())
            } else {
                io("cannot open", &path, e)
            }
        })?;
        let warnings = fix_dir(&dir, &path, group)?;
        Ok((
            SocketDir {
                dir,
                path,
                socket: name,
                group,
            },
            warnings,
        ))
    }

    /// The socket's path as configured.
    pub fn socket_path(&self) -> PathBuf {
        self.path.join(&self.socket)
    }

    /// Takes the root's lock (`<socket stem>.lock` in the directory) so a second
    /// daemon is refused; held while the returned value lives. Anything but a
    /// regular file there (a planted link) is removed first.
    pub fn lock(&self) -> Result<Flock<File>, SocketError> {
        self.lock_within(std::time::Duration::ZERO)
    }

    /// [`SocketDir::lock`] at the daemon's start, where the lock is tried again
    /// for [`LOCK_PATIENCE`] while another process holds it: a daemon killed a
    /// moment ago can leave it held for a little while by a process it had just
    /// forked, which holds its descriptors until its `exec` closes them. Blocks
    /// the calling thread meanwhile (not for a runtime's worker).
    pub fn lock_at_start(&self) -> Result<Flock<File>, SocketError> {
        self.lock_within(LOCK_PATIENCE)
    }

    fn lock_within(&self, patience: std::time::Duration) -> Result<Flock<File>, SocketError> {
        let name = Path::new(&self.socket).with_extension("lock");
        let path = self.path.join(&name);
        match fstatat(self.dir.as_fd(), &name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if file_type(st.st_mode) != SFlag::S_IFREG => {
                unlinkat(self.dir.as_fd(), &name, UnlinkatFlags::NoRemoveDir)
                    .map_err(|e| io("cannot remove the non-file lock", &path, e))?;
                tracing::warn!("removed {}: it was not a regular file", path.display());
            }
            _ => {}
        }
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(
            self.dir.as_fd(),
            &name,
            flags,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| io("cannot open", &path, e))?;
        let st = fstat(fd.as_fd()).map_err(|e| io("cannot inspect", &path, e))?;
        let me = Uid::effective();
        if st.st_uid != me.as_raw() {
            fchown(fd.as_fd(), Some(me), None).map_err(|e| io("cannot take back", &path, e))?;
        }
        let deadline = std::time::Instant::now() + patience;
        let mut file = File::from(fd);
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(lock),
                Err((back, nix::errno::Errno::EWOULDBLOCK))
                    if std::time::Instant::now() < deadline =>
                {
                    file = back;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(_) => return Err(SocketError::Locked(path.display().to_string())),
            }
        }
    }

    /// Removes a socket left by a crashed daemon (call with the lock held), binds a
    /// new one and sets its mode (and group). Must run inside the tokio runtime.
    pub fn bind(&self) -> Result<UnixListener, SocketError> {
        let path = self.socket_path();
        match unlinkat(
            self.dir.as_fd(),
            self.socket.as_str(),
            UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(io("cannot remove the old socket", &path, e)),
        }
        // Bound through the descriptor's /proc link, so the socket lands in the
        // directory checked above whatever its path now leads to; without /proc,
        // by path (the directory is ours, so that is the same place).
        let via_fd =
            PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd())).join(&self.socket);
        let listener = match UnixListener::bind(&via_fd) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => UnixListener::bind(&path),
            other => other,
        }
        .map_err(|e| io("cannot listen on", &path, e))?;
        // The socket was made 0777 & ~umask, which lets no one else connect
        // (connecting needs write permission); now its final mode and group.
        let mode = if self.group.is_some() {
            SOCKET_MODE_GROUP
        } else {
            SOCKET_MODE
        };
        let name = self.socket.as_str();
        if let Some(gid) = self.group {
            fchownat(
                self.dir.as_fd(),
                name,
                None,
                Some(gid),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| io("cannot give the operators group", &path, e))?;
        }
        // fchmodat cannot refuse links on every kernel; the entry is the socket we
        // just bound in a directory no one else can write.
        fchmodat(
            self.dir.as_fd(),
            name,
            Mode::from_bits_truncate(mode),
            FchmodatFlags::FollowSymlink,
        )
        .map_err(|e| io("cannot set the mode of", &path, e))?;
        Ok(listener)
    }

    /// The device and inode of the socket file now at the socket's name, if a
    /// socket is there: the accept loop compares it with the one it bound, to
    /// notice a socket removed or replaced under the running daemon.
    pub fn socket_inode(&self) -> Option<(u64, u64)> {
        let st = fstatat(
            self.dir.as_fd(),
            self.socket.as_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok()?;
        (file_type(st.st_mode) == SFlag::S_IFSOCK).then_some((st.st_dev, st.st_ino))
    }

    /// When the directory itself was removed under the running daemon (`rm -rf
    /// run/`): makes it again, checked as at start, and takes the root's lock in
    /// it again, so clients can reach the daemon and a second daemon is still
    /// refused. `None` while the directory is there.
    pub fn remade(&self) -> Option<Result<(SocketDir, Flock<File>), SocketError>> {
        let st = fstat(self.dir.as_fd()).ok()?;
        if st.st_nlink != 0 {
            return None;
        }
        Some(
            SocketDir::prepare(&self.socket_path(), self.group).and_then(|(dir, _)| {
                let lock = dir.lock()?;
                Ok((dir, lock))
            }),
        )
    }

    /// Removes the socket (at shutdown).
    pub fn remove_socket(&self) {
        let _ = unlinkat(
            self.dir.as_fd(),
            self.socket.as_str(),
            UnlinkatFlags::NoRemoveDir,
        );
    }
}

fn file_type(mode: u32) -> SFlag {
    SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits())
}

/// Makes the opened directory ours and closed: owner euid, group the operators
/// group (or our egid), mode 0700/0710. Through the descriptor only.
fn fix_dir(dir: &OwnedFd, path: &Path, group: Option<Gid>) -> Result<Vec<String>, SocketError> {
    let mut warnings = Vec::new();
    let st = fstat(dir.as_fd()).map_err(|e| io("cannot inspect", path, e))?;
    if st.st_mode & libc::S_ISVTX != 0 {
        return Err(SocketError::Shared(path.display().to_string()));
    }
    let me = Uid::effective();
    let gid = group.unwrap_or_else(Gid::effective);
    if st.st_uid != me.as_raw() {
        if !me.is_root() {
            return Err(SocketError::NotOurs {
                path: path.display().to_string(),
                owner: st.st_uid,
                me: me.as_raw(),
            });
        }
        let msg = format!(
            "the socket directory {} was owned by uid {}; took it back for uid {} (through its \
             descriptor) and closed it to others",
            path.display(),
            st.st_uid,
            me.as_raw()
        );
        tracing::warn!("{msg}");
        warnings.push(msg);
    }
    if st.st_uid != me.as_raw() || st.st_gid != gid.as_raw() {
        fchown(dir.as_fd(), Some(me), Some(gid)).map_err(|e| {
            io(
                "cannot give to this daemon's user (and the operators group, if set)",
                path,
                e,
            )
        })?;
    }
    let mode = if group.is_some() {
        DIR_MODE_GROUP
    } else {
        DIR_MODE
    };
    if st.st_mode & 0o7777 != mode {
        fchmod(dir.as_fd(), Mode::from_bits_truncate(mode))
            .map_err(|e| io("cannot set the mode of", path, e))?;
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("harnessd-sock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_missing_directory_is_made_owner_only() {
        let root = temp("missing");
        let (dir, warnings) = SocketDir::prepare(&root.join("run/x.sock"), None).unwrap();
        assert!(warnings.is_empty());
        let m = std::fs::symlink_metadata(root.join("run")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700);
        assert_eq!(m.uid(), Uid::effective().as_raw());
        let _lock = dir.lock().unwrap();
        assert!(matches!(dir.lock(), Err(SocketError::Locked(_))));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_symlink_or_a_shared_directory_is_refused_untouched() {
        let root = temp("link");
        let target = root.join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&target, root.join("run")).unwrap();
        let e = SocketDir::prepare(&root.join("run/x.sock"), None).unwrap_err();
        assert!(matches!(e, SocketError::Symlink(_)), "{e}");
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o7777, 0o755);
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = SocketDir::prepare(&target.join("x.sock"), None).unwrap_err();
        assert!(matches!(e, SocketError::Shared(_)), "{e}");
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o7777, 0o1777);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
