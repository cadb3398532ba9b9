//! `policies/settings.json`: allowed paths, tool tiers, output caps, sandbox limits.
//!
//! Parsed with unknown keys rejected (only `"$schema"` is extra), then validated:
//! every rule must name a real tool and carry a pattern that compiles, so a typo in
//! a deny rule is an error instead of a rule that silently matches nothing. The
//! rules are compiled, and decisions made, by [`crate::policy`], which knows
//! nothing of this file: this module hands it the lists as plain data and turns
//! its [`RuleError`] into a located [`ConfigError`].

use std::ops::Deref;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{ConfigError, find_json_value};
use super::hooks::HooksSettings;
use super::mcp::McpSettings;
use crate::policy::{self, Decision, McpSubject, RuleError, RuleLists};
use crate::protocol::Tier;
use crate::protocol::mcp::PinFile;

/// The whole of `policies/settings.json`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Editors use this to validate the file; harnessd ignores it.
    #[serde(rename = "$schema", skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// What a tool process may read and write.
    pub allowed_paths: AllowedPaths,
    /// Tool tiers.
    pub tools: ToolTiers,
    /// Caps on what the model sees.
    pub output: OutputSettings,
    /// Limits of every tool process.
    pub sandbox: SandboxSettings,
    /// MCP servers: their tools are called as `mcp__<server>__<tool>` under the
    /// same tiers as built-in tools.
    pub mcp: McpSettings,
    /// Operator programs consulted before and after tool calls and at a task's
    /// end, each run confined with its own read set, environment and network.
    pub hooks: HooksSettings,
}

/// `allowed_paths`: paths relative to the root unless absolute.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AllowedPaths {
    /// Readable (and executable) trees.
    pub read: Vec<String>,
    /// Writable trees (also readable).
    pub write: Vec<String>,
}

impl Default for AllowedPaths {
    fn default() -> Self {
        let read = [
            "workspace",
            "/usr",
            "/bin",
            "/lib",
            "/lib64",
            "/etc/ld.so.cache",
            "/etc/alternatives",
            "/etc/localtime",
            "/dev/null",
            "/dev/urandom",
            "/dev/zero",
        ];
        AllowedPaths {
            read: read.iter().map(|s| s.to_string()).collect(),
            write: vec!["workspace".into(), "/dev/null".into()],
        }
    }
}

/// `tools`: which calls run, ask a human, or are refused.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ToolTiers {
    /// Tier of a call no rule matches.
    pub default: Tier,
    /// Rules whose calls run without asking. A pattern rule of `run_bash` or
    /// `run_python` runs its calls read-only (no write but `/dev/null` and a private
    /// temporary directory).
    pub allow: Vec<String>,
    /// Pattern rules whose calls run without asking *and* with `allowed_paths.write`:
    /// for commands that must write. Same syntax and proof as `allow`.
    pub allow_write: Vec<String>,
    /// Rules whose calls need a human's approval.
    pub ask: Vec<String>,
    /// Rules whose calls are refused.
    pub deny: Vec<String>,
}

impl Default for ToolTiers {
    fn default() -> Self {
        let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        ToolTiers {
            default: Tier::Ask,
            allow: v(policy::DEFAULT_ALLOW),
            allow_write: Vec::new(),
            ask: v(policy::DEFAULT_ASK),
            deny: v(policy::DEFAULT_DENY),
        }
    }
}

/// `output`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSettings {
    /// Characters of one tool result the model sees, marker not counted.
    pub max_chars: usize,
    /// MiB of full tool output kept under `transcripts/<task_id>/` per task; past
    /// it the rest is counted, not kept.
    pub max_spool_mb: u64,
}

impl Default for OutputSettings {
    fn default() -> Self {
        OutputSettings {
            max_chars: 8000,
            max_spool_mb: 256,
        }
    }
}

/// Whether a weaker sandbox than configured may run tools.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxRequire {
    /// Refuse to run tools if any layer cannot be enforced.
    Full,
    /// Run with what the kernel offers and say so in every `tool_finished`.
    BestEffort,
}

