//! Paths of file tools, judged where they really lead (docs/policy.md).
//!
//! A tool's path is resolved against the workspace, then walked one component at a
//! time the way the kernel would: `.` and `//` dropped, `..` taken on the resolved
//! prefix, and every symbolic link followed — dangling ones and chains too, up to the
//! kernel's 40 — so `docs/readme.md -> ../secrets/authorized_keys` is judged as
//! `workspace/secrets/authorized_keys` even though that file does not exist yet.
//! Whatever does not exist is kept as written, as a later create would make it.
//!
//! Links into `/proc` are refused outright: there a name means something different
//! in every process (`/proc/self/cwd` is the daemon's directory here and the tool's
//! in the tool process), so no resolution done in the daemon can stand for the one
//! the tool would do.
//!
//! The walk happens in the daemon, by name, and only decides: the result is an
//! absolute path free of links, which the helper opens without following any link
//! (see `sandbox::files`), so a link swapped in after the decision makes the open
//! fail instead of redirecting it. Nothing here opens, creates or changes a file.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Most symbolic links one path may pass through (the kernel's `MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

/// Longest path a tool may give, in bytes (the kernel's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// Why a tool's path is refused before any rule is read. The messages are written
/// for the model: what is wrong, and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path holds a NUL byte, which no file name can.
    #[error("the path contains a NUL byte, which no file name can; send the path without it")]
    Nul,
    /// The path is longer than the kernel accepts.
    #[error(
        "the path is too long ({len} bytes; the limit is {MAX_PATH_BYTES}); use a shorter path"
    )]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The path leads into `/proc`, directly or through a link.
    #[error(
        "refused: {raw:?} leads into {at}, a proc filesystem. File tools do not open anything \
         under /proc, where a name means something different in every process. Use the file's \
         real path (inside the workspace) instead"
    )]
    Proc {
        /// The path as the model gave it.
        raw: String,
        /// Where the walk entered /proc.
        at: String,
    },
    /// More links than the kernel would follow: a loop, most likely.
    #[error(
        "refused: {raw:?} passes through more than {MAX_LINKS} symbolic links (a loop?). \
         Fix or remove the links (list_dir marks them with '@') and call the tool again"
    )]
    TooManyLinks {
        /// The path as the model gave it.
        raw: String,
    },
    /// A component could not be examined, so where the path leads is unknown.
    #[error(
        "cannot resolve {raw:?}: examining {at} failed: {reason}. Check the path with list_dir"
    )]
    Unresolvable {
        /// The path as the model gave it.
        raw: String,
        /// The component that could not be examined.
        at: String,
        /// The operating system's reason.
        reason: String,
    },
}

impl PathError {
    /// The short reason recorded as the rule of the `deny` decision it causes.
    pub fn rule(&self) -> &'static str {
        match self {
            PathError::Nul => "path refused: NUL byte",
            PathError::TooLong { .. } => "path refused: too long",
            PathError::Proc { .. } => "path refused: through /proc",
            PathError::TooManyLinks { .. } => "path refused: too many symbolic links",
            PathError::Unresolvable { .. } => "path refused: cannot be resolved",
        }
    }
}

/// A file tool's path as judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgedPath {
    /// Absolute, normalised, and free of symbolic links when it was judged: the
    /// one name the helper may open.
    pub absolute: PathBuf,
    /// What rules match: relative to the root when inside it (`workspace/secrets/k`,
    /// `.` for the root itself), absolute otherwise.
    pub subject: String,
}

/// Where a walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    /// The resolved absolute path. Past a point in `/proc` it is only folded.
    pub path: PathBuf,
    /// Where the walk entered `/proc` (or another procfs mount), if it did.
    pub proc_at: Option<PathBuf>,
}

/// Why a walk stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkError {
    /// More than [`MAX_LINKS`] links.
    TooManyLinks,
    /// `lstat`, `readlink` or `statfs` failed on this path for another reason than
    /// its absence.
    Io(PathBuf, String),
}

/// `raw` resolved against the workspace unless absolute. No normalisation.
pub fn resolve_in_workspace(workspace: &Path, raw: &str) -> PathBuf {
    crate::config::resolve(workspace, raw)
}

/// Judges a file tool's path: see the module header.
pub fn judge(root: &Path, workspace: &Path, raw: &str) -> Result<JudgedPath, PathError> {
    if raw.contains('\0') {
        return Err(PathError::Nul);
    }
    if raw.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong { len: raw.len() });
    }
    let walk = walk(&resolve_in_workspace(workspace, raw)).map_err(|e| match e {
        WalkError::TooManyLinks => PathError::TooManyLinks { raw: raw.into() },
        WalkError::Io(at, reason) => PathError::Unresolvable {
            raw: raw.into(),
            at: at.display().to_string(),
            reason,
        },
    })?;
    if let Some(at) = walk.proc_at {
        return Err(PathError::Proc {
            raw: raw.into(),
            at: at.display().to_string(),
        });
    }
    Ok(JudgedPath {
        subject: relative_to_root(root, &walk.path),
        absolute: walk.path,
    })
}

