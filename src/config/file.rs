//! `config/config.toml`: API, model, loop limits, paths and daemon settings.
//!
//! Parsed in two stages: serde with every default and unknown keys rejected, then
//! [`Config::validate`] for what types cannot say (limits above zero, known provider).
//! This module owns the shape of the file; it does not read environment variables.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ConfigError, find_key};

const MIB: u64 = 1024 * 1024;

/// The whole of `config/config.toml`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The model endpoint and request parameters.
    pub api: ApiConfig,
    /// Limits of the agent loop.
    #[serde(rename = "loop")]
    pub loop_: LoopConfig,
    /// Which tools are advertised.
    pub tools: ToolsConfig,
    /// Where the other files live, relative to the root.
    pub paths: PathsConfig,
    /// Settings of `harnessd serve`.
    pub daemon: DaemonConfig,
    /// How the audit log reaches the disk.
    pub audit: AuditConfig,
    /// When the history is compacted.
    pub context: ContextConfig,
    /// Prices in US dollars per million tokens, by model id, adding to or replacing
    /// the built-in ones for current Claude models.
    pub pricing: std::collections::BTreeMap<String, crate::protocol::Price>,
    /// Trace export over OTLP/HTTP.
    pub telemetry: super::telemetry::TelemetryConfig,
    /// Notification sinks: each `[[notify]]` table is a webhook that the events it
    /// names are POSTed to, read from the audit log after the sink's cursor.
    pub notify: Vec<super::notify::NotifySink>,
}

/// `[context]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ContextConfig {
    /// Input tokens of a response (cache reads and writes included) above which
    /// the history is compacted before the next request.
    pub compress_threshold_tokens: u64,
    /// Messages at the end of the history that compaction never touches.
    pub keep_recent_messages: u32,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            compress_threshold_tokens: 60_000,
            keep_recent_messages: 6,
        }
    }
}

/// `[audit]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// When events.jsonl is synced to disk: `"before_action"` syncs it before a tool
    /// runs, an approval takes effect and a task is acknowledged; `"off"` only writes
    /// (a power loss may lose the last lines).
    pub sync: AuditSync,
    /// Size in MiB past which events.jsonl is closed as
    /// `events-<first_seq>-<last_seq>.jsonl` and a new file starts; 0: never.
    /// Fractions are allowed (a test rotates a small log).
    pub rotate_mb: f64,
    /// MiB kept free in `transcripts/` (a preallocated file) for recording a
    /// failure: given up only to record it and stop; tool output is not spooled
    /// while free space is under it. 0: no reserve.
    pub reserve_mb: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            sync: AuditSync::default(),
            rotate_mb: 256.0,
            reserve_mb: 64,
        }
    }
}

/// `audit.sync`: whether a line that gates an action is on disk before the action.
/// Any other value is rejected by serde with the key's location.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditSync {
    /// events.jsonl is synced (fdatasync) before a tool runs, an approval takes
    /// effect and a task is acknowledged; one sync covers every line before it.
    #[default]
    BeforeAction,
    /// Lines are written but never synced: a power loss may lose the last ones.
    Off,
}

/// `[api]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Wire protocol of the endpoint; only `anthropic` exists.
    pub provider: String,
    /// Base URL of the Messages API. The environment variable
    /// `ANTHROPIC_BASE_URL`, when set, overrides it (the Anthropic SDKs'
    /// convention); `check` and `daemon_started` say which one is in force.
    pub base_url: String,
    /// Name of the environment variable holding the key.
    pub api_key_env: String,
    /// A file holding the key instead of the environment variable (mode 0600, outside
    /// every allowed path), e.g. a systemd credential.
    pub api_key_file: Option<String>,
    /// Model id for new requests.
    pub model: String,
    /// `max_tokens` of each request.
    pub max_tokens: u32,
    /// Timeout of one attempt, from sending it to the last byte of the answer, streamed or not.
    pub timeout_secs: u64,
    /// Retries after the first attempt, on 408/429/500/502/503/504/529, connection
    /// errors and timeouts: 500 ms × 2ⁿ with full jitter, capped at 30 s, or the
    /// `retry-after` header (capped at 60 s).
    pub max_retries: u32,
    /// A file whose text replaces the built-in system prompt.
    pub system_prompt_file: Option<String>,
    /// Enables extended thinking with this budget: at least 1024 and below
    /// `api.max_tokens`.
    pub thinking_budget_tokens: Option<u32>,
    /// Largest model response read, in MiB: a larger one is an error, not retried.
    pub max_response_mb: u64,
    /// Requests use server-sent events; the assembled answer is the same.
    pub stream: bool,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            provider: "anthropic".into(),
            base_url: "https://api.anthropic.com".into(),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            api_key_file: None,
            model: "claude-sonnet-4-5".into(),
            max_tokens: 4096,
            timeout_secs: 120,
            max_retries: 4,
            system_prompt_file: None,
            thinking_budget_tokens: None,
            max_response_mb: 32,
            stream: true,
        }
    }
}

