//! The reference pages under `docs/` are generated from the code where they can
//! be, and these tests fail when a page is stale: the config and settings keys
//! from the key types (doc comments and defaults), the event types from
//! `src/events/kinds.rs`, the commands from the clap types, the control API's
//! routes from `src/daemon/api/mod.rs`. A generated block sits between
//! `<!-- BEGIN GENERATED: name -->` and `<!-- END GENERATED: name -->`;
//! `HARNESSD_BLESS_DOCS=1 cargo test --test it docs::` rewrites the blocks.
//!
//! The README and docs must stand alone: no link to a contract outside the
//! repository.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde_json::{Map, Value};

use harnessd::config::defaults::config_sections;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Checks (or, blessed, rewrites) the generated block `name` of `file`.
fn check_block(file: &str, name: &str, generated: &str) {
    let kept = crate::common::blessed::Kept {
        kind: "GENERATED",
        stale: "is stale",
        module: "docs::",
    };
    kept.check(file, name, generated, |current| current == generated);
}

/// One paragraph on one line, safe in a table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn config_keys() -> String {
    let mut out = String::from("| key | default | meaning |\n|---|---|---|\n");
    for section in config_sections() {
        for key in &section.keys {
            let default = match &key.value {
                Some(v) => format!("`{v}`"),
                None => format!("unset (e.g. `{}`)", key.example),
            };
            let name = format!("{}.{}", section.name, key.name);
            out.push_str(&format!("| `{name}` | {default} | {} |\n", cell(&key.doc)));
        }
    }
    out
}

fn resolve<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|n| defs.get(n))
        .unwrap_or(schema)
}

fn settings_rows(
    prefix: &str,
    schema: &Value,
    defaults: &Value,
    defs: &Map<String, Value>,
    out: &mut String,
) {
    let properties = schema["properties"].as_object().into_iter().flatten();
    for (name, prop) in properties.filter(|(n, _)| *n != "$schema") {
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let def = resolve(prop, defs);
        let default = &defaults[name.as_str()];
        if def["properties"].is_object() {
            settings_rows(&key, def, default, defs, out);
            continue;
        }
        let doc = prop["description"]
            .as_str()
            .or(def["description"].as_str())
            .unwrap_or("");
        let shown = if default.is_null() {
            "unset".to_string()
        } else {
            format!("`{}`", cell(&default.to_string()))
        };
        out.push_str(&format!("| `{key}` | {shown} | {} |\n", cell(doc)));
    }
}

fn settings_keys() -> String {
    let schema = serde_json::to_value(schemars::schema_for!(harnessd::config::Settings)).unwrap();
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    let defaults = serde_json::to_value(harnessd::config::Settings::default()).unwrap();
    let mut out = String::from("| key | default | meaning |\n|---|---|---|\n");
    settings_rows("", &schema, &defaults, &defs, &mut out);
    out
}

/// `CamelCase` → `snake_case`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Intra-doc links (`[`x`](path)`) as plain code.
fn plain(doc: &str) -> String {
    let mut out = doc.to_string();
    while let Some(i) = out.find("](") {
        let Some(close) = out[i..].find(')') else {
            break;
        };
        out.replace_range(i..i + close + 1, "");
        if let Some(open) = out[..i].rfind('[') {
            out.remove(open);
        }
    }
    out
}

/// The variants of `pub enum Event` in kinds.rs: (type, doc, [(field, doc, optional)]).
type EventDoc = (String, String, Vec<(String, String, bool)>);

fn parse_events(source: &str) -> Vec<EventDoc> {
    let body = &source[source.find("pub enum Event {").expect("enum Event")..];
    let mut events: Vec<EventDoc> = Vec::new();
    let mut doc = String::new();
    let mut optional = false;
    // The variant for lines of other versions is never written: not documented.
    let mut never_written = false;
    for line in body.lines().skip(1) {
        if line == "}" {
            break;
        }
        let trimmed = line.trim();
        if trimmed.starts_with('}') {
            continue;
        }
        if let Some(d) = trimmed.strip_prefix("///") {
            doc.push(' ');
            doc.push_str(d.trim());
        } else if trimmed.starts_with("#[serde(skip_serializing_if") {
            optional = true;
        } else if trimmed.starts_with("#[serde(other") {
            never_written = true;
        } else if line.starts_with("    ") && !line.starts_with("     ") {
            if let Some(name) = trimmed.strip_suffix(" {").or(trimmed.strip_suffix(','))
                && !std::mem::take(&mut never_written)
            {
                events.push((snake(name), plain(doc.trim()), Vec::new()));
            }
            doc.clear();
        } else if let Some((field, ty)) = trimmed.split_once(": ") {
            let optional = optional || ty.starts_with("Option<");
            if let Some(e) = events.last_mut() {
                e.2.push((field.to_string(), plain(doc.trim()), optional));
            }
            doc.clear();
        }
        if !trimmed.starts_with("#[") && !trimmed.starts_with("///") {
            optional = false;
        }
    }
    events
}

