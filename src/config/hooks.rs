//! The `hooks` section of settings.json: operator programs consulted before a
//! tool call (`pre_tool`), after it (`post_tool`) and when a task has ended
//! (`task_finished`), each run confined with its own read set, environment and
//! network.
//!
//! A hook's command and environment are checked as a stdio MCP server's are (the
//! same functions of [`super::mcp`]): the program is not found relative to the
//! workspace, and its `env` never names the API key's variable or the daemon's own.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::protocol::HookPoint;
use crate::protocol::mcp::valid_server_name;

/// Seconds a hook may run when it gives no `timeout_secs`.
pub const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 10;

/// `hooks`: the programs of each point, run in order.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HooksSettings {
    /// Consulted after the policy decided a call and before the decision is
    /// recorded: `deny` and `ask` tighten, `allow` (with `may_allow`) lifts a
    /// rule's or the default's `ask`.
    pub pre_tool: Vec<Hook>,
    /// Run after a call, before the model sees its result: may replace the text
    /// the model sees (never the kept output).
    pub post_tool: Vec<Hook>,
    /// Run once a task has ended and `task_finished` is recorded; it changes
    /// nothing.
    pub task_finished: Vec<Hook>,
}

/// One hook: a program given one JSON object on stdin, answering one on stdout.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    /// Its name, in records (`rule: "hook:<name>"`): 1 to 32 of `a-z`, `0-9`,
    /// `_` and `-`, starting with a letter or digit; unique within its point.
    pub name: String,
    /// The program and its arguments: a program on the sandbox's PATH or an
    /// absolute path.
    pub command: Vec<String>,
    /// Globs over the tool names it is consulted for (`run_bash`, `mcp__*`);
    /// default every tool. Not for `task_finished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Vec<String>")]
    pub tools: Option<Vec<String>>,
    /// Seconds it may run before its whole process tree is killed (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub timeout_secs: Option<u64>,
    /// `false` (default): no network; `true`: any; a list of TCP ports: connect
    /// to exactly those (no UDP, so names resolve only from `/etc/hosts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "HookNetwork")]
    pub network: Option<HookNetwork>,
    /// pre_tool only: whether its `allow` may lift an `ask` that came from a rule
    /// or the default (never a deny, never a raise harnessd made). Default `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub may_allow: Option<bool>,
    /// Trees it may read beyond `allowed_paths.read`, relative to the root unless
    /// absolute. It writes nothing but a private temporary directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Vec<String>")]
    pub read: Option<Vec<String>>,
    /// Its environment variables beyond the tools' base, each name in the hook →
    /// the name of the daemon's variable holding the value. The API key's
    /// variable can never be named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub env: Option<BTreeMap<String, String>>,
}

/// A hook's network: on, off, or TCP connections to the listed ports only.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, JsonSchema)]
#[serde(untagged)]
pub enum HookNetwork {
    /// `true` or `false`.
    All(bool),
    /// TCP ports it may connect to.
    Ports(Vec<u16>),
}

impl<'de> Deserialize<'de> for HookNetwork {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<HookNetwork, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = HookNetwork;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or a list of TCP ports (1 to 65535)")
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<HookNetwork, E> {
                Ok(HookNetwork::All(b))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<HookNetwork, A::Error> {
                let mut ports = Vec::new();
                while let Some(p) = seq.next_element::<u16>()? {
                    ports.push(p);
                }
                Ok(HookNetwork::Ports(ports))
            }
        }
        d.deserialize_any(V)
    }
}

impl HooksSettings {
    /// The hooks of `point`, in order.
    pub fn at(&self, point: HookPoint) -> &[Hook] {
        match point {
            HookPoint::PreTool => &self.pre_tool,
            HookPoint::PostTool => &self.post_tool,
            HookPoint::TaskFinished => &self.task_finished,
        }
    }
}

impl Hook {
    /// Whether it is consulted for a call of `tool`.
    pub fn applies_to(&self, tool: &str) -> bool {
        match &self.tools {
            None => true,
            Some(globs) => globs
                .iter()
                .filter_map(|g| tool_glob(g).ok())
                .any(|g| g.is_match(tool)),
        }
    }

    /// Its wall-clock bound in seconds.
    pub fn timeout_secs(&self) -> u64 {
        self.timeout_secs.unwrap_or(DEFAULT_HOOK_TIMEOUT_SECS)
    }

    /// Its network.
    pub fn network(&self) -> HookNetwork {
        self.network.clone().unwrap_or(HookNetwork::All(false))
    }

    /// Whether its `allow` counts.
    pub fn may_allow(&self) -> bool {
        self.may_allow.unwrap_or(false)
    }

    /// Its extra readable trees.
    pub fn read(&self) -> &[String] {
        self.read.as_deref().unwrap_or(&[])
    }

    /// Its variables: (name in the hook, daemon variable), sorted.
    pub fn env(&self) -> impl Iterator<Item = (&str, &str)> {
        self.env
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

fn tool_glob(pattern: &str) -> Result<globset::GlobMatcher, String> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("{pattern:?} is not a valid glob: {}", e.kind()))
}

/// Checks the section; `api_key_env` is the config's `api.api_key_env` when the
/// caller knows it. The first problem found is the error: (key, message).
pub(crate) fn validate(
    hooks: &HooksSettings,
    api_key_env: Option<&str>,
) -> Result<(), (String, String)> {
    for point in [
        HookPoint::PreTool,
        HookPoint::PostTool,
        HookPoint::TaskFinished,
    ] {
        let mut names: Vec<&str> = Vec::new();
        for (i, hook) in hooks.at(point).iter().enumerate() {
            let key = format!("hooks.{}[{i}]", point.as_str());
            if names.contains(&hook.name.as_str()) {
                return Err((
                    format!("{key}.name"),
                    format!("hook {:?} is named twice in {}", hook.name, point.as_str()),
                ));
            }
            names.push(&hook.name);
            validate_hook(&key, point, hook, api_key_env)?;
        }
    }
    Ok(())
}

