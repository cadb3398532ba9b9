//! The configuration in force, swapped atomically on reload. Each of the two
//! files is judged on its own: a new version of one is read, parsed and fully
//! validated together with the other file as it is in force, then judged as
//! `check` would judge it (the [`Judge`] handed in: the sandbox probe), before it
//! replaces the old one; an invalid one changes nothing, and a valid edit of the
//! other file still takes effect. Readers take a snapshot
//! ([`ConfigSource::current`]) and keep it for the step they are in: a tool
//! call, a turn.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::changes::changes;
use super::{CONFIG_FILE, ConfigError, ConfigSource, Loaded, assemble, sha256_hex};

/// What a reload did with one file.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The file holds the bytes in force.
    Unchanged,
    /// Its new version is in force.
    Loaded {
        /// What changed, key by key.
        changes: Vec<String>,
        /// Keys that changed but only take effect after a restart (kept as they were).
        restart_needed: Vec<String>,
    },
    /// Its new version was rejected; the old one stays in force.
    Rejected {
        /// The error, with file, line, column and key where known.
        error: String,
        /// The same content (or the same unreadable file) was rejected by the
        /// reload before: it was recorded then.
        repeated: bool,
    },
}

/// What a reload did with one of the two files.
#[derive(Debug, Clone, PartialEq)]
pub struct FileOutcome {
    /// The file, relative to the root.
    pub file: String,
    /// sha256 of the content judged; `None` when it could not be read.
    pub sha256: Option<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// The previous reload rejected this file: an outcome that is not a
    /// rejection is the bad edit fixed or undone.
    pub after_rejection: bool,
}

/// What a reload did: the config file's outcome, then the settings file's.
pub type ReloadOutcome = Vec<FileOutcome>;

/// Judges a candidate snapshot beyond its files, as `check` does (the probe of
/// what the kernel enforces): an error rejects it.
pub type Judge = Box<dyn FnMut(&Loaded) -> Result<(), ConfigError> + Send>;

/// The live configuration of a running `harnessd`.
pub struct LiveConfig {
    current: ArcSwap<Loaded>,
    /// Held for a whole reload: two reloads (the watcher's and an
    /// `approve --remember`'s) never judge against a snapshot the other replaces.
    reloading: Mutex<Reloading>,
}

/// What reloads keep between them.
struct Reloading {
    judge: Option<Judge>,
    /// Per file (config, settings): what the last rejection was of, the content's
    /// sha256 or the read error, so the same rejection is recorded once.
    rejected: [Option<String>; 2],
}

impl ConfigSource for LiveConfig {
    fn current(&self) -> Arc<Loaded> {
        self.current.load_full()
    }
}

impl LiveConfig {
    /// Starts from an already loaded snapshot, judging new versions by their
    /// files alone.
    pub fn new(loaded: Arc<Loaded>) -> LiveConfig {
        LiveConfig {
            current: ArcSwap::new(loaded),
            reloading: Mutex::new(Reloading {
                judge: None,
                rejected: [None, None],
            }),
        }
    }

