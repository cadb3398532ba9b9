//! `harnessd check`: validate both files and print the effective settings, the
//! tier of every tool, and what the sandbox enforces here; warn about settings
//! that weaken the boundary and state the one documented gap (see [`super::boundary`]).

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

use crate::agent::advertised;
use crate::config::{ApiKey, Loaded, SandboxRequire};
use crate::exec::Executor;
use crate::policy::{self, Subject};
use crate::sandbox::{Confinement, Layer};
use crate::text::{escape_json, escape_line, escape_text};
use crate::tools::ToolName;

fn tool_tiers(loaded: &Loaded) -> Vec<Value> {
    let p = &loaded.policy;
    ToolName::ALL
        .into_iter()
        .map(|tool| {
            let d = policy::decide(p, Subject { tool, arg: None });
            let patterns: Vec<String> = [("deny", &p.deny), ("ask", &p.ask), ("allow", &p.allow)]
                .iter()
                .flat_map(|(tier, rules)| {
                    rules
                        .iter()
                        .filter(|r| r.tool == tool && r.text.contains('('))
                        .map(move |r| format!("{tier} {}", r.text))
                })
                .collect();
            json!({
                "tool": tool.as_str(),
                "advertised": advertised(loaded, tool),
                "tier": d.tier.as_str(),
                "rule": d.rule_label(),
                "patterns": patterns,
            })
        })
        .collect()
}

/// What confines a tool process here: a real probe through the executor.
fn enforcement(loaded: &Loaded, helper: &Path) -> (u32, Vec<Layer>, Option<String>) {
    let confine = Confinement::from_settings(&loaded.policy.settings, &loaded.paths.root);
    match Executor::new(helper.to_path_buf()).probe(&confine, &loaded.paths.workspace) {
        Ok(report) => (report.landlock_abi, report.layers, None),
        Err(e) => (crate::sandbox::landlock_abi(), Vec::new(), Some(e)),
    }
}

/// Runs `check`.
pub fn run(
    root: &Path,
    json_out: bool,
    helper: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<i32> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let key_warning = ApiKey::load(&loaded, env).err().map(|e| e.to_string());
    let (abi, layers, probe_error) = enforcement(&loaded, helper);
    let missing: Vec<&Layer> = layers
        .iter()
        .filter(|l| !l.enforced && !l.optional)
        .collect();
    let refused = loaded.policy.settings.sandbox.require == SandboxRequire::Full
        && (probe_error.is_some() || !missing.is_empty());
    // Unreadable passwd: /home and /root are still checked.
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let boundary = super::boundary::warnings(&loaded, &super::boundary::passwd_homes(&passwd));
    let report = json!({
        "root": loaded.paths.root.display().to_string(),
        "config": {"file": crate::config::CONFIG_FILE, "sha256": loaded.config_sha256},
        "settings": {"file": loaded.paths.display(&loaded.paths.settings), "sha256": loaded.settings_sha256},
        "api": {
            "base_url": loaded.config.api.base_url,
            "model": loaded.config.api.model,
            "max_tokens": loaded.config.api.max_tokens,
            "key": key_warning.clone().unwrap_or_else(|| "present".into()),
        },
        "loop": loaded.config.loop_,
        "paths": loaded.config.paths,
        "tools": tool_tiers(&loaded),
        "allowed_paths": loaded.policy.settings.allowed_paths,
        "output": loaded.policy.settings.output,
        "sandbox": loaded.policy.settings.sandbox,
        "enforced": {
            "landlock_abi": abi,
            "layers": layers,
            "probe_error": probe_error,
            "tools_refused": refused,
        },
        "warnings": boundary,
        "documented_gap": super::boundary::HARD_LINK_GAP,
    });
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(
            out,
            "{}",
            escape_json(&serde_json::to_string_pretty(&report)?)
        )?;
        return Ok(0);
    }
    if let Some(w) = key_warning {
        eprintln!(
            "warning: {} (check does not need it; run does)",
            escape_text(&w)
        );
    }
    // Rules can hold model text (`approve --remember` writes the literal command),
    // and the probe's details quote the helper: every field is escaped.
    let field = |v: &Value| escape_line(v.as_str().unwrap_or("")).into_owned();
    writeln!(
        out,
        "ok: {} and {} are valid",
        field(&report["config"]["file"]),
        field(&report["settings"]["file"])
    )?;
    writeln!(
        out,
        "root       {}",
        escape_line(&loaded.paths.root.display().to_string())
    )?;
    writeln!(
        out,
        "model      {} at {}",
        escape_line(&loaded.config.api.model),
        escape_line(&loaded.config.api.base_url)
    )?;
    let l = &loaded.config.loop_;
    writeln!(
        out,
        "loop       max_turns {} · token_budget {} · max_tool_calls_per_turn {} · no_progress_repeats {}",
        l.max_turns, l.token_budget, l.max_tool_calls_per_turn, l.no_progress_repeats
    )?;
    writeln!(
        out,
        "tools      (tier without a pattern; pattern rules below)"
    )?;
    for t in tool_tiers(&loaded) {
        let shown = if t["advertised"] == true {
            ""
        } else {
            " (not advertised)"
        };
        writeln!(
            out,
            "  {:<11} {:<5} by {}{shown}",
            field(&t["tool"]),
            field(&t["tier"]),
            field(&t["rule"])
        )?;
        for p in t["patterns"].as_array().into_iter().flatten() {
            writeln!(out, "              {}", field(p))?;
        }
    }
    let s = &loaded.policy.settings;
    let list = |l: &[String]| escape_line(&l.join(", ")).into_owned();
    writeln!(out, "read       {}", list(&s.allowed_paths.read))?;
    writeln!(out, "write      {}", list(&s.allowed_paths.write))?;
    writeln!(out, "output     max_chars {}", s.output.max_chars)?;
    let sb = &s.sandbox;
    writeln!(
        out,
        "sandbox    network {} · timeout {} s · cpu {} s · memory {} MiB · processes {} · file {} MiB · open files {} · user {} · require {:?}",
        sb.network,
        sb.timeout_secs,
        sb.cpu_secs,
        sb.memory_mb,
        sb.max_processes,
        sb.max_file_mb,
        sb.max_open_files,
        escape_line(&sb.user),
        sb.require
    )?;
    writeln!(
        out,
        "enforced   (probed: a helper confined exactly as a tool; Landlock ABI {abi})"
    )?;
    for l in &layers {
        let mark = if l.enforced { "yes" } else { "NO " };
        writeln!(
            out,
            "  {mark} {:<15} {}",
            escape_line(&l.name),
            escape_line(&l.detail)
        )?;
    }
    if let Some(e) = &probe_error {
        writeln!(out, "  NO  probe           {}", escape_line(e))?;
    }
    writeln!(out, "gap        {}", super::boundary::HARD_LINK_GAP)?;
    for w in &boundary {
        eprintln!("warning: {w}");
    }
    if refused {
        eprintln!(
            "warning: sandbox.require is \"full\" and the sandbox is incomplete here: \
             tools will be refused"
        );
    } else if !missing.is_empty() {
        eprintln!(
            "warning: best_effort sandbox: {} layer(s) not enforced",
            missing.len()
        );
    }
    Ok(0)
}
