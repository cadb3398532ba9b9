//! The lock file as the servers' sessions see it: read again whenever it changed on
//! disk (an operator's checkout of a reviewed file takes effect at the next call),
//! written by one writer at a time.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::McpError;
use crate::protocol::mcp::{LOCK_FILE, PinFile, ToolDefinition};

/// What identifies one content of the file without reading it.
type Stamp = (u64, u64, i64, i64, u64);

/// `policies/mcp.lock.json`, cached by its stamp.
pub struct PinStore {
    path: PathBuf,
    cache: Mutex<(Option<Stamp>, Arc<PinFile>)>,
    writing: tokio::sync::Mutex<()>,
}

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.len()))
}

impl PinStore {
    /// The store of the lock file at `path`.
    pub fn new(path: PathBuf) -> PinStore {
        PinStore {
            path,
            cache: Mutex::new((None, Arc::new(PinFile::default()))),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    /// The pins now. A lock file that cannot be read counts as pinning nothing, so
    /// every MCP call is denied until it is fixed (and the error is logged).
    pub fn current(&self) -> Arc<PinFile> {
        let now = stamp(&self.path);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.0.is_some() && cache.0 == now {
            return cache.1.clone();
        }
        let read = match std::fs::read_to_string(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PinFile::default()),
            Err(e) => Err(format!("cannot read {}: {e}", self.path.display())),
            Ok(text) => crate::config::parse_pins(&text, LOCK_FILE).map_err(|e| e.to_string()),
        };
        let pins = match read {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("{e}; every MCP tool is withheld until the file is fixed");
                PinFile::default()
            }
        };
        *cache = (now, Arc::new(pins));
        cache.1.clone()
    }

    /// Replaces `server`'s pins with `listed` and writes the file atomically; the
    /// names pinned.
    pub async fn pin(
        &self,
        server: &str,
        listed: &[ToolDefinition],
    ) -> Result<Vec<String>, McpError> {
        let _one_writer = self.writing.lock().await;
        let mut file = (*self.current()).clone();
        crate::config::pin_server(&mut file, server, listed);
        let path = self.path.clone();
        let written = file.clone();
        tokio::task::spawn_blocking(move || crate::config::save_pins(&path, &written))
            .await
            .map_err(|e| McpError::Internal(e.to_string()))?
            .map_err(|e| McpError::Pins(e.to_string()))?;
        let mut names: Vec<String> = listed.iter().map(|d| d.name.clone()).collect();
        names.sort();
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = (stamp(&self.path), Arc::new(file));
        Ok(names)
    }
}
