//! The built-in defaults, as files: what `harnessd init` writes, generated from the
//! key types ([`Config`], [`Settings`]) and their `Default`s.
//!
//! Nothing here reads a root. Editing a root's files — the repository's own
//! included — never changes what the binary builds or what `init` writes
//! (docs/config.md): `config/config.toml` is rendered from the JSON Schema of [`Config`] (each
//! key with its doc comment, its default, and unset keys commented out with an
//! example), `policies/settings.json` from [`Settings::default`].

use serde_json::{Map, Value};

use super::{Config, Settings};

/// Where `settings.json` points editors for validation, next to it.
pub const SCHEMA_REF: &str = "./settings.schema.json";

/// `systemd/harnessd.service`, the unit for running a root as a service.
pub const SYSTEMD_UNIT: &str = include_str!("harnessd.service");

/// The example skill `init` writes, `skills/audit-log/SKILL.md`: how to read the
/// audit log.
pub const SKILL_AUDIT_LOG: &str = include_str!("audit-log.SKILL.md");

/// The sample data file `init` puts in the workspace.
pub const SAMPLE_SCORES: &str = include_str!("scores.csv");

/// Examples for keys that are unset by default, shown commented out in the
/// generated config. A key without one is a test failure, not a bare `# key =`.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "api.api_key_file",
        "\"/run/credentials/harnessd.service/anthropic.key\"",
    ),
    ("api.system_prompt_file", "\"config/system_prompt.md\""),
    ("api.thinking_budget_tokens", "2048"),
    ("loop.usd_budget", "5.0"),
    (
        "tools.enabled",
        "[\"read_file\", \"list_dir\", \"get_time\", \"load_skill\"]",
    ),
    ("daemon.operators_group", "\"harnessd-operators\""),
    ("daemon.listen", "\"127.0.0.1:8080\""),
    ("daemon.console_origin", "\"https://harnessd.example.com\""),
    ("telemetry.otlp_endpoint", "\"http://127.0.0.1:4318\""),
];

/// Sections that are maps with no entry by default, shown as a commented entry.
const MAP_EXAMPLES: &[(&str, &str)] = &[
    (
        "pricing",
        "# [pricing.\"my-model\"]\n# input = 3.0\n# output = 15.0\n# cache_write = 3.75\n# cache_read = 0.3\n",
    ),
    (
        "notify",
        "# [[notify]]\n# name = \"ops-chat\"\n\
         # url_file = \"/run/credentials/harnessd.service/ops-chat-url\"\n\
         # events = [\"approval_requested\", \"task_finished\"]\n# format = \"slack\"\n\
         # secret_file = \"/run/credentials/harnessd.service/notify-secret\"\n# from = \"end\"\n",
    ),
];

const HEADER: &str = "\
# harnessd configuration, as `harnessd init` writes it from the built-in defaults.
# Every key is listed with its default; a commented-out key is unset. The keys are
# described in docs/config.md of the harnessd repository. Relative paths are
# relative to the root (the directory holding config/). Unknown keys are an error.
";

/// Width the generated comments are wrapped to.
const WIDTH: usize = 84;

/// `policies/settings.json` as `init` writes it.
pub fn default_settings() -> String {
    let settings = Settings {
        schema: Some(SCHEMA_REF.into()),
        ..Settings::default()
    };
    let mut value = serde_json::to_value(&settings).unwrap_or_default();
    // No server by default: an empty `mcp` section would only be noise.
    if settings.mcp == super::McpSettings::default()
        && let Some(map) = value.as_object_mut()
    {
        map.remove("mcp");
    }
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// The JSON Schema of settings.json (`policies/settings.schema.json`), generated
/// from the types.
pub fn settings_schema() -> String {
    let schema = schemars::schema_for!(Settings);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// `config/config.toml` as `init` writes it: every key of [`Config`], in the
/// order of the types, under its doc comment.
pub fn default_config() -> String {
    let mut out = String::from(HEADER);
    for section in config_sections() {
        out.push('\n');
        if let Some((_, example)) = MAP_EXAMPLES.iter().find(|(n, _)| *n == section.name)
            && section.keys.is_empty()
        {
            // A table of tables empty by default: its doc and a commented entry.
            comment(&mut out, &section.doc);
            out.push_str(example);
            continue;
        }
        out.push_str(&format!("[{}]\n", section.name));
        for key in &section.keys {
            comment(&mut out, &key.doc);
            match &key.value {
                Some(value) => out.push_str(&format!("{} = {value}\n", key.name)),
                None => out.push_str(&format!("# {} = {}\n", key.name, key.example)),
            }
        }
    }
    out
}

/// One `[section]` of the config file.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Its name (`api`, `loop`, …).
    pub name: String,
    /// What it holds (the field's doc comment).
    pub doc: String,
    /// Its keys, in the order of the type.
    pub keys: Vec<Key>,
}

/// One key of a section.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// The key inside its section.
    pub name: String,
    /// Its doc comment, one paragraph.
    pub doc: String,
    /// Its default as a TOML value, `None` when unset by default.
    pub value: Option<String>,
    /// A value to show when it is unset (empty when it has a default).
    pub example: String,
}

