//! `harnessd policy test TOOL INPUT` (what would policy decide, and why) and
//! `harnessd policy schema` (the JSON Schema of settings.json).

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use super::EXIT_CONFIG;
use crate::config::{Loaded, Settings};
use crate::policy::{self, Subject, shell};
use crate::text::{escape_json, escape_line, escape_text};
use crate::tools::{self, ToolInput, ToolName};

/// The decision for one call, as printed by `policy test` and used by `replay`.
pub fn evaluate(loaded: &Loaded, tool: &str, input: &Value) -> Result<Value, String> {
    let name = ToolName::parse(tool).ok_or_else(|| {
        format!(
            "unknown tool {tool:?}; known tools: {}",
            ToolName::ALL_NAMES.join(", ")
        )
    })?;
    let parsed =
        ToolInput::parse(name, input).map_err(|e| format!("invalid input for {tool}: {e}"))?;
    let subject = tools::policy_subject(&parsed, loaded);
    let decision = policy::decide(
        &loaded.policy,
        Subject {
            tool: name,
            arg: subject.as_deref(),
        },
    );
    let mut out = json!({
        "tool": tool,
        "tier": decision.tier.as_str(),
        "rule": decision.rule_label(),
        "subject": subject,
    });
    if let (ToolName::RunBash, Some(cmd)) = (name, &subject) {
        let split = shell::split(cmd);
        out["simple_commands"] = split
            .parts
            .iter()
            .map(|p| json!({"text": p.text, "runs": p.effective}))
            .collect();
        out["confident"] = split.confident.into();
        out["redirections"] = json!(split.redirections);
    }
    Ok(out)
}

/// The input object for `tool` from the command line: a JSON object as is, or the
/// tool's primary argument (command, path, code).
fn input_from_arg(tool: &str, arg: &str) -> Value {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(arg) {
        return v;
    }
    match tool {
        "run_bash" => json!({"command": arg}),
        "run_python" => json!({"code": arg}),
        "get_time" => json!({}),
        _ => json!({"path": arg}),
    }
}

/// Runs `policy test`.
pub fn test(root: &Path, tool: &str, arg: &str, json_out: bool) -> anyhow::Result<i32> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let report = match evaluate(&loaded, tool, &input_from_arg(tool, arg)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e));
            return Ok(EXIT_CONFIG);
        }
    };
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(
            out,
            "{}",
            escape_json(&serde_json::to_string_pretty(&report)?)
        )?;
        return Ok(0);
    }
    // Every field quotes the input, which may come from a model: one-line escapes.
    let field = |v: &Value| escape_line(v.as_str().unwrap_or("?")).into_owned();
    writeln!(
        out,
        "{}  (rule: {})",
        field(&report["tier"]),
        field(&report["rule"])
    )?;
    if let Some(s) = report["subject"].as_str() {
        writeln!(out, "subject: {}", escape_line(s))?;
    }
    if let Some(parts) = report["simple_commands"].as_array() {
        writeln!(
            out,
            "simple commands ({}):",
            if report["confident"] == true {
                "split with confidence"
            } else {
                "NOT split with confidence: no pattern can allow it"
            }
        )?;
        for p in parts {
            let (text, runs) = (
                escape_line(p["text"].as_str().unwrap_or("")),
                escape_line(p["runs"].as_str().unwrap_or("")),
            );
            if text == runs {
                writeln!(out, "  - {text}")?;
            } else {
                writeln!(out, "  - {text}   (runs: {runs})")?;
            }
        }
    }
    Ok(0)
}

/// The JSON Schema of settings.json, generated from the Rust types.
pub fn settings_schema() -> String {
    let schema = schemars::schema_for!(Settings);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// Runs `policy schema`.
pub fn schema() -> anyhow::Result<i32> {
    std::io::stdout()
        .lock()
        .write_all(settings_schema().as_bytes())?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn shipped_schema_matches_the_types() {
        let shipped = include_str!("../../policies/settings.schema.json");
        assert!(
            shipped == super::settings_schema(),
            "policies/settings.schema.json is stale: run `harnessd policy schema > policies/settings.schema.json`"
        );
    }
}