/// `[loop]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LoopConfig {
    /// Model requests per task.
    pub max_turns: u32,
    /// Input + output tokens summed over a task.
    pub token_budget: u64,
    /// Tool calls executed per turn; the rest are answered unexecuted.
    pub max_tool_calls_per_turn: u32,
    /// Identical tool-call sets in a row that stop the task.
    pub no_progress_repeats: u32,
    /// US dollars a task may cost (from usage and prices) before it stops.
    pub usd_budget: Option<f64>,
    /// How deep child tasks may nest: 0 turns `delegate` off, 1 lets a task
    /// delegate but not its children, and so on.
    pub max_delegation_depth: u32,
    /// How many of one task's `delegate` calls run at once.
    pub max_parallel_delegates: u32,
}

/// The deepest nesting `loop.max_delegation_depth` may allow: each level adds to
/// the length of a child's id and to the tasks one slot runs.
pub const MAX_DELEGATION_DEPTH: u32 = 8;

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            max_turns: 12,
            token_budget: 200_000,
            max_tool_calls_per_turn: 8,
            no_progress_repeats: 3,
            usd_budget: None,
            max_delegation_depth: 2,
            max_parallel_delegates: 2,
        }
    }
}

/// `[tools]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Tools advertised to the model; unset means every built-in tool.
    pub enabled: Option<Vec<String>>,
}

/// `[paths]`, each relative to the root unless absolute.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PathsConfig {
    /// The policy file.
    pub settings: String,
    /// Working directory of tools.
    pub workspace: String,
    /// Directory of transcripts and full tool outputs.
    pub transcripts: String,
    /// The audit log.
    pub events: String,
}

impl Default for PathsConfig {
    fn default() -> Self {
        PathsConfig {
            settings: "policies/settings.json".into(),
            workspace: "workspace".into(),
            transcripts: "transcripts".into(),
            events: "transcripts/events.jsonl".into(),
        }
    }
}

/// `[daemon]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Control API socket.
    pub socket: String,
    /// Tasks running at once.
    pub max_concurrent_tasks: u32,
    /// Seconds before an unanswered approval becomes a denial.
    pub approval_timeout_secs: u64,
    /// Seconds running tasks get on SIGTERM.
    pub shutdown_grace_secs: u64,
    /// A group whose members may use the control API besides the daemon's user and
    /// root (socket mode 0660, that group). Read at start: a change needs a restart.
    pub operators_group: Option<String>,
    /// Control connections open at once; past it, the oldest connection that has
    /// sent nothing is closed to make room, and a new one is closed at once only
    /// when every open one is busy, so idle peers can neither exhaust descriptors
    /// nor lock out `/healthz`. Read at start: a change needs a restart.
    pub max_connections: u32,
    /// The daemon's own memory bound, in MiB: three quarters of it is the budget
    /// that the response bodies of all running tasks share, each counted at four
    /// times its size until saved (a response that would pass it waits for room;
    /// at least 16/3 × `api.max_response_mb` and 4 × it + 32), and `serve` runs in
    /// a cgroup of its
    /// own limited to all of it, beside the tools' call cgroups. Read at start: a
    /// change needs a restart.
    pub memory_mb: u64,
    /// A TCP address (`127.0.0.1:8080`) on which the daemon also serves `/metrics`
    /// and `/healthz` without a login and, with a console login, the control API
    /// and the web console. Read at start: a change needs a restart.
    pub listen: Option<String>,
    /// Lets `daemon.listen` be an address other than loopback; TLS must then be
    /// terminated in front of it. Read at start: a change needs a restart.
    pub listen_public: bool,
    /// The origin browsers see the console at when a proxy serves it under a name
    /// (`https://harnessd.example.com`): its host is accepted as `Host` and it as
    /// `Origin`, and login links use it. Read at start: a change needs a restart.
    pub console_origin: Option<String>,
    /// How long a console login lasts, in hours (a fraction is allowed); a login
    /// link from `console-url` lasts at most 10 minutes and never longer than this.
    pub console_session_hours: f64,
}