fn event_types() -> String {
    let source = std::fs::read_to_string(repo().join("src/events/kinds.rs")).unwrap();
    let mut out = String::new();
    for (kind, doc, fields) in parse_events(&source) {
        out.push_str(&format!("### `{kind}`\n\n{}\n\n", cell(&doc)));
        if fields.is_empty() {
            continue;
        }
        out.push_str("| field | meaning |\n|---|---|\n");
        for (field, doc, optional) in fields {
            let when = if optional {
                " (absent or null when not known or not applicable)"
            } else {
                ""
            };
            out.push_str(&format!("| `{field}` | {}{when} |\n", cell(&doc)));
        }
        out.push('\n');
    }
    out
}

fn usage(cmd: &clap::Command, path: &str) -> String {
    let mut parts = vec![format!("harnessd {path}")];
    for arg in cmd.get_arguments().filter(|a| !a.is_global_set()) {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        let value = arg
            .get_value_names()
            .and_then(|v| v.first())
            .map_or_else(|| id.to_uppercase(), |v| v.to_string());
        let shown = match arg.get_long() {
            Some(long) if arg.get_action().takes_values() => format!("--{long} {value}"),
            Some(long) => format!("--{long}"),
            None if arg.is_last_set() => format!("-- {value}…"),
            None => value,
        };
        parts.push(
            if arg.is_required_set() || arg.get_long().is_none() && !arg.is_last_set() {
                shown
            } else {
                format!("[{shown}]")
            },
        );
    }
    parts.join(" ")
}

fn command_rows(cmd: &clap::Command, path: &str, out: &mut String) {
    let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    if !subs.is_empty() && !path.is_empty() {
        for sub in subs {
            command_rows(sub, &format!("{path} {}", sub.get_name()), out);
        }
        return;
    }
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|a| cell(&a.to_string()))
        .unwrap_or_default();
    out.push_str(&format!("### `{}`\n\n{about}\n\n", usage(cmd, path)));
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_global_set() && !["help", "version"].contains(&a.get_id().as_str()))
        .collect();
    if !args.is_empty() {
        out.push_str("| argument | meaning |\n|---|---|\n");
        for arg in args {
            let name = match arg.get_long() {
                Some(long) => format!("--{long}"),
                None => arg.get_id().as_str().to_uppercase(),
            };
            let help = arg
                .get_help()
                .map(|h| cell(&h.to_string()))
                .unwrap_or_default();
            out.push_str(&format!("| `{name}` | {help} |\n"));
        }
        out.push('\n');
    }
}

fn commands() -> String {
    let cli = harnessd::cli::Cli::command();
    let mut out = String::new();
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        command_rows(sub, sub.get_name(), &mut out);
    }
    out
}

/// The routes the control API serves, from the router in api/mod.rs.
fn routes() -> Vec<String> {
    let source = std::fs::read_to_string(repo().join("src/daemon/api/mod.rs")).unwrap();
    source
        .lines()
        .filter_map(|l| l.trim().strip_prefix(".route(\""))
        .map(|l| l[..l.find('"').unwrap()].to_string())
        .collect()
}

#[test]
fn docs_config_keys_are_generated_from_the_types() {
    check_block("docs/config.md", "config keys", &config_keys());
    check_block("docs/config.md", "settings keys", &settings_keys());
}

#[test]
fn docs_events_are_generated_from_the_event_types() {
    let source = std::fs::read_to_string(repo().join("src/events/kinds.rs")).unwrap();
    let events = parse_events(&source);
    assert!(events.len() >= 15, "{events:?}");
    assert!(
        events
            .iter()
            .any(|(k, _, f)| k == "config_loaded" && f.len() == 6)
    );
    check_block("docs/events.md", "event types", &event_types());
}

/// The values of a closed-set field of an event: the consts of the enum its
/// schema names (`$ref` into `$defs`, or inline).
fn closed_values(prop: &Value, defs: &Map<String, Value>) -> Option<(String, Vec<String>)> {
    let name = prop["$ref"].as_str()?.rsplit('/').next()?.to_string();
    let values = defs.get(&name)?["oneOf"]
        .as_array()?
        .iter()
        .filter_map(|v| v["const"].as_str().map(str::to_string))
        .collect();
    Some((name, values))
}

