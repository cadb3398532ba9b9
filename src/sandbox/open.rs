//! Opening exactly the path the daemon judged, in the helper (docs/policy.md).
//!
//! The daemon resolves a file tool's path (links followed, `/proc` refused) and
//! judges the result: an absolute path with no link in it. Here that path is opened
//! with `openat2(RESOLVE_NO_SYMLINKS)` — no symbolic link, magic or not, is followed
//! anywhere in it — so the file opened is the one reached by those very names, and
//! "opened == judged" holds by construction rather than by a check after the fact.
//! A link swapped in after the decision (a file replaced by a link, a directory
//! planted as one) makes the open fail with ELOOP, reported as "the path changed
//! after it was checked", and nothing is read or written.
//!
//! `write_file` creates missing parent directories one at a time, each `mkdirat`
//! and open relative to the descriptor of the directory above it, never by name
//! from the root, so a link planted between two steps is refused the same way.
//!
//! This module decides nothing about policy: it refuses a name that no longer
//! leads where it did, and leaves what may be touched to the daemon's rules and to
//! Landlock.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{Mode, mkdirat};

/// How a judged file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only (`read_file`).
    Read,
    /// Read and write in place (`edit_file`).
    ReadWrite,
    /// A directory to list (`list_dir`).
    Directory,
    /// Created if missing, truncated, with missing parents created (`write_file`).
    Create,
}

/// No link of any kind is followed: the open reaches the judged names or fails.
fn resolve() -> ResolveFlag {
    ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

fn how(flags: OFlag) -> OpenHow {
    // openat2 refuses a mode without O_CREAT; the umask still applies to it.
    let mode = if flags.contains(OFlag::O_CREAT) {
        0o666
    } else {
        0
    };
    // openat2 refuses O_PATH with anything but O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW.
    let tty = if flags.contains(OFlag::O_PATH) {
        OFlag::empty()
    } else {
        OFlag::O_NOCTTY
    };
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | tty)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(resolve())
}

/// The message for the model when a judged name now leads through a link.
fn changed(path: &Path) -> String {
    format!(
        "the path changed after it was checked: {} now leads through a symbolic link, which \
         could point somewhere the policy did not allow, so nothing was read or written. Look \
         at it with list_dir (links end with '@') and call the tool again with the path the \
         link points to",
        path.display()
    )
}

/// The message for the model when `op` on `path` failed with `e`.
pub fn failed(op: &str, path: &Path, e: Errno) -> String {
    let hint = match e {
        Errno::ELOOP => return changed(path),
        Errno::ENOENT => " (check the path with list_dir)",
        Errno::EACCES | Errno::EPERM => {
            " (the sandbox does not allow this path; use a path inside the workspace)"
        }
        Errno::ENOSYS => {
            " (this kernel lacks openat2, Linux 5.6+, which file tools need to open exactly \
             the path that was checked)"
        }
        _ => "",
    };
    format!(
        "cannot {op} {}: {}{hint}",
        path.display(),
        std::io::Error::from(e)
    )
}

/// Refuses anything but an absolute path of plain names: what the daemon judges.
fn check_judged(path: &Path) -> Result<(), String> {
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(format!(
            "internal error: {} is not a judged path (absolute, normalised); call the tool again",
            path.display()
        ))
    }
}

/// Opens the judged `path` for `access`, following no link; see the module header.
/// `op` names the operation in error messages ("read", "list" …).
pub fn open_judged(path: &Path, access: Access, op: &str) -> Result<File, String> {
    check_judged(path)?;
    let fd = match access {
        Access::Read => openat2(AT_FDCWD, path, how(OFlag::O_RDONLY)),
        Access::ReadWrite => openat2(AT_FDCWD, path, how(OFlag::O_RDWR)),
        Access::Directory => openat2(AT_FDCWD, path, how(OFlag::O_RDONLY | OFlag::O_DIRECTORY)),
        Access::Create => return create(path, op),
    };
    fd.map(File::from).map_err(|e| failed(op, path, e))
}

/// `write_file`'s open: parents made, then the file created or truncated, each
/// step relative to the directory descriptor above it.
fn create(path: &Path, op: &str) -> Result<File, String> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(format!(
            "cannot {op} {}: it is a directory; give a file path",
            path.display()
        ));
    };
    let dir = make_parents(parent)?;
    openat2(
        &dir,
        name,
        how(OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC),
    )
    .map(File::from)
    .map_err(|e| failed(op, path, e))
}