/// MiB an idle daemon needs of `daemon.memory_mb` for itself (measured idle RSS
/// 11–17 MiB with 20 000 old tasks, peak 27 MiB), kept out of the response budget.
pub const DAEMON_BASELINE_MB: u64 = 32;

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: "run/harnessd.sock".into(),
            max_concurrent_tasks: 4,
            approval_timeout_secs: 600,
            shutdown_grace_secs: 10,
            operators_group: None,
            max_connections: 256,
            memory_mb: 256,
            listen: None,
            listen_public: false,
            console_origin: None,
            console_session_hours: 12.0,
        }
    }
}

impl Config {
    /// Parses and validates the text of a config file; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::parse(text).map_err(|e| toml_error(text, file, "", &e))?;
        let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            toml_error(text, file, &key, e.inner())
        })?;
        config.validate(text, file)?;
        Ok(config)
    }

    /// What serde cannot check, in the order the file is read: the first
    /// failure is reported, at its key's line in `text`.
    fn validate(&self, text: &str, file: &str) -> Result<(), ConfigError> {
        let checked = self
            .validate_api()
            .and_then(|()| self.validate_limits())
            .and_then(|()| self.validate_thinking_and_key())
            .and_then(|()| self.validate_cost())
            .and_then(|()| validate_operators_group(self.daemon.operators_group.as_deref()))
            .and_then(|()| self.daemon.validate_listen())
            .and_then(|()| validate_enabled_tools(self.tools.enabled.as_deref()))
            .and_then(|()| {
                self.telemetry
                    .validate()
                    .or_else(|(key, message)| Bad::at(key, message))
            })
            .and_then(|()| {
                super::notify::validate(&self.notify, &self.api.api_key_env)
                    .map_err(|(key, message)| Bad { key, message })
            });
        checked.map_err(|Bad { key, message }| {
            let at = super::notify::locate(text, &key).or_else(|| find_key(text, &key));
            ConfigError::invalid(file, at, key, message)
        })
    }

    /// A known provider at an http(s) URL.
    fn validate_api(&self) -> Result<(), Bad> {
        if self.api.provider != "anthropic" {
            return Bad::at(
                "api.provider",
                format!(
                    "unknown provider {:?}; the only one is \"anthropic\"",
                    self.api.provider
                ),
            );
        }
        // An empty model passes TOML and serde, and the API would refuse every request
        // with it: a task would fail at its first turn instead of at the edit.
        if self.api.model.trim().is_empty() {
            return Bad::at(
                "api.model",
                format!(
                    "{:?} names no model; write one, e.g. model = \"claude-sonnet-4-5\"",
                    self.api.model
                ),
            );
        }
        if let Err(why) = http_url(&self.api.base_url) {
            return Bad::at(
                "api.base_url",
                format!("{:?} is not an http(s) URL: {why}", self.api.base_url),
            );
        }
        Ok(())
    }

    /// Every count and duration that a zero would make meaningless.
    fn validate_limits(&self) -> Result<(), Bad> {
        let positive: [(&str, u64); 13] = [
            ("api.max_tokens", self.api.max_tokens.into()),
            ("api.timeout_secs", self.api.timeout_secs),
            ("api.max_response_mb", self.api.max_response_mb),
            ("loop.max_turns", self.loop_.max_turns.into()),
            ("loop.token_budget", self.loop_.token_budget),
            (
                "loop.max_tool_calls_per_turn",
                self.loop_.max_tool_calls_per_turn.into(),
            ),
            (
                "loop.no_progress_repeats",
                self.loop_.no_progress_repeats.into(),
            ),
            (
                "loop.max_parallel_delegates",
                self.loop_.max_parallel_delegates.into(),
            ),
            (
                "daemon.max_concurrent_tasks",
                self.daemon.max_concurrent_tasks.into(),
            ),
            (
                "daemon.approval_timeout_secs",
                self.daemon.approval_timeout_secs,
            ),
            (
                "daemon.shutdown_grace_secs",
                self.daemon.shutdown_grace_secs,
            ),
            ("daemon.max_connections", self.daemon.max_connections.into()),
            ("daemon.memory_mb", self.daemon.memory_mb),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Bad::at(key, "must be greater than 0".into());
            }
        }
        if self.loop_.max_delegation_depth > MAX_DELEGATION_DEPTH {
            return Bad::at(
                "loop.max_delegation_depth",
                format!("must be at most {MAX_DELEGATION_DEPTH} (0 turns delegation off)"),
            );
        }
        if !(self.audit.rotate_mb.is_finite() && self.audit.rotate_mb >= 0.0) {
            return Bad::at("audit.rotate_mb", "must be 0 (never) or more".into());
        }
        if self.response_cost_bytes() > self.response_budget_bytes() {
            // cost 4 × max ≤ budget ¾ × memory ⟺ memory ≥ 16/3 × max, and
            // 4 × max ≤ memory − baseline.
            let max = self.api.max_response_mb;
            let least = max
                .saturating_mul(16)
                .div_ceil(3)
                .max(max.saturating_mul(4).saturating_add(DAEMON_BASELINE_MB));
            return Bad::at(
                "daemon.memory_mb",
                format!(
                    "{} MiB cannot hold one response of api.max_response_mb = {} MiB: \
                     response bodies get three quarters of daemon.memory_mb (and never \
                     the daemon's own {DAEMON_BASELINE_MB} MiB), and a response costs four \
                     times its size until it is saved; set \
                     daemon.memory_mb to at least {least} or lower api.max_response_mb",
                    self.daemon.memory_mb, self.api.max_response_mb,
                ),
            );
        }
        Ok(())
    }

    /// The bytes the response bodies of all running tasks may hold together:
    /// three quarters of `daemon.memory_mb`, the rest being the daemon's own (its
    /// runtime, connections, the histories of earlier turns) — and never the
    /// [`DAEMON_BASELINE_MB`] an idle daemon needs, or a small bound would let its
    /// own cgroup kill it.
    pub fn response_budget_bytes(&self) -> u64 {
        let quarters = self.daemon.memory_mb.saturating_mul(MIB) / 4 * 3;
        let above_baseline = self
            .daemon
            .memory_mb
            .saturating_sub(DAEMON_BASELINE_MB)
            .saturating_mul(MIB);
        quarters.min(above_baseline)
    }

    /// What one response may cost from its first byte until the task has saved
    /// it: its bytes as read (buffers, the event being parsed), as the assembled
    /// message, as the transcript's answer and in the serialised transcript; each
    /// at most `api.max_response_mb`.
    pub fn response_cost_bytes(&self) -> u64 {
        self.api
            .max_response_mb
            .saturating_mul(MIB)
            .saturating_mul(4)
    }

    /// A thinking budget the API accepts, and a named key variable.
    fn validate_thinking_and_key(&self) -> Result<(), Bad> {
        if let Some(budget) = self.api.thinking_budget_tokens
            && (budget < 1024 || budget >= self.api.max_tokens)
        {
            return Bad::at(
                "api.thinking_budget_tokens",
                format!(
                    "{budget} must be at least 1024 and below api.max_tokens ({})",
                    self.api.max_tokens
                ),
            );
        }
        if self.api.api_key_env.is_empty() {
            return Bad::at(
                "api.api_key_env",
                "must name an environment variable".into(),
            );
        }
        Ok(())
    }
}

