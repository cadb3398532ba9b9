//! Configuration: the two operator-edited files of a root, parsed and validated.
//!
//! `config/config.toml` ([`Config`]) and `policies/settings.json` ([`Settings`],
//! its rules compiled by [`crate::policy`] into a [`CompiledSettings`]) are read together into a [`Loaded`] snapshot. Nothing
//! else in harnessd reads these files. Errors name the file, line, column and key.

mod changes;
mod debounce;
pub mod defaults;
mod error;
mod file;
mod hooks;
mod key;
mod live;
mod mcp;
mod notify;
mod pins;
pub mod replace;
mod settings;
mod telemetry;
mod tool_user;

pub use debounce::Debouncer;
pub use error::{ConfigError, Invalid, Location, find_key};
pub(crate) use file::http_url;
pub use file::{
    ApiConfig, AuditConfig, AuditSync, Config, ContextConfig, DaemonConfig, LoopConfig,
    PathsConfig, ToolsConfig, origin_parts, shown_url,
};
pub use hooks::{DEFAULT_HOOK_TIMEOUT_SECS, Hook, HookNetwork, HooksSettings};
pub use key::{ApiKey, read_credential};
pub use live::{FileOutcome, Judge, LiveConfig, ReloadOutcome, Verdict};
pub use mcp::{McpServer, McpSettings, McpTransport};
pub use notify::{
    NotifyFormat, NotifyFrom, NotifySink, SecretSource, UrlSource, locate as locate_notify_key,
};
pub use pins::{load_pins, lock_file, parse_pins, pin_server, save_pins};
pub use settings::{
    AllowedPaths, CompiledSettings, OutputSettings, SandboxRequire, SandboxSettings, Settings,
    SettingsContext, ToolTiers,
};
pub use telemetry::TelemetryConfig;
pub use tool_user::{
    AUTO, FIRST_UID, LAST_UID, REGISTRY_DIR, ToolUser, ToolUserError, UID_FILE, resolve_tool_user,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::protocol::{BaseUrlFrom, sha256_hex};

/// Path of the config file inside a root.
pub const CONFIG_FILE: &str = "config/config.toml";

pub use defaults::{
    SAMPLE_SCORES, SKILL_AUDIT_LOG, SYSTEMD_UNIT, default_config, default_settings, settings_schema,
};

/// Absolute paths derived from a root and its config.
#[derive(Debug, Clone, PartialEq)]
pub struct Paths {
    /// The root directory, canonical.
    pub root: PathBuf,
    /// `config/config.toml`.
    pub config: PathBuf,
    /// The settings file.
    pub settings: PathBuf,
    /// Working directory of tools.
    pub workspace: PathBuf,
    /// Transcripts directory.
    pub transcripts: PathBuf,
    /// The audit log.
    pub events: PathBuf,
}

impl Paths {
    /// Shows `path` relative to the root when it is inside it.
    pub fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string())
    }
}

/// One consistent snapshot of both files.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Resolved paths.
    pub paths: Paths,
    /// `config/config.toml`.
    pub config: Config,
    /// `policies/settings.json`, compiled.
    pub policy: CompiledSettings,
    /// sha256 of the config file's bytes.
    pub config_sha256: String,
    /// sha256 of the settings file's bytes.
    pub settings_sha256: String,
    /// The system prompt: `api.system_prompt_file`'s content or the built-in one.
    pub system_prompt: String,
    /// `sandbox.user` resolved: whom tools run as (the helper's drop, the
    /// workspace ACLs and the socket's refusal all read this, never the setting).
    pub tool_user: ToolUser,
    /// The config file's text: a reload judging the settings file alone pairs
    /// it with this, the config in force.
    pub(crate) config_text: Arc<str>,
    /// The settings file's text, paired likewise with a new config file.
    pub(crate) settings_text: Arc<str>,
    /// Where `config.api.base_url` came from: the file, or the environment
    /// variable [`BASE_URL_ENV`] that overrides it.
    pub base_url_from: BaseUrlFrom,
}

/// The environment variable that, when set, overrides `api.base_url` (the
/// convention of the Anthropic SDKs and Claude Code).
pub const BASE_URL_ENV: &str = "ANTHROPIC_BASE_URL";

/// Applies [`BASE_URL_ENV`] over `api.base_url`; says which one is in force. A
/// value that is not an http(s) URL is an error naming the variable.
fn base_url_override(config: &mut Config) -> Result<BaseUrlFrom, ConfigError> {
    let Some(url) = std::env::var_os(BASE_URL_ENV) else {
        return Ok(BaseUrlFrom::Config);
    };
    let url = url.to_string_lossy();
    if url.is_empty() {
        return Ok(BaseUrlFrom::Config);
    }
    if let Err(why) = file::http_url(&url) {
        return Err(ConfigError::invalid(
            &format!("environment variable {BASE_URL_ENV}"),
            None,
            BASE_URL_ENV,
            format!(
                "{url:?} is not an http(s) URL ({why}); fix it or unset it to use api.base_url"
            ),
        ));
    }
    config.api.base_url = url.into_owned();
    Ok(BaseUrlFrom::Environment)
}

/// The built-in system prompt.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are harnessd, an agent that completes tasks for an \
operations team by using tools. Tools run in a sandbox whose working directory is the \
workspace; relative paths are resolved against it. Some calls need a human's approval or are \
refused by policy: when a call is refused, do not retry it unchanged. Prefer reading files \
with read_file and list_dir over shell commands. When you have the answer, reply with it \
directly and concisely, without calling more tools.";

/// Where tasks get the config and policy in force. A fixed snapshot for `run`;
/// hot reload swaps what `current` returns.
pub trait ConfigSource: Send + Sync {
    /// The snapshot in force now.
    fn current(&self) -> std::sync::Arc<Loaded>;
}

