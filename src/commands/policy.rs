//! `harnessd policy test TOOL INPUT` (what would policy decide, and why) and
//! `harnessd policy schema` (the JSON Schema of settings.json).

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use super::EXIT_CONFIG;
use crate::config::Loaded;
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
    let verdict = tools::decide(name, &parsed, loaded);
    let (decision, subject) = (verdict.decision, verdict.judged.subject);
    let mut out = json!({
        "tool": tool,
        "tier": decision.tier.as_str(),
        "rule": decision.rule_label(),
        "subject": subject,
    });
    if let Some(refusal) = verdict.refusal {
        out["refused"] = refusal.into();
    }
    if let Some(view) = &decision.shell {
        out["simple_commands"] = json!(view.commands);
        out["provable"] = view.provable.into();
        if let Some(reason) = &view.not_provable {
            out["not_provable"] = reason.as_str().into();
        }
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
    if let Some(why) = report["refused"].as_str() {
        writeln!(out, "{}", escape_line(why))?;
    }
    if let Some(parts) = report["simple_commands"].as_array() {
        match report["not_provable"].as_str() {
            None => writeln!(out, "simple commands (provable: allow patterns apply):")?,
            Some(why) => writeln!(
                out,
                "simple commands seen (NOT provable: {}; no allow pattern applies):",
                escape_line(why)
            )?,
        }
        for p in parts {
            writeln!(out, "  - {}", escape_line(p.as_str().unwrap_or("")))?;
        }
    }
    Ok(0)
}

/// The JSON Schema of settings.json, generated from the Rust types.
pub fn settings_schema() -> String {
    crate::config::settings_schema()
}

/// Runs `policy schema`.
pub fn schema() -> anyhow::Result<i32> {
    std::io::stdout()
        .lock()
        .write_all(settings_schema().as_bytes())?;
    Ok(0)
}
