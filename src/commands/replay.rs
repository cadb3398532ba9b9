//! `harnessd replay PATH`: re-evaluates every tool call recorded in a transcript
//! (or every transcript in a folder) against the current policy and prints the
//! calls whose decision would change. Nothing is executed.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::policy::evaluate;
use crate::agent::Transcript;
use crate::llm::Role;
use crate::text::{escape_json, escape_line};

/// Decisions recorded in the audit log, across its rotated files, streamed:
/// (task_id, tool_use_id) → "tier (rule)". An unreadable line is named on stderr.
fn recorded_decisions(events: &Path) -> HashMap<(String, String), String> {
    let params = crate::events::query::QueryParams {
        kind: Some("policy_decision".into()),
        ..Default::default()
    };
    let Ok(query) = crate::events::query::Query::new(params) else {
        return HashMap::new();
    };
    let found = match crate::events::query::run(events, query) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("warning: cannot list the audit log's files: {e}");
            return HashMap::new();
        }
    };
    found
        .filter_map(|f| match f {
            crate::events::query::Found::Line(_, ev) => Some(ev),
            crate::events::query::Found::Unreadable { path, line, error } => {
                let at = format!("{}:{line}: unreadable line: {error}", path.display());
                eprintln!("warning: {}", crate::text::escape_text(&at));
                None
            }
        })
        .map(|e| {
            let key = (
                e["task_id"].as_str().unwrap_or("").to_string(),
                e["tool_use_id"].as_str().unwrap_or("").to_string(),
            );
            (
                key,
                format!(
                    "{} ({})",
                    e["tier"].as_str().unwrap_or("?"),
                    e["rule"].as_str().unwrap_or("?")
                ),
            )
        })
        .collect()
}

fn transcripts(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Runs `replay`.
pub fn run(root: &Path, path: &Path, json_out: bool) -> anyhow::Result<i32> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let recorded = recorded_decisions(&loaded.paths.events);
    let mut rows = Vec::new();
    let mut total = 0;
    for file in
        transcripts(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?
    {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
        let t: Transcript = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} is not a harnessd transcript: {e}", file.display()))?;
        for m in t.messages.iter().filter(|m| m.role == Role::Assistant) {
            for (id, name, input) in m.tool_uses() {
                total += 1;
                let was = recorded
                    .get(&(t.task_id.clone(), id.clone()))
                    .cloned()
                    .unwrap_or_else(|| "-".into());
                let now = match evaluate(&loaded, &name, &input) {
                    Ok(d) => format!(
                        "{} ({})",
                        d["tier"].as_str().unwrap_or("?"),
                        d["rule"].as_str().unwrap_or("?")
                    ),
                    Err(_) => "-".into(),
                };
                let tier = |s: &str| s.split(' ').next().unwrap_or("").to_string();
                if tier(&was) != tier(&now) {
                    rows.push(json!({"task_id": t.task_id, "tool_use_id": id, "tool": name, "input": input, "was": was, "now": now}));
                }
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(
            out,
            "{}",
            escape_json(&serde_json::to_string_pretty(
                &json!({"calls": total, "changed": rows})
            )?)
        )?;
        return Ok(0);
    }
    writeln!(
        out,
        "{total} recorded tool calls, {} would be decided differently now",
        rows.len()
    )?;
    if !rows.is_empty() {
        writeln!(
            out,
            "{:<28} {:<14} {:<11} {:<40} {:<32} now",
            "task", "call", "tool", "input", "was"
        )?;
    }
    // Every field comes from a transcript (model text): one-line escapes.
    let field = |v: &Value| escape_line(v.as_str().unwrap_or("")).into_owned();
    for r in &rows {
        let input = crate::text::truncate_middle(&r["input"].to_string(), 38, 0)
            .0
            .replace('\n', " ");
        writeln!(
            out,
            "{:<28} {:<14} {:<11} {:<40} {:<32} {}",
            field(&r["task_id"]),
            field(&r["tool_use_id"]),
            field(&r["tool"]),
            escape_json(&input),
            field(&r["was"]),
            field(&r["now"])
        )?;
    }
    Ok(0)
}
