//! The configuration in force, swapped atomically on reload. A new version is
//! read, parsed and fully validated before it replaces the old one; an invalid one
//! changes nothing. Readers take a snapshot ([`ConfigSource::current`]) and keep it
//! for the step they are in: a tool call, a turn.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::changes::changes;
use super::{ConfigError, ConfigSource, Loaded, load};

/// What a reload did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReloadOutcome {
    /// Both files hold the same bytes as the version in force.
    Unchanged,
    /// A new version is in force.
    Loaded {
        /// The files whose content changed, relative to the root, with their sha256.
        files: Vec<(String, String)>,
        /// What changed, key by key.
        changes: Vec<String>,
        /// Keys that changed but only take effect after a restart (kept as they were).
        restart_needed: Vec<String>,
    },
    /// The new version was rejected; the old one stays in force.
    Rejected {
        /// The file at fault, relative to the root.
        file: String,
        /// The error, with line and column where known.
        error: String,
    },
}

/// The live configuration of a running `harnessd`.
pub struct LiveConfig {
    root: PathBuf,
    current: ArcSwap<Loaded>,
}

impl ConfigSource for LiveConfig {
    fn current(&self) -> Arc<Loaded> {
        self.current.load_full()
    }
}

impl LiveConfig {
    /// Starts from an already loaded snapshot.
    pub fn new(loaded: Arc<Loaded>) -> LiveConfig {
        LiveConfig {
            root: loaded.paths.root.clone(),
            current: ArcSwap::new(loaded),
        }
    }

    /// Reads both files again and swaps them in if they are valid and changed.
    pub fn reload(&self) -> ReloadOutcome {
        let old = self.current();
        let mut new = match load(&self.root) {
            Ok(new) => new,
            Err(e) => return rejected(&old, &e),
        };
        if new.config_sha256 == old.config_sha256 && new.settings_sha256 == old.settings_sha256 {
            return ReloadOutcome::Unchanged;
        }
        let restart_needed = keep_start_bound(&mut new, &old);
        let as_value =
            |l: &Loaded| serde_json::json!({"config": l.config, "settings": l.policy.settings});
        let changed = changes(&as_value(&old), &as_value(&new));
        let files = changed_files(&old, &new);
        self.current.store(Arc::new(new));
        ReloadOutcome::Loaded {
            files,
            changes: changed,
            restart_needed,
        }
    }
}

/// The outcome of a reload whose files did not load, naming the file at fault.
fn rejected(old: &Loaded, e: &ConfigError) -> ReloadOutcome {
    let file = match e {
        ConfigError::Read { path, .. } => old.paths.display(path),
        ConfigError::Invalid(i) => i.file.clone(),
    };
    ReloadOutcome::Rejected {
        file,
        error: e.to_string(),
    }
}

/// Puts back into `new` the settings that are bound at start and so cannot change
/// while running; returns the keys that changed and need a restart.
fn keep_start_bound(new: &mut Loaded, old: &Loaded) -> Vec<String> {
    // Paths and the control socket are bound at start; say so and keep them.
    let mut restart_needed = Vec::new();
    if new.config.paths != old.config.paths {
        restart_needed.push("paths".to_string());
        new.config.paths = old.config.paths.clone();
        new.paths = old.paths.clone();
    }
    if new.config.daemon.socket != old.config.daemon.socket {
        restart_needed.push("daemon.socket".to_string());
        new.config.daemon.socket = old.config.daemon.socket.clone();
    }
    // The socket's group and mode are set at start; who may call follows them.
    if new.config.daemon.operators_group != old.config.daemon.operators_group {
        restart_needed.push("daemon.operators_group".to_string());
        new.config.daemon.operators_group = old.config.daemon.operators_group.clone();
    }
    // The accept loop sizes its connection slots once, at start.
    if new.config.daemon.max_connections != old.config.daemon.max_connections {
        restart_needed.push("daemon.max_connections".to_string());
        new.config.daemon.max_connections = old.config.daemon.max_connections;
    }
    // The model client (endpoint, timeouts, retries, key) is built at start.
    let client_keys = |c: &super::ApiConfig| {
        (
            c.provider.clone(),
            c.base_url.clone(),
            c.api_key_env.clone(),
            c.api_key_file.clone(),
            c.timeout_secs,
            c.max_retries,
            c.max_response_mb,
        )
    };
    if client_keys(&new.config.api) != client_keys(&old.config.api) {
        restart_needed.push(
            "api (provider, base_url, key, timeout_secs, max_retries, max_response_mb)".to_string(),
        );
        let api = &mut new.config.api;
        let was = &old.config.api;
        api.provider = was.provider.clone();
        api.base_url = was.base_url.clone();
        api.api_key_env = was.api_key_env.clone();
        api.api_key_file = was.api_key_file.clone();
        api.timeout_secs = was.timeout_secs;
        api.max_retries = was.max_retries;
        api.max_response_mb = was.max_response_mb;
    }
    // The workspace ACLs are granted to the tool uid at start: tools running as
    // another uid after a reload could not edit the operator's files, and the
    // socket's refusal would follow a uid the workspace never knew.
    if new.tool_user != old.tool_user {
        restart_needed.push("sandbox.user".to_string());
        new.tool_user = old.tool_user.clone();
        new.policy.settings.sandbox.user = old.policy.settings.sandbox.user.clone();
    }
    // The response budget and the daemon's cgroup are sized at start.
    if new.config.daemon.memory_mb != old.config.daemon.memory_mb {
        restart_needed.push("daemon.memory_mb".to_string());
        new.config.daemon.memory_mb = old.config.daemon.memory_mb;
    }
    // The scheduler's slots are sized at start.
    if new.config.daemon.max_concurrent_tasks != old.config.daemon.max_concurrent_tasks {
        restart_needed.push("daemon.max_concurrent_tasks".to_string());
        new.config.daemon.max_concurrent_tasks = old.config.daemon.max_concurrent_tasks;
    }
    restart_needed
}

/// The files whose bytes changed, relative to the root, with their new sha256.
fn changed_files(old: &Loaded, new: &Loaded) -> Vec<(String, String)> {
    let mut files = Vec::new();
    if new.config_sha256 != old.config_sha256 {
        files.push((super::CONFIG_FILE.to_string(), new.config_sha256.clone()));
    }
    if new.settings_sha256 != old.settings_sha256 {
        files.push((
            new.paths.display(&new.paths.settings),
            new.settings_sha256.clone(),
        ));
    }
    files
}