impl ConfigSource for std::sync::Arc<Loaded> {
    fn current(&self) -> std::sync::Arc<Loaded> {
        self.clone()
    }
}

/// Resolves `p` against `root` unless it is absolute.
pub fn resolve(root: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}

/// Largest config, settings or system prompt file read: far past any real one, so
/// a link to `/dev/zero` or a runaway generator cannot fill the daemon's memory.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The bytes of the regular file at `path` (links followed). A FIFO or device is
/// refused before it is read: opening or reading one could block the reload for
/// ever (every later edit and SIGHUP would be lost) or never end.
pub(crate) fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(
            "not a regular file (a FIFO, device or directory)",
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_FILE_BYTES / (1024 * 1024)
        )));
    }
    Ok(bytes)
}

/// [`read_regular`] as UTF-8 text.
fn read_regular_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_regular(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn read(path: &Path, name: &str) -> Result<String, ConfigError> {
    let text = read_regular_text(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    // An empty file is a write in progress (truncate, then write), never a policy.
    if text.trim().is_empty() {
        return Err(ConfigError::invalid(
            name,
            None,
            "",
            "the file is empty; write it whole (harnessd init writes the defaults)",
        ));
    }
    Ok(text)
}

/// Reads and validates both files of the root at `root`.
pub fn load(root: &Path) -> Result<Loaded, ConfigError> {
    let root = root.canonicalize().map_err(|source| ConfigError::Read {
        path: root.to_path_buf(),
        source,
    })?;
    let config_text = read(&root.join(CONFIG_FILE), CONFIG_FILE)?;
    let config = Config::parse(&config_text, CONFIG_FILE)?;
    let settings_path = resolve(&root, &config.paths.settings);
    let settings_text = read(&settings_path, &config.paths.settings)?;
    assemble(&root, &config_text, &settings_text)
}

/// Validates the two texts as the files of the root at `root` (canonical):
/// everything [`load`] checks beyond reading them.
pub fn assemble(
    root: &Path,
    config_text: &str,
    settings_text: &str,
) -> Result<Loaded, ConfigError> {
    let root = root.to_path_buf();
    let mut config = Config::parse(config_text, CONFIG_FILE)?;
    let base_url_from = base_url_override(&mut config)?;
    let settings_name = config.paths.settings.clone();
    // The lock file is read with the settings: their rules are checked against
    // the pinned definitions.
    let pins = Arc::new(load_pins(&root)?);
    let context = SettingsContext {
        pins: Some(&pins),
        api_key_env: Some(&config.api.api_key_env),
    };
    let policy = Settings::parse_in(settings_text, &settings_name, context)?;
    let paths = Paths {
        config: root.join(CONFIG_FILE),
        settings: resolve(&root, &config.paths.settings),
        workspace: resolve(&root, &config.paths.workspace),
        transcripts: resolve(&root, &config.paths.transcripts),
        events: resolve(&root, &config.paths.events),
        root,
    };
    if !paths.workspace.is_dir() {
        let loc = find_key(config_text, "paths.workspace");
        return Err(ConfigError::invalid(
            CONFIG_FILE,
            loc,
            "paths.workspace",
            format!(
                "{} is not a directory; create it",
                paths.workspace.display()
            ),
        ));
    }
    let system_prompt = match &config.api.system_prompt_file {
        None => DEFAULT_SYSTEM_PROMPT.to_string(),
        Some(file) => {
            let path = resolve(&paths.root, file);
            read_regular_text(&path).map_err(|e| {
                ConfigError::invalid(
                    CONFIG_FILE,
                    find_key(config_text, "api.system_prompt_file"),
                    "api.system_prompt_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?
        }
    };
    let tool_user = resolve_tool_user(&paths.root, &policy.settings.sandbox.user).map_err(|e| {
        ConfigError::invalid(
            &settings_name,
            find_key(settings_text, "sandbox.user"),
            "sandbox.user",
            e.to_string(),
        )
    })?;
    Ok(Loaded {
        tool_user,
        system_prompt,
        paths,
        config,
        policy,
        config_sha256: sha256_hex(config_text.as_bytes()),
        settings_sha256: sha256_hex(settings_text.as_bytes()),
        config_text: config_text.into(),
        settings_text: settings_text.into(),
        base_url_from,
    })
}

/// Writes a root with the default files into `dir`, keeping any file that exists.
/// Returns the files written.
pub fn init(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    // `run/` too: the systemd unit names it in ReadWritePaths=, and a path missing
    // there fails the service's start.
    for sub in [
        "config",
        "policies",
        "workspace",
        "transcripts",
        "run",
        "systemd",
        "skills/audit-log",
    ] {
        // The socket's directory is closed to others from the start (serve would
        // make it so anyway).
        let mode = if sub == "run" { 0o700 } else { 0o777 };
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), mode)
            .create(dir.join(sub))?;
    }
    let files = [
        (CONFIG_FILE, default_config()),
        ("policies/settings.json", default_settings()),
        ("policies/settings.schema.json", settings_schema()),
        ("transcripts/.gitignore", "*\n!.gitignore\n".to_string()),
        ("workspace/scores.csv", SAMPLE_SCORES.to_string()),
        ("systemd/harnessd.service", SYSTEMD_UNIT.to_string()),
        ("skills/audit-log/SKILL.md", SKILL_AUDIT_LOG.to_string()),
    ];
    for (rel, content) in files {
        let path = dir.join(rel);
        // Created exclusively: an existing entry is kept, and one that is a link
        // (a dangling one a tool left in the workspace, say) is never written
        // through, which `exists()` + `write` would do for a dangling link.
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path);
        match created {
            Ok(mut file) => {
                std::io::Write::write_all(&mut file, content.as_bytes())?;
                written.push(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}