/// Every section and key of [`Config`], from its JSON Schema and defaults: the
/// one list the generated config file and docs/config.md are made from.
pub fn config_sections() -> Vec<Section> {
    let schema = serde_json::to_value(schemars::schema_for!(Config)).unwrap_or_default();
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    let mut sections = Vec::new();
    for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
        let def = resolve(prop, &defs);
        let defaults = prop["default"].as_object().cloned().unwrap_or_default();
        let keys = match def["properties"].as_object() {
            Some(fields) => fields
                .iter()
                .map(|(key, field)| {
                    let doc = text(resolve(field, &defs), field);
                    make_key(name, key, doc, defaults.get(key))
                })
                .collect(),
            // A map (no fixed keys): each default entry is a key.
            None => defaults
                .iter()
                .map(|(key, value)| make_key(name, key, String::new(), Some(value)))
                .collect(),
        };
        sections.push(Section {
            name: name.clone(),
            doc: text(def, prop),
            keys,
        });
    }
    sections
}

fn make_key(section: &str, key: &str, doc: String, default: Option<&Value>) -> Key {
    let value = default.filter(|v| !v.is_null()).map(toml_value);
    let example = match value {
        Some(_) => String::new(),
        None => EXAMPLES
            .iter()
            .find(|(k, _)| *k == format!("{section}.{key}"))
            .map(|(_, e)| e.to_string())
            .unwrap_or_default(),
    };
    Key {
        name: toml_key(key),
        doc,
        value,
        example,
    }
}

/// The definition a `$ref` points at, or the schema itself.
fn resolve<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| defs.get(name))
        .unwrap_or(schema)
}

/// The description of a property, preferring the field's doc over its type's.
fn text(def: &Value, prop: &Value) -> String {
    prop["description"]
        .as_str()
        .or_else(|| def["description"].as_str())
        .unwrap_or("")
        .to_string()
}

/// A JSON default written as TOML (inline tables for objects).
fn toml_value(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{} = {}", toml_key(k), toml_value(v)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(toml_value).collect();
            format!("[{}]", parts.join(", "))
        }
        // A JSON string literal is a valid TOML basic string for the text of a
        // default (no control characters).
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or_default();
            if f.fract() == 0.0 {
                format!("{f:.1}")
            } else {
                f.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// A key bare when TOML allows it, quoted otherwise (`"claude-3.5"`).
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_string()
    } else {
        Value::String(key.to_string()).to_string()
    }
}

/// Appends `doc` as `# ` lines wrapped at [`WIDTH`].
fn comment(out: &mut String, doc: &str) {
    for paragraph in doc.split("\n\n").filter(|p| !p.trim().is_empty()) {
        let mut line = String::from("#");
        for word in paragraph.split_whitespace() {
            if line.len() + 1 + word.len() > WIDTH && line.len() > 1 {
                out.push_str(&line);
                out.push('\n');
                line = String::from("#");
            }
            line.push(' ');
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_config_parses_to_the_defaults() {
        let text = default_config();
        let parsed = Config::parse(&text, "config/config.toml").expect("generated config parses");
        assert_eq!(parsed, Config::default(), "{text}");
    }

    #[test]
    fn every_unset_key_is_listed_commented_with_an_example() {
        let text = default_config();
        for section in config_sections() {
            for key in section.keys {
                let name = format!("{}.{}", section.name, key.name);
                match &key.value {
                    Some(v) => assert!(text.contains(&format!("\n{} = {v}\n", key.name)), "{name}"),
                    None => {
                        assert!(!key.example.is_empty(), "{name} needs an entry in EXAMPLES");
                        assert!(text.contains(&format!("\n# {} = ", key.name)), "{name}");
                    }
                }
                assert!(!key.doc.is_empty(), "{name} has no doc comment");
            }
        }
    }

    #[test]
    fn each_example_is_a_valid_value() {
        // An operator can uncomment an example as it is.
        for section in config_sections() {
            for key in section.keys.iter().filter(|k| k.value.is_none()) {
                // The group must exist on this host.
                let example = key.example.replace("harnessd-operators", "root");
                let text = format!("[{}]\n{} = {example}\n", section.name, key.name);
                let parsed = Config::parse(&text, "c.toml");
                assert!(parsed.is_ok(), "{text}: {parsed:?}");
            }
        }
    }

    #[test]
    fn generated_settings_parse_to_the_defaults() {
        let parsed = Settings::parse(&default_settings(), "settings.json").expect("parses");
        let expected = Settings {
            schema: Some(SCHEMA_REF.into()),
            ..Settings::default()
        };
        assert_eq!(parsed.settings, expected);
    }

    #[test]
    fn keys_are_quoted_only_when_toml_needs_it() {
        assert_eq!(toml_key("max_turns"), "max_turns");
        assert_eq!(toml_key("claude-3.5"), "\"claude-3.5\"");
        assert_eq!(toml_value(&serde_json::json!({"a": 1.0})), "{ a = 1.0 }");
    }
}