impl Config {
    /// Prices that are amounts, and a USD budget only for a model with a price.
    fn validate_cost(&self) -> Result<(), Bad> {
        for (model, p) in &self.pricing {
            for (field, v) in [
                ("input", p.input),
                ("output", p.output),
                ("cache_write", p.cache_write),
                ("cache_read", p.cache_read),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Bad::at(
                        &format!("pricing.{model}.{field}"),
                        format!("{v} is not a price (US dollars per million tokens, >= 0)"),
                    );
                }
            }
        }
        let Some(budget) = self.loop_.usd_budget else {
            return Ok(());
        };
        if !(budget.is_finite() && budget > 0.0) {
            return Bad::at(
                "loop.usd_budget",
                format!("{budget} must be greater than 0"),
            );
        }
        let model = &self.api.model;
        if crate::protocol::price_of(model, &self.pricing).is_none() {
            return Bad::at(
                "loop.usd_budget",
                format!(
                    "the model {model:?} has no price, so its cost cannot be counted; add \
                     [pricing.\"{model}\"] with input, output, cache_write and cache_read \
                     (USD per million tokens) or remove the budget"
                ),
            );
        }
        Ok(())
    }
}

/// A failed check: the key path it concerns and what is wrong.
struct Bad {
    key: String,
    message: String,
}