/// `sandbox`: limits applied to every tool process.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSettings {
    /// Whether tool processes may use the network.
    pub network: bool,
    /// Wall-clock seconds before the whole process tree is killed.
    pub timeout_secs: u64,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_secs: u64,
    /// Address space in MiB.
    pub memory_mb: u64,
    /// Processes of the sandbox user.
    pub max_processes: u64,
    /// Largest file a tool may write, in MiB.
    pub max_file_mb: u64,
    /// Open descriptors per process.
    pub max_open_files: u64,
    /// MiB of the private temporary directory (a tmpfs) of a read-only call.
    pub tmp_mb: u64,
    /// Whom tools run as when harnessd runs as root: `"auto"` (a uid of the
    /// root's own from 61184–65519, kept in `config/sandbox-uid`), an account
    /// name, or a numeric uid. Read at start: a change needs a restart.
    pub user: String,
    /// `full` or `best_effort`.
    pub require: SandboxRequire,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            network: false,
            timeout_secs: 30,
            cpu_secs: 60,
            memory_mb: 1024,
            max_processes: 64,
            max_file_mb: 256,
            max_open_files: 256,
            tmp_mb: 256,
            user: "auto".into(),
            require: SandboxRequire::Full,
        }
    }
}

/// Settings as written plus their compiled rules. Derefs to the compiled
/// [`policy::Policy`], so `policy::decide(&loaded.policy, …)` and
/// `loaded.policy.deny` read the rules while `loaded.policy.settings` reads the file.
#[derive(Debug, Clone)]
pub struct CompiledSettings {
    /// The file as written.
    pub settings: Settings,
    /// `tools`, compiled.
    pub rules: policy::Policy,
    /// The pinned MCP tool definitions the rules were checked against (the
    /// root's lock file; none for settings parsed on their own).
    pub pins: Arc<PinFile>,
}

impl CompiledSettings {
    /// Decides a call of `server`'s `tool` with `input`, its pinned definition
    /// looked up in [`CompiledSettings::pins`]; `current` is `false` when the
    /// server now lists another definition of the tool.
    pub fn decide_mcp(&self, server: &str, tool: &str, input: &Value, current: bool) -> Decision {
        let pinned = self.pins.tool(server, tool).map(|p| &p.definition);
        policy::decide_mcp(
            &self.rules,
            McpSubject {
                server,
                tool,
                input,
                pinned,
                current,
            },
        )
    }
}

/// What validating a settings file needs beyond its text: the root's pinned MCP
/// tool definitions and the config's `api.api_key_env`. [`Default`] is neither
/// (settings judged on their own).
#[derive(Debug, Clone, Copy, Default)]
pub struct SettingsContext<'a> {
    /// The pins rules are checked against; `None`: no pins.
    pub pins: Option<&'a Arc<PinFile>>,
    /// The variable holding the API key, which no MCP server's `env` may name
    /// (`ANTHROPIC_API_KEY` and `HARNESSD_*` are refused whatever this is).
    pub api_key_env: Option<&'a str>,
}

impl Deref for CompiledSettings {
    type Target = policy::Policy;

    fn deref(&self) -> &policy::Policy {
        &self.rules
    }
}

impl ToolTiers {
    /// The lists as plain data for [`policy::Policy::compile`], with the MCP
    /// servers rules may name and the pins they are checked against.
    pub fn rule_lists<'a>(&'a self, mcp_servers: &'a [String], pins: &'a PinFile) -> RuleLists<'a> {
        RuleLists {
            default: self.default,
            allow: &self.allow,
            allow_write: &self.allow_write,
            ask: &self.ask,
            deny: &self.deny,
            mcp_servers,
            pins,
        }
    }
}

