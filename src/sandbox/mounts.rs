//! The read-only profile's filesystem (docs/policy.md "What an allow grants"): the call's
//! own mount namespace with a private tmpfs on `/tmp`, so a read-only process
//! still has somewhere to write temporary files (sort's spill files, compilers'
//! scratch) that nobody else sees and that is gone when the call ends.
//!
//! The namespace is entered by the PID namespace's PID 1 (the tool), so it lives
//! exactly as long as the call's process tree. Mounting needs CAP_SYS_ADMIN over
//! the mount namespace: as root the helper has it; as an unprivileged daemon it
//! has it inside the user namespace it created one step before. Both must happen
//! before the privilege drop and before seccomp, which forbids `mount`.
//!
//! An allowed path under `/tmp` (a root kept in `/tmp`) would be hidden by the
//! tmpfs, so it is bind-mounted back at its own name. Then `/tmp` itself cannot be
//! the writable directory: Landlock grants by path, and a write rule on the tmpfs
//! root would cover everything mounted beneath it, the workspace included. The
//! writable directory is then a subdirectory of the tmpfs ([`NESTED_TMP`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::stat::Mode;

/// Where the private tmpfs is mounted.
pub const PRIVATE_TMP: &str = "/tmp";

/// The writable directory inside the tmpfs when allowed paths are mounted in it.
pub const NESTED_TMP: &str = "/tmp/harnessd-tmp";

/// The private temporary directory that was made.
#[derive(Debug)]
pub struct PrivateTmp {
    /// The writable directory: `TMPDIR`, `HOME` and Landlock's write rule.
    pub dir: PathBuf,
    /// What was done, for the report.
    pub detail: String,
}

/// Enters a new mount namespace whose mounts propagate nowhere, mounts a tmpfs of
/// `size_mb` MiB on [`PRIVATE_TMP`] in it, and mounts back the paths of `allowed`
/// that it hides. Returns the writable directory, or why it could not be made.
pub fn private_tmp(size_mb: u64, allowed: &[PathBuf]) -> Result<PrivateTmp, String> {
    if size_mb == 0 {
        // tmpfs reads size=0 as "no limit"; settings refuse 0, this is the
        // helper not trusting that.
        return Err("sandbox.tmp_mb is 0, and a tmpfs of size 0 is unbounded".into());
    }
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("mount namespace: {e}"))?;
    // Without this, a mount made here would propagate back to the host's shared
    // mounts (systemd makes `/` shared).
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making / private: {e}"))?;
    let hidden = hidden_paths(allowed)?;
    let cwd = std::env::current_dir().ok();
    // 1777 like any /tmp: the mount is the call's own, so sharing it is sharing
    // with the call's own processes only.
    let options = format!("size={size_mb}m,mode=1777");
    mount(
        Some("tmpfs"),
        PRIVATE_TMP,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(|e| format!("tmpfs on {PRIVATE_TMP}: {e}"))?;
    let detail = format!("read-only: writes only /dev/null and a private {size_mb} MiB ");
    if hidden.is_empty() {
        return Ok(PrivateTmp {
            dir: PathBuf::from(PRIVATE_TMP),
            detail: format!("{detail}{PRIVATE_TMP}"),
        });
    }
    for (path, fd) in &hidden {
        bind_back(path, fd)?;
    }
    // The working directory (the workspace) was one of them: enter it again so it
    // is the one now visible at its name.
    if let Some(cwd) = cwd {
        let _ = std::env::set_current_dir(cwd);
    }
    std::fs::DirBuilder::new()
        .mode(0o1777)
        .create(NESTED_TMP)
        // By descriptor (fchmod): the seccomp filter a spawn server's child
        // inherits already refuses the path-based calls (see `seccomp::split`).
        .and_then(|()| std::fs::File::open(NESTED_TMP))
        .and_then(|dir| dir.set_permissions(std::fs::Permissions::from_mode(0o1777)))
        .map_err(|e| format!("{NESTED_TMP}: {e}"))?;
    Ok(PrivateTmp {
        dir: PathBuf::from(NESTED_TMP),
        detail: format!(
            "{detail}{NESTED_TMP} ({} allowed path(s) under {PRIVATE_TMP} mounted back)",
            hidden.len()
        ),
    })
}

/// The allowed paths strictly beneath [`PRIVATE_TMP`], outermost only, each opened
/// (`O_PATH`) before the tmpfs hides it.
fn hidden_paths(allowed: &[PathBuf]) -> Result<Vec<(PathBuf, OwnedFd)>, String> {
    let mut under: Vec<&PathBuf> = allowed
        .iter()
        .filter(|p| p.starts_with(PRIVATE_TMP) && p.as_path() != Path::new(PRIVATE_TMP))
        .collect();
    under.sort();
    under.dedup();
    let mut outermost: Vec<&PathBuf> = Vec::new();
    for p in under {
        if !outermost.iter().any(|o| p.starts_with(o)) {
            outermost.push(p);
        }
    }
    let mut opened = Vec::new();
    for p in outermost {
        match open(p.as_path(), OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => opened.push((p.clone(), fd)),
            // An allowed path that does not exist gets no rule either.
            Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(format!("{}: {e}", p.display())),
        }
    }
    Ok(opened)
}

/// Makes a mount point for `path` in the tmpfs and bind-mounts what `fd` opened on
/// it (recursively, so mounts beneath it come along).
fn bind_back(path: &Path, fd: &OwnedFd) -> Result<(), String> {
    let e = |what: &str, err: &dyn std::fmt::Display| format!("{what} {}: {err}", path.display());
    let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let is_dir = std::fs::metadata(&source)
        .map_err(|err| e("stat", &err))?
        .is_dir();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|err| e("mkdir", &err))?;
    }
    if is_dir {
        std::fs::create_dir(path).map_err(|err| e("mkdir", &err))?;
    } else {
        std::fs::File::create(path).map_err(|err| e("create", &err))?;
    }
    mount(
        Some(source.as_str()),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|err| e("bind mount", &err))
}