/// The enums whose every value a field's documentation names: the audit log's
/// closed sets. (`was` and `stop_reason` are a task's status and stop reason,
/// documented with the task.)
const LISTED_IN_FULL: &[&str] = &[
    "Trigger",
    "Source",
    "Decision",
    "CheckpointReason",
    "CompactionMethod",
    "BaseUrlFrom",
    "Profile",
    "Tier",
];

/// docs/events.md cannot drift from what is written: a field typed by one of the
/// closed sets names each of its values, so a value added to the enum without
/// its words in the docs fails here.
#[test]
fn docs_events_name_every_value_of_each_closed_field() {
    let schema: Value = serde_json::from_str(&harnessd::events::events_schema()).unwrap();
    let defs = schema["$defs"].as_object().unwrap();
    let mut missing = Vec::new();
    let mut checked = 0;
    for variant in schema["oneOf"].as_array().unwrap() {
        let kind = variant["properties"]["type"]["const"]
            .as_str()
            .unwrap_or("?");
        for (field, prop) in variant["properties"].as_object().unwrap() {
            let Some((name, values)) = closed_values(prop, defs) else {
                continue;
            };
            if !LISTED_IN_FULL.contains(&name.as_str()) {
                continue;
            }
            checked += 1;
            let doc = prop["description"].as_str().unwrap_or("");
            for v in values {
                if !doc.contains(&format!("`{v}`")) {
                    missing.push(format!("{kind}.{field} does not name `{v}` ({name})"));
                }
            }
        }
    }
    assert!(checked >= 10, "{checked} closed fields found");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The lock file's schema as shipped is the one its type generates.
#[test]
fn docs_lock_schema_is_generated_from_the_type() {
    let path = repo().join("docs/mcp.lock.schema.json");
    let generated = format!(
        "{}\n",
        serde_json::to_string_pretty(&harnessd::protocol::mcp::lock_schema()).unwrap()
    );
    if std::env::var_os("HARNESSD_BLESS_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        shipped == generated,
        "docs/mcp.lock.schema.json is stale; HARNESSD_BLESS_DOCS=1 cargo test --test it docs::"
    );
}

#[test]
fn docs_commands_are_generated_from_the_cli() {
    check_block("docs/commands.md", "commands", &commands());
}

#[test]
fn docs_api_lists_every_route() {
    let page = std::fs::read_to_string(repo().join("docs/api.md")).unwrap();
    let routes = routes();
    assert!(routes.len() >= 9, "{routes:?}");
    for route in routes {
        assert!(
            page.contains(&format!(" {route}`")),
            "docs/api.md does not document {route}"
        );
    }
}

/// The exit-code table of docs/commands.md names every stop reason once, with the
/// exit code the code gives it.
#[test]
fn docs_exit_codes_match_the_stop_reasons() {
    let page = std::fs::read_to_string(repo().join("docs/commands.md")).unwrap();
    let mut rows = 0;
    for line in page.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, name, code, _, _] = cells[..] else {
            continue;
        };
        let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else {
            continue;
        };
        let Ok(reason) =
            serde_json::from_value::<harnessd::protocol::StopReason>(Value::String(name.into()))
        else {
            continue;
        };
        assert_eq!(code, reason.exit_code().to_string(), "exit code of {name}");
        rows += 1;
    }
    let source = std::fs::read_to_string(repo().join("src/protocol/task.rs")).unwrap();
    let body = &source[source.find("pub enum StopReason {").unwrap()..];
    let body = &body[..body.find("\n}").unwrap()];
    let variants = body
        .lines()
        .filter(|l| l.starts_with("    ") && l.trim().ends_with(',') && !l.contains("//"))
        .count();
    assert_eq!(rows, variants, "one row per stop reason");
}

/// Every `*.md` of the repository's own docs (README and docs/).
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages
}

#[test]
fn readme_and_docs_stand_alone_and_their_links_resolve() {
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        assert!(
            !text.contains("SPEC.md"),
            "{} refers to a contract outside the repository",
            page.display()
        );
        // Relative links point at files of the repository.
        for (i, _) in text.match_indices("](") {
            let target = &text[i + 2..];
            let target = &target[..target.find(')').unwrap_or(target.len())];
            if target.starts_with('#') || target.contains("://") {
                continue;
            }
            let file = target.split('#').next().unwrap();
            let dir = page.parent().unwrap_or(Path::new("."));
            assert!(
                dir.join(file).exists(),
                "{}: link to missing {target}",
                page.display()
            );
        }
    }
}
