//! The words of MCP support every layer speaks: how a server's tool is named to the
//! model (`mcp__<server>__<tool>`), what a tool definition is, and the lock file
//! that pins definitions (`policies/mcp.lock.json`). Plain data: `config` reads and
//! writes the lock file, `policy` matches rules on these names, the client fills the
//! definitions from what a server lists.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::hash::{canonical_json, sha256_hex};

/// What every MCP tool's name starts with.
pub const PREFIX: &str = "mcp__";

/// The separator between the server's name and the tool's.
pub const SEPARATOR: &str = "__";

/// The lock file's path relative to the root.
pub const LOCK_FILE: &str = "policies/mcp.lock.json";

/// The lock file format this build writes and reads.
pub const LOCK_VERSION: u32 = 1;

/// Longest server name: the model's tool names are at most 64 characters, and the
/// prefix and separator take 7 of them.
pub const MAX_SERVER_NAME: usize = 32;

/// An MCP tool's name as the model sees it, split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpToolName<'a> {
    /// The server, as named in `mcp.servers`.
    pub server: &'a str,
    /// The tool, as the server names it.
    pub tool: &'a str,
}

impl<'a> McpToolName<'a> {
    /// Splits `mcp__<server>__<tool>`: the server is everything up to the first
    /// `__` after the prefix (server names cannot hold `__`), the tool the rest.
    /// `None` for a name that is not of that form or whose server name is invalid.
    pub fn parse(name: &'a str) -> Option<McpToolName<'a>> {
        let rest = name.strip_prefix(PREFIX)?;
        let (server, tool) = rest.split_once(SEPARATOR)?;
        (valid_server_name(server) && !tool.is_empty()).then_some(McpToolName { server, tool })
    }

    /// The name the model uses.
    pub fn model_name(self) -> String {
        model_name(self.server, self.tool)
    }
}

/// `mcp__<server>__<tool>`.
pub fn model_name(server: &str, tool: &str) -> String {
    format!("{PREFIX}{server}{SEPARATOR}{tool}")
}

/// Whether `name` may name a server: 1 to [`MAX_SERVER_NAME`] of `[a-z0-9_-]`,
/// starting with a letter or digit, without `__` (so `mcp__a__b__c` splits one way
/// only).
pub fn valid_server_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.len() <= MAX_SERVER_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && !name.contains(SEPARATOR)
        && !name.ends_with('_')
}

/// Whether the Messages API accepts `mcp__<server>__<tool>` as a tool name
/// (`^[a-zA-Z0-9_-]{1,64}$`). A tool whose name it would refuse is withheld.
pub fn model_name_accepted(server: &str, tool: &str) -> bool {
    let name = model_name(server, tool);
    name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A tool's hints about itself. They can only make a tier stricter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// A human title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool changes nothing (never loosens a tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may destroy data: an explicit `true` raises an allowed call to `ask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it twice with the same input does no more than once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// It reaches outside the server (the web, other systems).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// Whether the server marks the tool destructive (explicitly: an absent hint
    /// does not count, or no unannotated tool could ever be allowed). A read-only
    /// hint beside it does not take it back: hints only make a tier stricter.
    pub fn destructive(&self) -> bool {
        self.destructive_hint == Some(true)
    }
}

/// One tool as a server lists it, as far as it is pinned: everything that can
/// change what the model is told or what a call means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolDefinition {
    /// The tool's own name.
    pub name: String,
    /// A human title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the model is told about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of its input (an object schema).
    pub input_schema: Value,
    /// The JSON Schema of its structured output, if it declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Its hints about itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
}

impl ToolDefinition {
    /// The hex sha256 of the definition's canonical JSON (keys sorted, compact):
    /// the same definition hashes the same whatever order a server lists its keys in.
    pub fn sha256(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(Value::Null);
        sha256_hex(canonical_json(&value).as_bytes())
    }

    /// The top-level property names of the input schema: the keys a key-pattern
    /// rule may name.
    pub fn input_properties(&self) -> impl Iterator<Item = &str> {
        self.input_schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys().map(String::as_str))
    }

    /// Whether the server marks the tool destructive (see [`ToolAnnotations::destructive`]).
    pub fn destructive(&self) -> bool {
        self.annotations
            .as_ref()
            .is_some_and(ToolAnnotations::destructive)
    }
}

