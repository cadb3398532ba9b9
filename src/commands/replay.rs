//! `harnessd replay [--settings FILE] [PATH…]`: re-evaluates every tool call
//! recorded in transcripts (files or folders; the root's by default) against the
//! live policy or a candidate settings file, and prints the calls whose decision
//! would change. Nothing is executed and the live file is never touched. An MCP
//! call is judged with the root's lock file, as if its server still listed the
//! pinned definition.

use super::error::{CliError, exit};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};

use super::EXIT_CONFIG;
use super::policy::evaluate;
use crate::agent::Transcript;
use crate::config::{Loaded, Settings, SettingsContext};
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
            (key, label(&e))
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

/// The policy calls are judged by: the root's live settings, or with
/// `--settings FILE` a candidate file, validated like the live one (errors name
/// the file, line and key), without touching the live file.
fn judged_by(root: &Path, candidate: Option<&Path>) -> Result<(Loaded, String), i32> {
    let mut loaded = crate::commands::load_root(root)?;
    let Some(file) = candidate else {
        return Ok((loaded, "now".into()));
    };
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|e| {
        eprintln!("error: cannot read {}: {e}", escape_line(&name));
        EXIT_CONFIG
    })?;
    // The candidate is judged against the root's lock file and config, as the
    // live file is.
    let pins = loaded.policy.pins.clone();
    let context = SettingsContext {
        pins: Some(&pins),
        api_key_env: Some(&loaded.config.api.api_key_env),
    };
    loaded.policy = Settings::parse_in(&text, &name, context).map_err(|e| {
        eprintln!("error: {}", crate::text::escape_text(&e.to_string()));
        EXIT_CONFIG
    })?;
    Ok((loaded, format!("under {name}")))
}

/// Every recorded call of the transcripts under `paths`, judged by `loaded`;
/// returns how many there were and those whose tier would change.
fn replay_all(loaded: &Loaded, paths: &[PathBuf]) -> Result<(usize, Vec<Value>), CliError> {
    let recorded = recorded_decisions(&loaded.paths.events);
    let mut changed = Vec::new();
    let mut total = 0;
    for path in paths {
        let files = transcripts(path)
            .map_err(|e| CliError::Failed(format!("cannot read {}: {e}", path.display())))?;
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| CliError::Failed(format!("cannot read {}: {e}", file.display())))?;
            let t: Transcript = serde_json::from_str(&text).map_err(|e| {
                CliError::Failed(format!(
                    "{} is not a harnessd transcript: {e}",
                    file.display()
                ))
            })?;
            for m in t.messages.iter().filter(|m| m.role == Role::Assistant) {
                for crate::llm::ToolUse { id, name, input } in m.tool_uses() {
                    total += 1;
                    let was = recorded
                        .get(&(t.task_id.clone(), id.clone()))
                        .cloned()
                        .unwrap_or_else(|| "-".into());
                    let now = match evaluate(loaded, &name, &input) {
                        Ok(d) => label(&d),
                        Err(_) => "-".into(),
                    };
                    let tier = |s: &str| s.split(' ').next().unwrap_or("").to_string();
                    if tier(&was) != tier(&now) {
                        changed.push(json!({"task_id": t.task_id, "tool_use_id": id,
                            "tool": name, "input": input, "was": was, "now": now}));
                    }
                }
            }
        }
    }
    Ok((total, changed))
}

/// Runs `replay`: `paths` are transcripts or folders of them (default: the root's
/// transcripts folder).
pub fn run(
    root: &Path,
    candidate: Option<&Path>,
    paths: &[PathBuf],
    json_out: bool,
) -> Result<ExitCode, CliError> {
    let (loaded, judge) = match judged_by(root, candidate) {
        Ok(l) => l,
        Err(code) => return Ok(exit(code)),
    };
    let paths = if paths.is_empty() {
        vec![loaded.paths.transcripts.clone()]
    } else {
        paths.to_vec()
    };
    let (total, changed) = replay_all(&loaded, &paths)?;
    let mut out = std::io::stdout().lock();
    if json_out {
        let text = serde_json::to_string_pretty(&json!({"calls": total, "changed": changed}))?;
        writeln!(out, "{}", escape_json(&text))?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{total} recorded tool calls, {} would be decided differently {judge}",
        changed.len()
    )?;
    print_table(&mut out, &changed)?;
    Ok(ExitCode::SUCCESS)
}

/// The changed calls as a table whose columns line up: each column as wide as
/// its widest cell (in characters, after escaping), the input cut in the middle.
fn print_table(out: &mut impl Write, changed: &[Value]) -> std::io::Result<()> {
    if changed.is_empty() {
        return Ok(());
    }
    // Every field comes from a transcript (model text): one-line escapes.
    let field = |v: &Value| escape_line(v.as_str().unwrap_or("")).into_owned();
    let mut rows = vec![["TASK", "CALL", "TOOL", "INPUT", "WAS", "NOW"].map(String::from)];
    for r in changed {
        let input = crate::text::truncate_middle(&r["input"].to_string(), 40, 0).0;
        rows.push([
            field(&r["task_id"]),
            field(&r["tool_use_id"]),
            field(&r["tool"]),
            escape_line(&input).into_owned(),
            field(&r["was"]),
            field(&r["now"]),
        ]);
    }
    crate::commands::table::print(out, &rows)
}

/// `tier (rule)`, with `:read_only` after an `allow` that runs read-only, so a
/// call that ran with writes and would now run read-only counts as changed. A
/// record from before profiles existed ran with writes.
fn label(d: &serde_json::Value) -> String {
    let tier = d["tier"].as_str().unwrap_or("?");
    let profile = match (tier, d["profile"].as_str()) {
        ("allow", Some("read_only")) => ":read_only",
        _ => "",
    };
    format!("{tier}{profile} ({})", d["rule"].as_str().unwrap_or("?"))
}
