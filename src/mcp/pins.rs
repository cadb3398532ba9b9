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
    /// The stamp read, the pins, and why the file could not be used (then the pins
    /// are empty).
    cache: Mutex<(Option<Stamp>, Arc<PinFile>, Option<String>)>,
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
            cache: Mutex::new((None, Arc::new(PinFile::default()), None)),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    /// The pins now. A lock file that cannot be read counts as pinning nothing, so
    /// every MCP call is denied until it is fixed (and the error is logged).
    pub fn current(&self) -> Arc<PinFile> {
        self.read().0
    }

    /// The pins now, and why the file that is there could not be used.
    fn read(&self) -> (Arc<PinFile>, Option<String>) {
        let now = stamp(&self.path);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.0.is_some() && cache.0 == now {
            return (cache.1.clone(), cache.2.clone());
        }
        // As the config files are read: a FIFO or device there is refused at once
        // rather than waited on (under the cache's lock) or read without end.
        let read = match crate::config::read_regular(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PinFile::default()),
            Err(e) => Err(format!("cannot read {}: {e}", self.path.display())),
            Ok(bytes) => String::from_utf8(bytes)
                .map_err(|e| format!("{LOCK_FILE} is not UTF-8 ({e})"))
                .and_then(|text| {
                    crate::config::parse_pins(&text, LOCK_FILE).map_err(|e| e.to_string())
                }),
        };
        let (pins, broken) = match read {
            Ok(p) => (p, None),
            Err(e) => {
                tracing::error!("{e}; every MCP tool is withheld until the file is fixed");
                (PinFile::default(), Some(e))
            }
        };
        *cache = (now, Arc::new(pins), broken);
        (cache.1.clone(), cache.2.clone())
    }

    /// Replaces `server`'s pins with `listed`: `record` records it first (no pin
    /// without its record, written before the change as every record is), then the
    /// file is written atomically; the names pinned. A file that is there but cannot
    /// be used is not written over: its servers would all count as never pinned,
    /// and be pinned again as they list themselves now, drift and all.
    pub async fn pin<F, Fut>(
        &self,
        server: &str,
        listed: &[ToolDefinition],
        record: F,
    ) -> Result<Vec<String>, McpError>
    where
        F: FnOnce(Vec<String>) -> Fut,
        Fut: std::future::Future<Output = Result<(), McpError>>,
    {
        let _one_writer = self.writing.lock().await;
        let (current, broken) = self.read();
        if let Some(why) = broken {
            return Err(McpError::Pins(format!(
                "{why}; nothing is pinned until the file is fixed (or deleted, to pin \
                 every server again)"
            )));
        }
        let mut file = (*current).clone();
        crate::config::pin_server(&mut file, server, listed);
        let mut names: Vec<String> = listed.iter().map(|d| d.name.clone()).collect();
        names.sort();
        record(names.clone()).await?;
        self.save(file).await?;
        Ok(names)
    }

    /// Writes `file` and caches it as what the file holds.
    async fn save(&self, file: PinFile) -> Result<(), McpError> {
        let path = self.path.clone();
        let written = file.clone();
        tokio::task::spawn_blocking(move || crate::config::save_pins(&path, &written))
            .await
            .map_err(|e| McpError::Internal(e.to_string()))?
            .map_err(|e| McpError::Pins(e.to_string()))?;
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) =
            (stamp(&self.path), Arc::new(file), None);
        Ok(())
    }
}