/// One pinned tool: its definition written whole and the hash of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinnedTool {
    /// [`ToolDefinition::sha256`] of `definition`.
    pub sha256: String,
    /// The definition as accepted.
    pub definition: ToolDefinition,
}

/// The pinned tools of one server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerPins {
    /// By the tool's own name.
    pub tools: BTreeMap<String, PinnedTool>,
}

/// `policies/mcp.lock.json`: every server's accepted tool definitions. Written by
/// harnessd (sorted keys, two-space indent, no timestamps, so accepting the same
/// definitions again changes nothing), reviewed and committed by operators.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinFile {
    /// The format: [`LOCK_VERSION`].
    pub version: u32,
    /// By server name.
    pub servers: BTreeMap<String, ServerPins>,
}

impl Default for PinFile {
    fn default() -> Self {
        PinFile {
            version: LOCK_VERSION,
            servers: BTreeMap::new(),
        }
    }
}

impl PinFile {
    /// The pinned definition of `server`'s `tool`, if there is one.
    pub fn tool(&self, server: &str, tool: &str) -> Option<&PinnedTool> {
        self.servers.get(server)?.tools.get(tool)
    }

    /// The file's text: canonical (keys sorted at every level), two-space indent,
    /// one trailing newline.
    pub fn to_text(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(Value::Null);
        let mut text = super::hash::canonical_pretty(&value);
        text.push('\n');
        text
    }
}

/// The JSON Schema of the lock file (shipped as `docs/mcp.lock.schema.json`).
pub fn lock_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(PinFile)).unwrap_or(Value::Null)
}

/// What changed between the pinned definitions of a server and what it lists now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Drift {
    /// Tools listed now and not pinned.
    pub added: Vec<String>,
    /// Tools pinned and no longer listed.
    pub removed: Vec<String>,
    /// Tools whose definition differs from the pinned one.
    pub changed: Vec<ChangedTool>,
}

/// A tool whose definition changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChangedTool {
    /// The tool's own name.
    pub tool: String,
    /// The pinned hash.
    pub old_sha256: String,
    /// The hash of what the server lists now.
    pub new_sha256: String,
}

impl Drift {
    /// What differs between `pinned` and `listed`.
    pub fn between(pinned: Option<&ServerPins>, listed: &[ToolDefinition]) -> Drift {
        let empty = ServerPins::default();
        let pinned = pinned.unwrap_or(&empty);
        let mut drift = Drift::default();
        for def in listed {
            match pinned.tools.get(&def.name) {
                None => drift.added.push(def.name.clone()),
                Some(p) => {
                    let now = def.sha256();
                    if now != p.sha256 {
                        drift.changed.push(ChangedTool {
                            tool: def.name.clone(),
                            old_sha256: p.sha256.clone(),
                            new_sha256: now,
                        });
                    }
                }
            }
        }
        for name in pinned.tools.keys() {
            if !listed.iter().any(|d| &d.name == name) {
                drift.removed.push(name.clone());
            }
        }
        drift.added.sort();
        drift.changed.sort_by(|a, b| a.tool.cmp(&b.tool));
        drift
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// One server as `mcp list` (and `GET /v1/mcp/servers`) shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerView {
    /// Its name in `mcp.servers`.
    pub name: String,
    /// `stdio` or `remote`.
    pub kind: String,
    /// How many processes of it run now (one per task using it, or one shared).
    pub running: usize,
    /// The revision its handshake settled on, when it was reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Why it could not be reached to list its tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its tools: every pinned one, and every one it lists now.
    pub tools: Vec<ToolView>,
    /// What differs between the pins and what it lists now (empty when it was not
    /// reached).
    pub drift: Drift,
}

/// One tool of a [`ServerView`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolView {
    /// The tool's own name.
    pub name: String,
    /// The name the model uses.
    pub model_name: String,
    /// The pinned hash, if it is pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_sha256: Option<String>,
    /// The hash of what the server lists now, if it was reached and lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_sha256: Option<String>,
    /// `pinned` (as listed), `changed`, `new` (listed, not pinned), `removed`
    /// (pinned, not listed), or `unchecked` (pinned; the server was not reached).
    pub state: String,
}