/// `path` relative to `root` when inside it, absolute otherwise.
fn relative_to_root(root: &Path, path: &Path) -> String {
    let root = walk(root).map_or_else(|_| root.to_path_buf(), |w| w.path);
    match path.strip_prefix(&root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// Whether `path` is `/proc` or below it, by name.
fn in_proc(path: &Path) -> bool {
    path.starts_with("/proc")
}

/// Whether the directory at `path` is on a procfs, wherever it is mounted.
fn is_procfs(path: &Path) -> Result<bool, WalkError> {
    use nix::sys::statfs::{PROC_SUPER_MAGIC, statfs};
    statfs(path)
        .map(|s| s.filesystem_type() == PROC_SUPER_MAGIC)
        .map_err(|e| WalkError::Io(path.to_path_buf(), std::io::Error::from(e).to_string()))
}

/// Pushes `path`'s components on the stack `todo` (last component at the bottom),
/// dropping `.` and the root, which the caller handles.
fn push_components(todo: &mut Vec<OsString>, path: &Path) {
    for c in path.components().rev() {
        match c {
            Component::Normal(n) => todo.push(n.to_os_string()),
            Component::ParentDir => todo.push("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

/// Resolves an absolute path component by component, following every link: see
/// the module header. Bounded: at most [`MAX_LINKS`] links, each adding at most
/// the components its target names.
pub fn walk(start: &Path) -> Result<Walk, WalkError> {
    let mut todo = Vec::new();
    push_components(&mut todo, start);
    let mut done = PathBuf::from("/");
    let mut links = 0;
    let mut proc_at: Option<PathBuf> = None;
    // The device of the last directory seen: a mount is crossed where it changes,
    // and only there can a procfs begin.
    let mut last_dev = None;
    while let Some(name) = todo.pop() {
        if name == ".." {
            done.pop();
            continue;
        }
        done.push(&name);
        if proc_at.is_some() {
            continue;
        }
        if in_proc(&done) {
            proc_at = Some(done.clone());
            continue;
        }
        let meta = match std::fs::symlink_metadata(&done) {
            Ok(meta) => meta,
            // Missing (or under a non-directory): the rest is taken as written, as
            // a create would make it; the open will say if it cannot be.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                continue;
            }
            Err(e) => return Err(WalkError::Io(done, e.to_string())),
        };
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(WalkError::TooManyLinks);
            }
            let target = std::fs::read_link(&done)
                .map_err(|e| WalkError::Io(done.clone(), e.to_string()))?;
            done.pop();
            if target.has_root() {
                done = PathBuf::from("/");
            }
            push_components(&mut todo, &target);
        } else if meta.is_dir() && last_dev != Some(meta.dev()) {
            if is_procfs(&done)? {
                proc_at = Some(done.clone());
            }
            last_dev = Some(meta.dev());
        }
    }
    Ok(Walk {
        path: done,
        proc_at,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A root with `workspace/{secrets,x}` in a fresh temporary directory.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir =
                std::env::temp_dir().join(format!("harnessd-paths-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("workspace/secrets")).unwrap();
            std::fs::create_dir_all(dir.join("workspace/x")).unwrap();
            Dir(dir.canonicalize().unwrap())
        }
        fn ws(&self) -> PathBuf {
            self.0.join("workspace")
        }
        fn judge(&self, raw: &str) -> Result<String, PathError> {
            judge(&self.0, &self.ws(), raw).map(|j| j.subject)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn dodges_are_folded() {
        let d = Dir::new("fold");
        let ws = d.ws();
        assert_eq!(d.judge("secrets/k").unwrap(), "workspace/secrets/k");
        assert_eq!(
            d.judge("./x/..//secrets/./k").unwrap(),
            "workspace/secrets/k"
        );
        assert_eq!(
            d.judge("../workspace/secrets/k").unwrap(),
            "workspace/secrets/k"
        );
        assert_eq!(d.judge("/etc/../etc/shadow").unwrap(), "/etc/shadow");
        assert_eq!(d.judge("/../../etc/shadow").unwrap(), "/etc/shadow");
        assert_eq!(d.judge("..").unwrap(), ".");
        symlink(ws.join("secrets"), ws.join("link")).unwrap();
        assert_eq!(d.judge("link/k").unwrap(), "workspace/secrets/k");
        assert_eq!(d.judge("new/dir/../file").unwrap(), "workspace/new/file");
        assert_eq!(
            d.judge("missing/../secrets/k").unwrap(),
            "workspace/secrets/k"
        );
        let j = judge(&d.0, &ws, "x/").unwrap();
        assert_eq!(j.absolute, ws.join("x"));
    }

    #[test]
    fn a_dangling_link_is_judged_on_its_target() {
        let d = Dir::new("dangling");
        let ws = d.ws();
        symlink("../secrets/authorized_keys", ws.join("x/readme.md")).unwrap();
        assert_eq!(
            d.judge("x/readme.md").unwrap(),
            "workspace/secrets/authorized_keys"
        );
        // A dangling link to a missing directory: what is below it is judged there.
        symlink("../secrets/new-dir", ws.join("x/d")).unwrap();
        assert_eq!(d.judge("x/d/f").unwrap(), "workspace/secrets/new-dir/f");
        // A link to a path outside the root is absolute.
        symlink("/etc/nonexistent-harnessd", ws.join("out")).unwrap();
        assert_eq!(d.judge("out").unwrap(), "/etc/nonexistent-harnessd");
    }

    #[test]
    fn a_chain_is_followed_to_its_end() {
        let d = Dir::new("chain");
        let ws = d.ws();
        symlink("b", ws.join("a")).unwrap();
        symlink(ws.join("x/c"), ws.join("b")).unwrap();
        symlink("../secrets/./k", ws.join("x/c")).unwrap();
        assert_eq!(d.judge("a").unwrap(), "workspace/secrets/k");
        // A chain of 40 links is what the kernel follows; 41 is too many.
        for i in 0..41 {
            symlink(format!("l{}", i + 1), ws.join(format!("l{i}"))).unwrap();
        }
        std::fs::write(ws.join("l41"), "end").unwrap();
        assert_eq!(d.judge("l1").unwrap(), "workspace/l41");
        assert!(matches!(d.judge("l0"), Err(PathError::TooManyLinks { .. })));
    }

    #[test]
    fn a_loop_is_an_error_not_a_hang() {
        let d = Dir::new("loop");
        let ws = d.ws();
        symlink("loop2", ws.join("loop1")).unwrap();
        symlink("loop1", ws.join("loop2")).unwrap();
        symlink(".", ws.join("self")).unwrap();
        let e = d.judge("loop1/x").unwrap_err();
        assert!(matches!(e, PathError::TooManyLinks { .. }), "{e}");
        assert!(e.to_string().contains("more than 40 symbolic links"));
        // A link to its own directory, repeated: each use counts.
        assert_eq!(d.judge(&"self/".repeat(40)).unwrap(), "workspace");
        let e = d.judge(&"self/".repeat(41)).unwrap_err();
        assert!(matches!(e, PathError::TooManyLinks { .. }), "{e}");
    }

    #[test]
    fn proc_is_refused_directly_and_through_links() {
        let d = Dir::new("proc");
        let ws = d.ws();
        symlink("/proc/self/cwd/secrets/k", ws.join("magic")).unwrap();
        symlink("/proc/thread-self/root", ws.join("root-link")).unwrap();
        symlink("/proc", ws.join("p")).unwrap();
        symlink("../magic", ws.join("x/chained")).unwrap();
        let pid = format!("/proc/{}/environ", std::process::id());
        for raw in [
            "magic",
            "root-link/etc/shadow",
            "p/1/environ",
            "x/chained",
            "/proc/self/cwd/secrets/k",
            "/proc",
            "/./proc/../proc/self",
            pid.as_str(),
        ] {
            let e = d.judge(raw).unwrap_err();
            assert!(matches!(e, PathError::Proc { .. }), "{raw}: {e}");
            assert_eq!(e.rule(), "path refused: through /proc");
            assert!(e.to_string().contains("/proc"), "{e}");
        }
        // Past /proc, by name only: nothing of /proc is resolved in the daemon.
        assert_eq!(d.judge("/procfile").unwrap(), "/procfile");
    }

    #[test]
    fn hostile_strings_are_refused_or_judged_in_bounded_time() {
        let d = Dir::new("hostile");
        assert_eq!(d.judge("a\0b"), Err(PathError::Nul));
        assert!(matches!(
            d.judge(&"a/".repeat(50_000)),
            Err(PathError::TooLong { len: 100_000 })
        ));
        assert_eq!(d.judge("").unwrap(), "workspace");
        let started = std::time::Instant::now();
        for raw in [
            "\u{1b}[2J\u{202e}/..",
            "\u{fffd}\u{fffd}",
            "../../../../../../../../..",
            &"../".repeat(1365),
            &"x/".repeat(2048),
            &"n".repeat(300),
        ] {
            match d.judge(raw) {
                Ok(_) | Err(PathError::Unresolvable { .. }) => {}
                Err(e) => panic!("{raw:?}: {e}"),
            }
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn a_non_directory_in_the_middle_is_kept_as_written() {
        let d = Dir::new("notdir");
        std::fs::write(d.ws().join("file"), "x").unwrap();
        assert_eq!(d.judge("file/sub").unwrap(), "workspace/file/sub");
    }
}