impl Settings {
    /// Parses and validates the text of a settings file on its own (no pins, the
    /// API key's variable not known); `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<CompiledSettings, ConfigError> {
        Settings::parse_in(text, file, SettingsContext::default())
    }

    /// Parses and validates the text of a settings file of a root whose pins and
    /// config `context` gives; `file` names it in errors.
    pub fn parse_in(
        text: &str,
        file: &str,
        context: SettingsContext<'_>,
    ) -> Result<CompiledSettings, ConfigError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let settings: Settings = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| super::error::json_error(text, file, &e.path().to_string(), e.inner()))?;
        settings.compile(text, file, context)
    }

    fn compile(
        self,
        text: &str,
        file: &str,
        context: SettingsContext<'_>,
    ) -> Result<CompiledSettings, ConfigError> {
        let bad = |key: String, message: String| {
            ConfigError::invalid(file, find_json_value(text, &key), key, message)
        };
        let limits = [
            ("output.max_chars", self.output.max_chars as u64),
            ("output.max_spool_mb", self.output.max_spool_mb),
            ("sandbox.tmp_mb", self.sandbox.tmp_mb),
            ("sandbox.timeout_secs", self.sandbox.timeout_secs),
            ("sandbox.cpu_secs", self.sandbox.cpu_secs),
            ("sandbox.memory_mb", self.sandbox.memory_mb),
            ("sandbox.max_processes", self.sandbox.max_processes),
            ("sandbox.max_file_mb", self.sandbox.max_file_mb),
            ("sandbox.max_open_files", self.sandbox.max_open_files),
        ];
        for (key, value) in limits {
            if value == 0 {
                return Err(bad(key.into(), "must be greater than 0".into()));
            }
        }
        if self.sandbox.user.is_empty() {
            return Err(bad("sandbox.user".into(), "must name an account".into()));
        }
        for (list, paths) in [
            ("allowed_paths.read", &self.allowed_paths.read),
            ("allowed_paths.write", &self.allowed_paths.write),
        ] {
            for (i, p) in paths.iter().enumerate() {
                if p.is_empty() {
                    return Err(bad(format!("{list}[{i}]"), "empty path".into()));
                }
            }
        }
        super::mcp::validate(&self.mcp, context.api_key_env).map_err(|(k, m)| bad(k, m))?;
        super::hooks::validate(&self.hooks, context.api_key_env).map_err(|(k, m)| bad(k, m))?;
        let pins = context.pins.cloned().unwrap_or_default();
        let servers: Vec<String> = self.mcp.servers.keys().cloned().collect();
        let lists = self.tools.rule_lists(&servers, &pins);
        let rules = policy::Policy::compile(lists).map_err(|e| {
            let RuleError {
                list,
                index,
                message,
                ..
            } = e;
            let key = match index {
                Some(i) => format!("tools.{list}[{i}]"),
                None => format!("tools.{list}"),
            };
            bad(key, message)
        })?;
        Ok(CompiledSettings {
            settings: self,
            rules,
            pins,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_names_key_and_line() {
        let text = "{\n  \"output\": { \"max_chars\": 10, \"maxchars\": 3 }\n}";
        let s = Settings::parse(text, "s.json")
            .expect_err("unknown")
            .to_string();
        assert!(s.starts_with("s.json:2:"), "{s}");
        assert!(
            s.contains("output.maxchars") || s.contains("`maxchars`"),
            "{s}"
        );
    }

    #[test]
    fn rule_naming_no_tool_is_an_error() {
        let text = "{\"tools\": {\"deny\": [\"read_fiel(workspace/x)\"]}}";
        let s = Settings::parse(text, "s.json")
            .expect_err("typo")
            .to_string();
        assert!(s.contains("tools.deny[0]"), "{s}");
        assert!(s.contains("read_fiel"), "{s}");
    }

    /// Policy reports a bad rule by tier and position; the key and line are
    /// config's, as before policy compiled the rules itself.
    #[test]
    fn bad_rule_names_its_tier_index_and_line() {
        let text = "{\"tools\": {\n  \"ask\": [\"read_file\",\n    \"run_bash(ls\"]}}";
        let s = Settings::parse(text, "s.json")
            .expect_err("unclosed")
            .to_string();
        assert!(s.contains("tools.ask[1]"), "{s}");
        assert!(s.contains("does not end with ')'"), "{s}");
        // The rule's own line and column, not its list's.
        assert!(s.starts_with("s.json:3:5: key `tools.ask[1]`"), "{s}");
    }

    /// Each list names itself: `allow_write` is of the allow tier but its own key.
    #[test]
    fn a_bad_allow_write_rule_names_its_own_list() {
        let text = "{\"tools\": {\"allow_write\": [\"run_bash(ls *)\", \"run_bsh(x)\"]}}";
        let s = Settings::parse(text, "s.json")
            .expect_err("typo")
            .to_string();
        assert!(s.contains("key `tools.allow_write[1]`"), "{s}");
    }

    #[test]
    fn bad_tier_is_an_error() {
        let text = "{\"tools\": {\"default\": \"maybe\"}}";
        let s = Settings::parse(text, "s.json")
            .expect_err("tier")
            .to_string();
        assert!(s.contains("tools.default"), "{s}");
    }
}
