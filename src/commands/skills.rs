//! `harnessd skills`: every skill under the root's `skills/` with its state —
//! offered, or not offered and why, with file and line — read exactly as a
//! task's start reads them; and what `check` warns about skills and the
//! workspace's `AGENTS.md`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{Value, json};

use super::error::{CliError, exit};
use crate::config::{Loaded, resolve};
use crate::knowledge::{self, SKILLS_DIR};
use crate::text::{escape_json, escape_line};
use crate::tools::ToolName;

/// The report: the skills directory, whether `load_skill` is offered, each skill.
fn report(loaded: &Loaded) -> Value {
    let skills = knowledge::scan(&loaded.paths.root);
    let offered = skills.offered.iter().map(|s| {
        json!({
            "name": s.name,
            "state": "offered",
            "file": format!("{}/{}", s.dir(), knowledge::SKILL_FILE),
            "description": s.description,
            "sha256": s.sha256,
            "body_bytes": s.body.len(),
        })
    });
    let refused = skills.refused.iter().map(|r| {
        json!({
            "name": r.dir,
            "state": "not_offered",
            "file": r.file,
            "line": r.line,
            "reason": r.reason,
        })
    });
    json!({
        "dir": loaded.paths.root.join(SKILLS_DIR).display().to_string(),
        "load_skill_offered": crate::agent::advertised(loaded, ToolName::LoadSkill),
        "skills": offered.chain(refused).collect::<Vec<_>>(),
    })
}

/// Runs `skills`.
pub fn run(root: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    let loaded = match super::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(exit(code)),
    };
    let report = report(&loaded);
    let mut out = std::io::stdout().lock();
    if json_out {
        let text = serde_json::to_string_pretty(&report)?;
        writeln!(out, "{}", escape_json(&text))?;
        return Ok(ExitCode::SUCCESS);
    }
    let skills = report["skills"].as_array().cloned().unwrap_or_default();
    let field = |v: &Value| escape_line(v.as_str().unwrap_or("")).into_owned();
    if skills.is_empty() {
        writeln!(out, "no skills in {}", field(&report["dir"]))?;
    }
    for s in &skills {
        if s["state"] == "offered" {
            let description = one_line(&field(&s["description"]), 100);
            writeln!(out, "offered      {:<24} {description}", field(&s["name"]))?;
        } else {
            let place = match s["line"].as_u64() {
                Some(line) => format!("{}:{line}", field(&s["file"])),
                None => field(&s["file"]),
            };
            writeln!(
                out,
                "not offered  {:<24} {place}: {}",
                field(&s["name"]),
                field(&s["reason"])
            )?;
        }
    }
    if report["load_skill_offered"] == false {
        writeln!(
            out,
            "note: load_skill is not offered to the model (tools.enabled or a deny rule), so \
             tasks are offered no skill"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `text` cut to `width` characters, with `…` when cut.
fn one_line(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `check`'s warnings: each skill not offered (file and line), an `AGENTS.md`
/// that is not read, and a write set that reaches `skills/`, where what a tool
/// writes would instruct later tasks.
pub fn warnings(loaded: &Loaded) -> Vec<String> {
    let mut out = Vec::new();
    let advertised = crate::agent::advertised(loaded, ToolName::LoadSkill);
    if advertised {
        for r in knowledge::scan(&loaded.paths.root).refused {
            out.push(format!("skill not offered: {}", r.describe()));
        }
    }
    if let Err(e) = knowledge::read_agents_md(&loaded.paths.workspace) {
        out.push(e.to_string());
    }
    let skills = loaded.paths.root.join(SKILLS_DIR);
    for w in &loaded.policy.settings.allowed_paths.write {
        let tree = resolve(&loaded.paths.root, w);
        if skills.starts_with(&tree) || tree.starts_with(&skills) {
            out.push(format!(
                "allowed_paths.write {w:?} reaches {SKILLS_DIR}/: a tool could write a skill \
                 that later tasks are offered as the operator's instructions; keep {SKILLS_DIR}/ \
                 out of the write set"
            ));
        }
    }
    out
}