impl Bad {
    fn at(key: &str, message: String) -> Result<(), Bad> {
        Err(Bad {
            key: key.to_string(),
            message,
        })
    }
}

/// The scheme and authority of an origin (`https://name[:port]`, nothing after).
pub fn origin_parts(origin: &str) -> Result<(&str, &str), String> {
    let (scheme, authority) = origin
        .split_once("://")
        .filter(|(s, _)| matches!(*s, "http" | "https"))
        .ok_or_else(|| {
            format!("{origin:?} is not an origin; write e.g. \"https://harnessd.example.com\"")
        })?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    if authority.is_empty() || !authority.chars().all(plain) {
        return Err(format!(
            "{origin:?} is not an origin: a scheme and a host[:port] only, no path, no user"
        ));
    }
    // Compared as text with the `Origin` and `Host` browsers send, which never
    // carry the scheme's default port: one written here would match nothing.
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((h, "")) => (h, None),
            Some((h, p)) => (h, Some(p.strip_prefix(':').unwrap_or(p))),
            None => ("", None),
        },
        None => match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let bad = |why: &str| Err(format!("{origin:?} is not an origin: {why}"));
    if host.is_empty() || (host.contains(['[', ']', ':']) && !authority.starts_with('[')) {
        return bad("its host is missing or malformed");
    }
    if let Some(port) = port {
        let default = if scheme == "https" { 443 } else { 80 };
        match port.parse::<u16>() {
            Ok(0) | Err(_) => return bad("its port is not a port"),
            Ok(p) if p == default => {
                return bad(&format!(
                    "drop the port {default}: browsers never send the default port, so \
                     this origin would match none of their requests"
                ));
            }
            Ok(_) => {}
        }
    }
    Ok((scheme, authority))
}

/// The longest console login: a year.
const MAX_CONSOLE_SESSION_HOURS: f64 = 24.0 * 366.0;

impl DaemonConfig {
    /// The TCP address of `daemon.listen`, if set: an IP address and port (a name
    /// would be resolved at each start, and could resolve off loopback).
    pub fn listen_addr(&self) -> Option<std::net::SocketAddr> {
        self.listen.as_deref().and_then(|a| a.parse().ok())
    }

    /// Where browsers reach the console: `daemon.console_origin`, else
    /// `http://` and `daemon.listen`; `None` when it is only on the socket.
    pub fn console_base(&self) -> Option<String> {
        match (&self.console_origin, self.listen_addr()) {
            (Some(origin), _) => Some(origin.clone()),
            (None, Some(addr)) => Some(format!("http://{addr}")),
            (None, None) => None,
        }
    }

    /// `daemon.listen` is an IP address and port, on loopback unless
    /// `daemon.listen_public` is set; the session length is bounded.
    fn validate_listen(&self) -> Result<(), Bad> {
        let hours = self.console_session_hours;
        if !(hours.is_finite() && hours > 0.0 && hours <= MAX_CONSOLE_SESSION_HOURS) {
            return Bad::at(
                "daemon.console_session_hours",
                format!("must be more than 0 and at most {MAX_CONSOLE_SESSION_HOURS} (a year)"),
            );
        }
        if let Some(origin) = self.console_origin.as_deref()
            && let Err(why) = origin_parts(origin)
        {
            return Bad::at("daemon.console_origin", why);
        }
        let Some(listen) = self.listen.as_deref() else {
            return Ok(());
        };
        let addr: std::net::SocketAddr = listen.parse().map_err(|_| Bad {
            key: "daemon.listen".into(),
            message: format!(
                "{listen:?} is not an IP address and port; write e.g. \"127.0.0.1:8080\" \
                 or \"[::1]:8080\""
            ),
        })?;
        if !addr.ip().is_loopback() && !self.listen_public {
            return Bad::at(
                "daemon.listen",
                format!(
                    "{listen} is not a loopback address: anyone who can reach it could try \
                     to log in; set daemon.listen_public = true as well (and terminate TLS \
                     in front of it), or listen on 127.0.0.1"
                ),
            );
        }
        Ok(())
    }
}

