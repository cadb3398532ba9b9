//! What policy would decide for one call, and why (`harnessd policy test`, `replay`,
//! the web console's policy page): the tier, the rule, the profile, for a shell
//! command the simple commands seen, and for a file tool whether the sandbox would
//! refuse the path anyway. Nothing runs.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::Loaded;
use crate::protocol::mcp::McpToolName;
use crate::tools::{self, ToolInput, ToolName};

/// The decision for one call, as printed by `policy test` and used by `replay`.
pub fn evaluate(loaded: &Loaded, tool: &str, input: &Value) -> Result<Value, String> {
    if let Some(name) = McpToolName::parse(tool) {
        return evaluate_mcp(loaded, name, input);
    }
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
        "profile": decision.profile.as_str(),
    });
    if let Some(why) = &decision.raised {
        out["raised"] = why.as_str().into();
    } else if let Some(why) = &decision.unseen {
        // Already asked by a rule: what would raise an allow of it, a hook's too.
        out["unseen"] = why.as_str().into();
    }
    if let Some(refusal) = verdict.refusal {
        out["refused"] = refusal.into();
    }
    if let Some(path) = &verdict.judged.path
        && let Some(note) = outside_allowed_paths(loaded, name, path)
    {
        out["allowed_paths"] = note.into();
    }
    if let Some(view) = &decision.shell {
        out["simple_commands"] = json!(view.commands);
        out["provable"] = view.provable.into();
        if let Some(reason) = &view.not_provable {
            out["not_provable"] = reason.as_str().into();
        }
        if !view.programs.is_empty() {
            out["programs"] = json!(view.programs);
        }
    }
    Ok(out)
}

/// The decision for one MCP call, judged by the root's settings and lock file as
/// if the server lists the pinned definition (nothing is started).
fn evaluate_mcp(loaded: &Loaded, name: McpToolName<'_>, input: &Value) -> Result<Value, String> {
    let servers = &loaded.policy.settings.mcp.servers;
    if !servers.contains_key(name.server) {
        let known: Vec<&str> = servers.keys().map(String::as_str).collect();
        return Err(format!(
            "unknown MCP server {:?}; servers in mcp.servers: {}",
            name.server,
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ));
    }
    if !input.is_object() {
        return Err(format!(
            "invalid input for {}: an MCP tool's input is a JSON object",
            name.model_name()
        ));
    }
    let decision = loaded
        .policy
        .decide_mcp(name.server, name.tool, input, true);
    let pinned = loaded.policy.pins.tool(name.server, name.tool);
    let mut out = json!({
        "tool": name.model_name(),
        "server": name.server,
        "tier": decision.tier.as_str(),
        "rule": decision.rule_label(),
        "profile": decision.profile.as_str(),
        "pinned": pinned.map(|p| p.sha256.as_str()),
    });
    if let Some(why) = &decision.raised {
        out["raised"] = why.as_str().into();
    }
    Ok(out)
}

/// Why the sandbox would refuse a file tool's `path` whatever the tier: it is
/// outside `allowed_paths.read ∪ write` (reading) or `allowed_paths.write`
/// (writing). Entries are resolved as the sandbox resolves them (relative to the
/// root, links followed); `None` when the path is inside.
fn outside_allowed_paths(loaded: &Loaded, tool: ToolName, path: &Path) -> Option<String> {
    let allowed = &loaded.policy.settings.allowed_paths;
    let writes = matches!(tool, ToolName::WriteFile | ToolName::EditFile);
    let entries: Vec<&String> = if writes {
        allowed.write.iter().collect()
    } else {
        allowed.read.iter().chain(&allowed.write).collect()
    };
    let inside = entries.iter().any(|entry| {
        let entry = crate::config::resolve(&loaded.paths.root, entry);
        let entry = entry.canonicalize().unwrap_or(entry);
        path.starts_with(&entry)
    });
    if inside {
        return None;
    }
    let key = if writes {
        "allowed_paths.write"
    } else {
        "allowed_paths.read (and .write)"
    };
    Some(format!(
        "the sandbox will refuse it: {} is outside {key}",
        path.display()
    ))
}

/// The input object for `tool` from the command line: a JSON object as is, or the
/// tool's primary argument (command, path, code, skill name). For a file tool the path alone
/// is enough: the other required fields get placeholders, since only the path is
/// judged.
pub fn input_from_arg(tool: &str, arg: &str) -> Value {
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(arg) {
        return v;
    }
    if McpToolName::parse(tool).is_some() {
        // An MCP tool has no primary argument: what is not an object is judged
        // as written, and refused as input.
        return Value::String(arg.to_string());
    }
    match tool {
        "run_bash" => json!({"command": arg}),
        "run_python" => json!({"code": arg}),
        "get_time" => json!({}),
        "load_skill" => json!({"name": arg}),
        "delegate" => json!({"prompt": arg}),
        "write_file" => json!({"path": arg, "content": ""}),
        "edit_file" => json!({"path": arg, "old_string": "old", "new_string": "new"}),
        _ => json!({"path": arg}),
    }
}