/// Opens the directory `dir` (absolute, judged), creating what is missing; returns
/// an `O_PATH` descriptor of it.
fn make_parents(dir: &Path) -> Result<OwnedFd, String> {
    let open_dir = |at: &OwnedFd, name: &std::ffi::OsStr| {
        openat2(at, name, how(OFlag::O_PATH | OFlag::O_DIRECTORY))
    };
    let mut at = PathBuf::from("/");
    let mut fd = openat2(AT_FDCWD, "/", how(OFlag::O_PATH | OFlag::O_DIRECTORY))
        .map_err(|e| failed("open directory", &at, e))?;
    for c in dir.components() {
        let Component::Normal(name) = c else {
            continue;
        };
        at.push(name);
        let next = match open_dir(&fd, name) {
            Err(Errno::ENOENT) => {
                match mkdirat(&fd, name, Mode::from_bits_truncate(0o777)) {
                    // Made here, or by someone else meanwhile: either way, open it
                    // without following a link.
                    Ok(()) | Err(Errno::EEXIST) => open_dir(&fd, name),
                    Err(e) => return Err(failed("create directory", &at, e)),
                }
            }
            other => other,
        };
        fd = next.map_err(|e| failed("open directory", &at, e))?;
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::symlink;

    use super::*;

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir =
                std::env::temp_dir().join(format!("harnessd-open-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("docs")).unwrap();
            std::fs::create_dir_all(dir.join("secrets")).unwrap();
            std::fs::write(dir.join("secrets/k"), "the secret").unwrap();
            Dir(dir.canonicalize().unwrap())
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_plain_path_opens() {
        let d = Dir::new("plain");
        let mut text = String::new();
        open_judged(&d.0.join("secrets/k"), Access::Read, "read")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "the secret");
        open_judged(&d.0.join("docs/a/b/c.md"), Access::Create, "write").unwrap();
        assert!(d.0.join("docs/a/b/c.md").is_file());
        open_judged(&d.0.join("docs"), Access::Directory, "list").unwrap();
    }

    #[test]
    fn a_file_swapped_for_a_link_is_refused() {
        let d = Dir::new("swap");
        symlink("../secrets/k", d.0.join("docs/r.md")).unwrap();
        for access in [Access::Read, Access::ReadWrite, Access::Create] {
            let e = open_judged(&d.0.join("docs/r.md"), access, "open").unwrap_err();
            assert!(
                e.contains("changed after it was checked"),
                "{access:?}: {e}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(d.0.join("secrets/k")).unwrap(),
            "the secret",
            "the write truncated through the link"
        );
    }

    #[test]
    fn a_dangling_link_is_not_created_through() {
        let d = Dir::new("dangling");
        symlink("../secrets/authorized_keys", d.0.join("docs/readme.md")).unwrap();
        let e = open_judged(&d.0.join("docs/readme.md"), Access::Create, "write").unwrap_err();
        assert!(e.contains("changed after it was checked"), "{e}");
        assert!(std::fs::symlink_metadata(d.0.join("secrets/authorized_keys")).is_err());
    }

    #[test]
    fn a_directory_planted_as_a_link_is_refused_for_parents_and_listing() {
        let d = Dir::new("parents");
        symlink("../secrets", d.0.join("docs/new")).unwrap();
        let e = open_judged(&d.0.join("docs/new/sub/w.md"), Access::Create, "write").unwrap_err();
        assert!(e.contains("changed after it was checked"), "{e}");
        assert!(!d.0.join("secrets/sub").exists());
        let e = open_judged(&d.0.join("docs/new"), Access::Directory, "list").unwrap_err();
        assert!(e.contains("changed after it was checked"), "{e}");
        // A link higher up the judged path counts as much as the last name.
        symlink(d.0.join("secrets"), d.0.join("alias")).unwrap();
        let e = open_judged(&d.0.join("alias/k"), Access::Read, "read").unwrap_err();
        assert!(e.contains("changed after it was checked"), "{e}");
    }

    #[test]
    fn magic_links_and_unjudged_paths_are_refused() {
        let e = open_judged(Path::new("/proc/self/cwd"), Access::Directory, "list").unwrap_err();
        assert!(e.contains("changed after it was checked"), "{e}");
        for bad in ["relative/k", "/a/../b", "./a"] {
            let e = open_judged(Path::new(bad), Access::Read, "read").unwrap_err();
            assert!(e.contains("not a judged path"), "{bad}: {e}");
        }
    }
}