/// `daemon.operators_group`, when set, names a group of this host.
fn validate_operators_group(group: Option<&str>) -> Result<(), Bad> {
    let Some(group) = group else { return Ok(()) };
    match nix::unistd::Group::from_name(group) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Bad::at(
            "daemon.operators_group",
            format!(
                "no group named {group:?} on this host; create it (groupadd \
                 {group}) or remove the key"
            ),
        ),
        Err(e) => Bad::at(
            "daemon.operators_group",
            format!("cannot look up the group {group:?}: {e}"),
        ),
    }
}

/// Every name in `tools.enabled` is a tool harnessd has.
fn validate_enabled_tools(enabled: Option<&[String]>) -> Result<(), Bad> {
    for (i, name) in enabled.into_iter().flatten().enumerate() {
        if crate::protocol::ToolName::parse(name).is_none() {
            return Bad::at(
                &format!("tools.enabled[{i}]"),
                format!(
                    "unknown tool {name:?}; known tools: {}",
                    crate::protocol::ToolName::ALL_NAMES.join(", ")
                ),
            );
        }
    }
    Ok(())
}

fn toml_error(text: &str, file: &str, key: &str, e: &toml::de::Error) -> ConfigError {
    let location = e
        .span()
        .map(|s| super::error::Location::of_offset(text, s.start));
    // toml's message repeats the source excerpt over several lines; keep its first
    // sentence, which says what is wrong.
    let message = e
        .message()
        .lines()
        .next()
        .unwrap_or("invalid TOML")
        .to_string();
    ConfigError::invalid(file, location, key, message)
}

/// Why `url` cannot be a base URL of the API: it must parse whole as an http(s)
/// URL with a host, so a space, an unclosed `[` or a stray control character is
/// refused by `check` rather than failing every request later.
pub(crate) fn http_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("it must start with http:// or https://".to_string());
    }
    if url.chars().any(|c| c.is_control() || c == ' ') {
        return Err("it holds a space or a control character".to_string());
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("it names no host".to_string());
    }
    Ok(())
}