fn validate_hook(
    key: &str,
    point: HookPoint,
    hook: &Hook,
    api_key_env: Option<&str>,
) -> Result<(), (String, String)> {
    let at = |sub: &str| format!("{key}.{sub}");
    if !valid_server_name(&hook.name) {
        return Err((
            at("name"),
            format!(
                "{:?} is not a hook name: 1 to 32 of a-z, 0-9, `_` and `-`, starting with a \
                 letter or digit, without `__` and not ending in `_`",
                hook.name
            ),
        ));
    }
    super::mcp::validate_command(key, &hook.command)?;
    super::mcp::validate_env(key, hook.env(), api_key_env)?;
    if hook.timeout_secs == Some(0) {
        return Err((at("timeout_secs"), "must be greater than 0".into()));
    }
    if let Some(HookNetwork::Ports(ports)) = &hook.network {
        if ports.is_empty() {
            return Err((
                at("network"),
                "an empty port list; write `false` for no network".into(),
            ));
        }
        if let Some(i) = ports.iter().position(|p| *p == 0) {
            return Err((at(&format!("network[{i}]")), "port 0 is no port".into()));
        }
    }
    if point != HookPoint::PreTool && hook.may_allow.is_some() {
        return Err((
            at("may_allow"),
            "`may_allow` is for pre_tool hooks, the only ones that decide".into(),
        ));
    }
    if let Some(tools) = &hook.tools {
        if point == HookPoint::TaskFinished {
            return Err((
                at("tools"),
                "a task_finished hook is about a task, not a tool".into(),
            ));
        }
        for (i, g) in tools.iter().enumerate() {
            if g.is_empty() {
                return Err((at(&format!("tools[{i}]")), "empty glob".into()));
            }
            tool_glob(g).map_err(|why| (at(&format!("tools[{i}]")), why))?;
        }
    }
    if let Some(i) = hook.read().iter().position(String::is_empty) {
        return Err((at(&format!("read[{i}]")), "empty path".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Settings, SettingsContext};

    /// The error of a settings text whose `hooks` section is `hooks` (line 2 on).
    fn error(hooks: &str) -> String {
        let text = format!("{{\n  \"hooks\": {hooks}\n}}\n");
        let context = SettingsContext {
            pins: None,
            api_key_env: Some("MY_KEY"),
        };
        Settings::parse_in(&text, "policies/settings.json", context)
            .map(|_| ())
            .expect_err(hooks)
            .to_string()
    }

    #[test]
    fn the_spec_example_is_valid_and_reads_back() {
        let text = r#"{"hooks": {
          "pre_tool": [{ "name": "opa", "command": ["/usr/local/bin/ask-opa"], "tools": ["run_bash", "mcp__*"],
                         "timeout_secs": 5, "network": [443, 8181], "may_allow": false }],
          "post_tool": [{ "name": "scan", "command": ["/usr/local/bin/scan-output"] }],
          "task_finished": [{ "name": "ticket", "command": ["close-ticket"], "network": true,
                              "env": {"TOKEN": "TICKET_TOKEN"}, "read": ["/opt/ticket"] }]
        }}"#;
        let s = Settings::parse(text, "s.json")
            .expect("valid")
            .settings
            .hooks;
        let opa = &s.pre_tool[0];
        assert!(opa.applies_to("run_bash") && opa.applies_to("mcp__git__log"));
        assert!(!opa.applies_to("read_file"));
        assert_eq!(opa.network(), super::HookNetwork::Ports(vec![443, 8181]));
        assert!(s.post_tool[0].applies_to("read_file"));
        assert_eq!(s.post_tool[0].timeout_secs(), 10);
        assert_eq!(s.task_finished[0].network(), super::HookNetwork::All(true));
    }

    #[test]
    fn bad_hooks_are_refused_naming_file_line_and_key() {
        let cases = [
            (
                r#"{"pre_tool": [{"name": "Bad Name", "command": ["x"]}]}"#,
                "hooks.pre_tool[0].name",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": []}]}"#,
                "hooks.pre_tool[0].command",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": ["bin/x"]}]}"#,
                "hooks.pre_tool[0].command[0]",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": ["x"], "network": "yes"}]}"#,
                "hooks.pre_tool[0].network",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": ["x"], "network": [0]}]}"#,
                "hooks.pre_tool[0].network[0]",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": ["x"], "colour": 1}]}"#,
                "colour",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": ["x"], "env": {"K": "MY_KEY"}}]}"#,
                "hooks.pre_tool[0].env.K",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": ["x"], "env": {"K": "HARNESSD_X"}}]}"#,
                "hooks.pre_tool[0].env.K",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": ["x"], "timeout_secs": 0}]}"#,
                "hooks.pre_tool[0].timeout_secs",
            ),
            (
                r#"{"pre_tool": [{"name": "a", "command": ["x"], "tools": ["run_[bash"]}]}"#,
                "hooks.pre_tool[0].tools[0]",
            ),
            (
                r#"{"post_tool": [{"name": "a", "command": ["x"], "may_allow": true}]}"#,
                "hooks.post_tool[0].may_allow",
            ),
            (
                r#"{"task_finished": [{"name": "a", "command": ["x"]}, {"name": "a", "command": ["y"]}]}"#,
                "hooks.task_finished[1].name",
            ),
        ];
        for (hooks, key) in cases {
            let e = error(hooks);
            assert!(e.starts_with("policies/settings.json:2:"), "{hooks}: {e}");
            assert!(e.contains(key), "{hooks}: {e}");
        }
    }
}