    /// Starts from `loaded`; `judge` must also accept a new version before it
    /// takes effect.
    pub fn with_judge(loaded: Arc<Loaded>, judge: Judge) -> LiveConfig {
        let live = LiveConfig::new(loaded);
        live.state().judge = Some(judge);
        live
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Reloading> {
        // A reload that panicked left nothing half-done: the swap is one store.
        self.reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads both files again and puts in force each one that changed and is
    /// valid with the other as it is in force: the config file first, then the
    /// settings file against the config now in force.
    pub fn reload(&self) -> ReloadOutcome {
        let mut state = self.state();
        let config = self.reload_one(&mut state, 0);
        let settings = self.reload_one(&mut state, 1);
        vec![config, settings]
    }

    /// Judges file `which` (0: config, 1: settings) and swaps it in if it is valid.
    fn reload_one(&self, state: &mut Reloading, which: usize) -> FileOutcome {
        let old = self.current();
        let (path, file) = if which == 0 {
            (old.paths.config.clone(), CONFIG_FILE.to_string())
        } else {
            (
                old.paths.settings.clone(),
                old.paths.display(&old.paths.settings),
            )
        };
        let judged = judge_file(state, &old, &path, &file, which);
        let after_rejection = state.rejected[which].is_some();
        let (sha256, verdict) = match judged {
            Ok((sha256, None)) => (Some(sha256), Verdict::Unchanged),
            Ok((sha256, Some(mut new))) => {
                let restart_needed = keep_start_bound(&mut new, &old);
                let as_value = |l: &Loaded| serde_json::json!({"config": l.config, "settings": l.policy.settings});
                let changed = changes(&as_value(&old), &as_value(&new));
                self.current.store(Arc::new(new));
                let verdict = Verdict::Loaded {
                    changes: changed,
                    restart_needed,
                };
                (Some(sha256), verdict)
            }
            Err((sha256, e)) => {
                let key = sha256.clone().unwrap_or_else(|| e.to_string());
                let repeated = state.rejected[which].as_ref() == Some(&key);
                state.rejected[which] = Some(key);
                let error = e.to_string();
                return FileOutcome {
                    file,
                    sha256,
                    verdict: Verdict::Rejected { error, repeated },
                    after_rejection,
                };
            }
        };
        state.rejected[which] = None;
        FileOutcome {
            file,
            sha256,
            verdict,
            after_rejection,
        }
    }
}

/// A file judged: its content's sha256 and `None` when it holds what is in
/// force, or the valid new snapshot; or the error, with the content's sha256
/// when the file could be read.
type Judged = Result<(String, Option<Loaded>), (Option<String>, ConfigError)>;

/// The candidate snapshot with file `which` as it is on disk now and the other
/// as in `old`, judged.
fn judge_file(
    state: &mut Reloading,
    old: &Loaded,
    path: &std::path::Path,
    file: &str,
    which: usize,
) -> Judged {
    let text = super::read(path, file).map_err(|e| {
        // An empty file has a content: the same empty file is the same rejection.
        let sha = super::read_regular(path).ok().map(|b| sha256_hex(&b));
        (sha, e)
    })?;
    let sha256 = sha256_hex(text.as_bytes());
    let in_force = if which == 0 {
        &old.config_sha256
    } else {
        &old.settings_sha256
    };
    if sha256 == *in_force {
        return Ok((sha256, None));
    }
    let (config_text, settings_text) = if which == 0 {
        (text.as_str(), &*old.settings_text)
    } else {
        (&*old.config_text, text.as_str())
    };
    let err = |e| (Some(sha256.clone()), e);
    let new = assemble(&old.paths.root, config_text, settings_text).map_err(err)?;
    // The API key's variable is bound at start (a change waits for a restart),
    // so no server may name the one in force either, whatever the new config says.
    let key_env = Some(old.config.api.api_key_env.as_str());
    super::mcp::validate(&new.policy.settings.mcp, key_env)
        .and_then(|()| super::hooks::validate(&new.policy.settings.hooks, key_env))
        .map_err(|(key, message)| {
            let file = &new.config.paths.settings;
            let at = super::error::find_json_value(settings_text, &key);
            err(ConfigError::invalid(file, at, key, message))
        })?;
    if let Some(judge) = state.judge.as_mut() {
        judge(&new).map_err(err)?;
    }
    Ok((sha256, Some(new)))
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
    // The exporter and its endpoint are set up once, at start.
    if new.config.telemetry != old.config.telemetry {
        restart_needed.push("telemetry".to_string());
        new.config.telemetry = old.config.telemetry.clone();
    }
    // The accept loop sizes its connection slots once, at start.
    if new.config.daemon.max_connections != old.config.daemon.max_connections {
        restart_needed.push("daemon.max_connections".to_string());
        new.config.daemon.max_connections = old.config.daemon.max_connections;
    }
    // The TCP listener is bound once, at start.
    let listening =
        |d: &super::DaemonConfig| (d.listen.clone(), d.listen_public, d.console_origin.clone());
    if listening(&new.config.daemon) != listening(&old.config.daemon) {
        restart_needed.push("daemon.listen".to_string());
        new.config.daemon.listen = old.config.daemon.listen.clone();
        new.config.daemon.listen_public = old.config.daemon.listen_public;
        new.config.daemon.console_origin = old.config.daemon.console_origin.clone();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn root() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "harnessd-live-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        super::super::init(&dir).unwrap();
        // An account name: "auto" would choose (and register) a uid as root.
        let settings = dir.join("policies/settings.json");
        let text = std::fs::read_to_string(&settings).unwrap();
        std::fs::write(&settings, text.replace("\"auto\"", "\"nobody\"")).unwrap();
        dir
    }

    fn rejected(f: &FileOutcome) -> Option<bool> {
        match f.verdict {
            Verdict::Rejected { repeated, .. } => Some(repeated),
            _ => None,
        }
    }

    #[test]
    fn each_file_is_judged_on_its_own_and_a_rejection_is_remembered_by_content() {
        let dir = root();
        let loaded = Arc::new(super::super::load(&dir).unwrap());
        // The judge stands for the probe: it refuses one value.
        let judge: Judge = Box::new(|l: &Loaded| match l.policy.settings.output.max_chars {
            1 => Err(ConfigError::invalid(
                "policies/settings.json",
                None,
                "x",
                "no",
            )),
            _ => Ok(()),
        });
        let live = LiveConfig::with_judge(loaded, judge);
        let settings = dir.join("policies/settings.json");
        let good = std::fs::read_to_string(&settings).unwrap();
        std::fs::write(&settings, "{\"tools\": {\"deny\": [\"run_bsh\"]}}").unwrap();
        let out = live.reload();
        assert_eq!(out[0].verdict, Verdict::Unchanged);
        assert_eq!(rejected(&out[1]), Some(false));
        assert_eq!(rejected(&live.reload()[1]), Some(true), "same content");
        let config = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text.replace("max_turns = 12", "max_turns = 5")).unwrap();
        let out = live.reload();
        assert!(matches!(out[0].verdict, Verdict::Loaded { .. }), "{out:?}");
        assert_eq!(rejected(&out[1]), Some(true));
        assert_eq!(live.current().config.loop_.max_turns, 5);
        // Valid as a file, refused by the judge: the old settings stay.
        std::fs::write(&settings, good.replace("8000", "1")).unwrap();
        let out = live.reload();
        assert_eq!(rejected(&out[1]), Some(false), "another content");
        assert_eq!(live.current().policy.settings.output.max_chars, 8000);
        std::fs::write(&settings, good.replace("8000", "9000")).unwrap();
        let out = live.reload();
        assert!(out[1].after_rejection);
        assert!(matches!(out[1].verdict, Verdict::Loaded { .. }), "{out:?}");
        assert_eq!(live.current().policy.settings.output.max_chars, 9000);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A new `api.api_key_env` waits for a restart: a server naming the variable
    /// still in force is refused although the new config names another.
    #[test]
    fn no_server_may_name_the_key_variable_in_force() {
        let dir = root();
        let config = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&config).unwrap();
        let with_env = |var: &str| {
            text.replace(
                "api_key_env = \"ANTHROPIC_API_KEY\"",
                &format!("api_key_env = \"{var}\""),
            )
        };
        std::fs::write(&config, with_env("MY_KEY")).unwrap();
        let live = LiveConfig::new(Arc::new(super::super::load(&dir).unwrap()));
        std::fs::write(&config, with_env("OTHER_KEY")).unwrap();
        let settings = dir.join("policies/settings.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
        v["mcp"] =
            serde_json::json!({"servers": {"s": {"command": ["x"], "env": {"T": "MY_KEY"}}}});
        std::fs::write(&settings, v.to_string()).unwrap();
        let out = live.reload();
        assert!(matches!(out[0].verdict, Verdict::Loaded { .. }), "{out:?}");
        match &out[1].verdict {
            Verdict::Rejected { error, .. } => {
                assert!(error.contains("key `mcp.servers.s.env.T`"), "{error}");
                assert!(error.contains("MY_KEY holds the API key"), "{error}");
            }
            other => panic!("accepted: {other:?}"),
        }
        assert_eq!(live.current().config.api.api_key_env, "MY_KEY");
        assert!(live.current().policy.settings.mcp.servers.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