/// The answer to `POST /v1/mcp/servers/{name}/pin` and what `mcp pin` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinResponse {
    /// The server.
    pub server: String,
    /// The tools now pinned.
    pub tools: Vec<String>,
    /// What changed against the pins before.
    pub drift: Drift,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(name: &str, description: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            title: None,
            description: Some(description.into()),
            input_schema: json!({"type": "object", "properties": {"b": {"type": "string"}, "a": {}}}),
            output_schema: None,
            annotations: None,
        }
    }

    #[test]
    fn names_split_at_the_first_separator() {
        let n = McpToolName::parse("mcp__git__git_log").expect("mcp name");
        assert_eq!((n.server, n.tool), ("git", "git_log"));
        let n = McpToolName::parse("mcp__a__b__c").expect("mcp name");
        assert_eq!((n.server, n.tool), ("a", "b__c"));
        for bad in [
            "mcp__",
            "mcp__git",
            "mcp__git__",
            "mcp__Git__x",
            "read_file",
            "mcp___x__y",
        ] {
            assert_eq!(McpToolName::parse(bad), None, "{bad}");
        }
        assert_eq!(model_name("git", "git_log"), "mcp__git__git_log");
    }

    #[test]
    fn server_names_are_checked() {
        for ok in ["git", "time-2", "a_b", "0"] {
            assert!(valid_server_name(ok), "{ok}");
        }
        for bad in ["", "Git", "a__b", "-x", "_x", "x_", "a.b", &"x".repeat(33)] {
            assert!(!valid_server_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_hash_ignores_key_order_and_sees_every_change() {
        let a = def("t", "d");
        let mut b = a.clone();
        b.input_schema =
            json!({"properties": {"a": {}, "b": {"type": "string"}}, "type": "object"});
        assert_eq!(a.sha256(), b.sha256());
        let mut c = a.clone();
        c.description = Some("d ".into());
        assert_ne!(a.sha256(), c.sha256());
        assert_eq!(a.input_properties().collect::<Vec<_>>(), ["b", "a"]);
    }

    #[test]
    fn drift_names_what_changed() {
        let mut pins = ServerPins::default();
        for d in [def("same", "x"), def("changed", "old"), def("gone", "x")] {
            pins.tools.insert(
                d.name.clone(),
                PinnedTool {
                    sha256: d.sha256(),
                    definition: d,
                },
            );
        }
        let listed = [def("same", "x"), def("changed", "new"), def("added", "x")];
        let drift = Drift::between(Some(&pins), &listed);
        assert_eq!(drift.added, ["added"]);
        assert_eq!(drift.removed, ["gone"]);
        assert_eq!(drift.changed.len(), 1);
        assert_eq!(drift.changed[0].tool, "changed");
        assert_eq!(drift.changed[0].new_sha256, listed[1].sha256());
        assert!(
            Drift::between(
                Some(&pins),
                &[def("same", "x"), def("changed", "old"), def("gone", "x")]
            )
            .is_empty()
        );
    }

    #[test]
    fn the_lock_text_is_sorted_and_stable() {
        let mut file = PinFile::default();
        let d = def("t", "d");
        file.servers.entry("z".into()).or_default().tools.insert(
            "t".into(),
            PinnedTool {
                sha256: d.sha256(),
                definition: d,
            },
        );
        file.servers.insert("a".into(), ServerPins::default());
        let text = file.to_text();
        assert!(text.ends_with("}\n"));
        assert!(text.find("\"a\"").expect("a") < text.find("\"z\"").expect("z"));
        // The schema's keys come out sorted too (the crate keeps insertion order).
        assert!(text.find("\"a\": {}").expect("a prop") < text.find("\"b\": {").expect("b prop"));
        let back: PinFile = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, file);
        assert_eq!(back.to_text(), text);
    }
}