/// `url` as it may be shown and recorded: a password in it replaced by `***`,
/// so `check` and `daemon_started` never carry a credential.
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_a_base_url_is_never_shown() {
        assert_eq!(
            shown_url("http://user:s3cret@proxy:8080/v1"),
            "http://user:***@proxy:8080/v1"
        );
        assert_eq!(shown_url("http://127.0.0.1:9"), "http://127.0.0.1:9");
    }

    #[test]
    fn a_memory_bound_below_the_daemon_baseline_is_refused() {
        let text = "[api]\nmax_response_mb = 2\n[daemon]\nmemory_mb = 11\n";
        let e = Config::parse(text, "config.toml").unwrap_err().to_string();
        assert!(e.contains("at least 40"), "{e}");
        let fits = "[api]\nmax_response_mb = 2\n[daemon]\nmemory_mb = 40\n";
        Config::parse(fits, "config.toml").unwrap();
    }

    #[test]
    fn a_memory_bound_that_cannot_hold_one_response_is_refused() {
        let text = "[api]\nmax_response_mb = 32\n[daemon]\nmemory_mb = 128\n";
        let e = Config::parse(text, "c.toml")
            .expect_err("too small")
            .to_string();
        assert!(
            e.contains("daemon.memory_mb") && e.contains("at least 171"),
            "{e}"
        );
        let fits = "[api]\nmax_response_mb = 32\n[daemon]\nmemory_mb = 171\n";
        let c = Config::parse(fits, "c.toml").expect("fits");
        assert!(c.response_cost_bytes() <= c.response_budget_bytes());
    }

    #[test]
    fn unknown_key_names_key_line_and_column() {
        let text = "[loop]\nmax_turns = 3\nmax_turnz = 4\n";
        let err = Config::parse(text, "c.toml").expect_err("unknown key");
        let s = err.to_string();
        assert!(s.starts_with("c.toml:3:1"), "{s}");
        assert!(s.contains("max_turnz"), "{s}");
    }

    #[test]
    fn an_empty_model_is_refused_with_its_line_and_key() {
        for model in ["\"\"", "\"  \""] {
            let text = format!("[api]\nmax_tokens = 100\nmodel = {model}\n");
            let s = Config::parse(&text, "c.toml")
                .expect_err("empty")
                .to_string();
            assert!(s.starts_with("c.toml:3:1: key `api.model`:"), "{s}");
        }
    }

    #[test]
    fn wrong_type_names_the_key() {
        let text = "[api]\nmax_tokens = \"lots\"\n";
        let s = Config::parse(text, "c.toml").expect_err("type").to_string();
        assert!(s.contains("c.toml:2:"), "{s}");
        assert!(s.contains("api.max_tokens"), "{s}");
    }

    #[test]
    fn audit_sync_takes_its_two_values_and_names_a_bad_one() {
        assert_eq!(Config::default().audit.sync, AuditSync::BeforeAction);
        let off = Config::parse("[audit]\nsync = \"off\"\n", "c.toml").expect("off");
        assert_eq!(off.audit.sync, AuditSync::Off);
        let s = Config::parse("[audit]\nsync = \"always\"\n", "c.toml")
            .expect_err("unknown value")
            .to_string();
        assert!(s.contains("c.toml:2:"), "{s}");
        assert!(s.contains("audit.sync"), "{s}");
    }

    #[test]
    fn operators_group_must_exist() {
        let ok = Config::parse("[daemon]\noperators_group = \"root\"\n", "c.toml").expect("root");
        assert_eq!(ok.daemon.operators_group.as_deref(), Some("root"));
        let text = "[daemon]\nsocket = \"run/x.sock\"\noperators_group = \"no-such-group-hd\"\n";
        let s = Config::parse(text, "c.toml")
            .expect_err("unknown")
            .to_string();
        assert!(
            s.starts_with(
                "c.toml:3:1: key `daemon.operators_group`: no group named \"no-such-group-hd\""
            ),
            "{s}"
        );
    }

    #[test]
    fn prices_and_the_usd_budget_are_checked_with_their_lines() {
        let text = "[loop]\nusd_budget = 2.5\n[pricing.\"m1\"]\ninput = 1.0\noutput = -2.0\n\
                    cache_write = 1.0\ncache_read = 0.1\n";
        let s = Config::parse(text, "c.toml")
            .expect_err("negative")
            .to_string();
        assert!(s.starts_with("c.toml:5:1: key `pricing.m1.output`"), "{s}");
        let text = "[api]\nmodel = \"m1\"\n[loop]\nusd_budget = 2.5\n";
        let s = Config::parse(text, "c.toml")
            .expect_err("unpriced")
            .to_string();
        assert!(s.starts_with("c.toml:4:1: key `loop.usd_budget`"), "{s}");
        assert!(s.contains("\"m1\" has no price"), "{s}");
        let priced = format!(
            "{text}[pricing.m1]\ninput = 1.0\noutput = 2.0\ncache_write = 1.0\ncache_read = 0.1\n"
        );
        let ok = Config::parse(&priced, "c.toml").expect("priced");
        assert_eq!(ok.loop_.usd_budget, Some(2.5));
        assert!(Config::parse("[loop]\nusd_budget = 2.5\n", "c.toml").is_ok());
    }

    #[test]
    fn zero_limit_is_rejected_with_its_line() {
        let text = "[loop]\nmax_turns = 0\n";
        let s = Config::parse(text, "c.toml").expect_err("zero").to_string();
        assert_eq!(
            s,
            "c.toml:2:1: key `loop.max_turns`: must be greater than 0"
        );
    }

    #[test]
    fn max_connections_defaults_to_256_and_zero_is_rejected() {
        let default = Config::parse("", "c.toml").expect("empty");
        assert_eq!(default.daemon.max_connections, 256);
        let text = "[daemon]\nsocket = \"run/x.sock\"\nmax_connections = 0\n";
        let s = Config::parse(text, "c.toml").expect_err("zero").to_string();
        assert_eq!(
            s,
            "c.toml:3:1: key `daemon.max_connections`: must be greater than 0"
        );
    }
}
