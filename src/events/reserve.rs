//! The reserve (docs/events.md, docs/sandbox.md): a preallocated file, `transcripts/.reserve`, of
//! `audit.reserve_mb` MiB that holds disk space for the audit log. The event
//! writer owns it: when a line cannot be written for a full disk it gives the
//! space up, so the failure itself (the task's `task_finished` with its error)
//! still reaches the record, and it takes the space back once the disk has room
//! again. Tools never get it: their output is not spooled while free space is under
//! the reserve (`exec::budget`), and `transcripts/` is not theirs to write.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The reserve file and whether it holds its space now.
#[derive(Debug)]
pub(crate) struct Reserve {
    path: PathBuf,
    bytes: u64,
    held: bool,
}

impl Reserve {
    /// The reserve of `mb` MiB at `path`; nothing is allocated until
    /// [`Reserve::hold`].
    pub(crate) fn new(path: PathBuf, mb: u64) -> Reserve {
        Reserve {
            path,
            bytes: mb.saturating_mul(1024 * 1024),
            held: false,
        }
    }

    /// Whether the space was given up and not taken back yet.
    pub(crate) fn released(&self) -> bool {
        !self.held
    }

    /// Allocates the file's blocks (an existing reserve is reused, cut to size if
    /// the setting shrank). On failure the file is removed: a half-allocated
    /// reserve would take space without guaranteeing any.
    pub(crate) fn hold(&mut self) -> std::io::Result<()> {
        let result = allocate(&self.path, self.bytes);
        if result.is_err() {
            let _ = std::fs::remove_file(&self.path);
        }
        self.held = result.is_ok();
        result
    }

    /// Gives the space up to the log: the file is removed.
    pub(crate) fn release(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::error!("cannot release the reserve {}: {e}", self.path.display());
        }
        self.held = false;
        tracing::error!(
            "the disk under the audit log is full: released the reserve {} ({} MiB) to \
             record the failure; new tasks are refused until space returns",
            self.path.display(),
            self.bytes / (1024 * 1024)
        );
    }

    /// After a release: takes the space back once the filesystem has room for the
    /// reserve twice over (the reserve itself, and as much again free for the log
    /// and the floor under tool output). Returns whether it is held now.
    pub(crate) fn retake(&mut self) -> bool {
        if self.held {
            return true;
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let room =
            crate::disk::free_bytes(dir).is_some_and(|free| free >= self.bytes.saturating_mul(2));
        if room && self.hold().is_ok() {
            tracing::info!(
                "space returned: the reserve {} is held again",
                self.path.display()
            );
        }
        self.held
    }
}

/// Creates (or reuses) `path` owner-only, never through a link, with `bytes`
/// allocated.
fn allocate(path: &Path, bytes: u64) -> std::io::Result<()> {
    let file: File = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // An existing file keeps its mode: make it private whatever it was.
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    if file.metadata()?.len() > bytes {
        file.set_len(bytes)?;
    }
    let len = i64::try_from(bytes).map_err(std::io::Error::other)?;
    nix::fcntl::fallocate(&file, nix::fcntl::FallocateFlags::empty(), 0, len)
        .map_err(std::io::Error::from)
}

/// Whether `e` says the disk is full.
pub(crate) fn is_disk_full(e: &super::EventError) -> bool {
    match e {
        super::EventError::Io { source, .. } => {
            source.raw_os_error() == Some(libc::ENOSPC)
                || source.raw_os_error() == Some(libc::EDQUOT)
        }
        super::EventError::Closed => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_allocated_private_and_released_whole() {
        let dir = std::env::temp_dir().join(format!("harnessd-reserve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(".reserve");
        let mut r = Reserve::new(path.clone(), 1);
        r.hold().unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(meta.len(), 1024 * 1024);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // Allocated, not sparse.
        assert!(meta.blocks() * 512 >= 1024 * 1024, "{}", meta.blocks());
        r.release();
        assert!(r.released() && !path.exists());
        assert!(r.retake() && path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
