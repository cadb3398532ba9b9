//! The workspace's `AGENTS.md`: instructions a workspace carries for the model,
//! read at a run's start and placed in the system prompt after the operator's.
//!
//! Tools can write the workspace, so the file is hostile: it is opened relative to
//! the workspace's descriptor without following links (`O_NOFOLLOW` on both the
//! workspace and the file: a symbolic link is refused, not followed, and one name
//! directly in the workspace leaves no room for a magic link), and only a regular
//! file is read. At most [`MAX_AGENTS_MD_BYTES`] of it reach the prompt; the
//! sha256 recorded is of the whole file.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

/// The file's name, at the workspace's top.
pub const AGENTS_MD: &str = "AGENTS.md";
/// Bytes of it that reach the system prompt; the rest is cut with the marker.
pub const MAX_AGENTS_MD_BYTES: usize = 32 * 1024;
/// Bytes of it read at most, for its sha256 (a bigger file is not read).
pub const MAX_AGENTS_MD_READ: u64 = 16 * 1024 * 1024;

/// The `AGENTS.md` a run read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentsMd {
    /// What reaches the prompt: at most [`MAX_AGENTS_MD_BYTES`] of the file's
    /// head, cut at a character boundary, then the marker when cut.
    pub text: String,
    /// Whether it was cut.
    pub truncated: bool,
    /// sha256 of the whole file's bytes, hex.
    pub sha256: String,
}

/// Why an `AGENTS.md` that is there is not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}; it is not added to the system prompt")]
pub struct AgentsMdError {
    /// The file's path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// Reads `workspace/AGENTS.md`: `Ok(None)` when there is none.
pub fn read(workspace: &Path) -> Result<Option<AgentsMd>, AgentsMdError> {
    let path = workspace.join(AGENTS_MD);
    let err = |reason: String| AgentsMdError {
        path: path.display().to_string(),
        reason,
    };
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let dir = match nix::fcntl::open(workspace, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => {
            return Err(err(format!(
                "cannot open the workspace: {}",
                std::io::Error::from(e)
            )));
        }
    };
    // O_NONBLOCK: a FIFO planted there does not hang the run's start.
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = match openat(dir.as_fd(), AGENTS_MD, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::ELOOP) => {
            return Err(err("a symbolic link, which is not followed".into()));
        }
        Err(e) => return Err(err(format!("cannot open it: {}", std::io::Error::from(e)))),
    };
    let file = File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| err(format!("cannot stat it: {e}")))?;
    if !meta.is_file() {
        return Err(err("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_AGENTS_MD_READ + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| err(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_AGENTS_MD_READ {
        return Err(err(format!("more than {MAX_AGENTS_MD_READ} bytes")));
    }
    let sha256 = crate::protocol::sha256_hex(&bytes);
    let (text, truncated) = crate::text::truncate_head(&bytes, MAX_AGENTS_MD_BYTES);
    Ok(Some(AgentsMd {
        text,
        truncated,
        sha256,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read_whole_for_its_hash_and_cut_for_the_prompt() {
        let ws = tempfile::tempdir().unwrap();
        assert_eq!(read(ws.path()), Ok(None));
        let content = "x".repeat(MAX_AGENTS_MD_BYTES + 10);
        std::fs::write(ws.path().join(AGENTS_MD), &content).unwrap();
        let a = read(ws.path()).unwrap().unwrap();
        assert!(a.truncated);
        assert_eq!(a.sha256, crate::protocol::sha256_hex(content.as_bytes()));
        assert!(
            a.text.ends_with("\n[… 10 chars omitted …]"),
            "{}",
            &a.text[a.text.len() - 40..]
        );
    }

    #[test]
    fn links_fifos_and_directories_are_not_read() {
        let ws = tempfile::tempdir().unwrap();
        let p = ws.path().join(AGENTS_MD);
        std::fs::write(ws.path().join("real.md"), "x").unwrap();
        std::os::unix::fs::symlink(ws.path().join("real.md"), &p).unwrap();
        assert!(
            read(ws.path())
                .unwrap_err()
                .reason
                .contains("symbolic link")
        );
        std::fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, Mode::from_bits_truncate(0o600)).unwrap();
        assert!(
            read(ws.path())
                .unwrap_err()
                .reason
                .contains("not a regular file")
        );
        std::fs::remove_file(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
        assert!(
            read(ws.path())
                .unwrap_err()
                .reason
                .contains("not a regular file")
        );
    }
}
