//! `harnessd policy test TOOL INPUT` (what would policy decide, and why; with
//! `--hooks`, what the pre_tool hooks make of it) and
//! `harnessd policy schema` (the JSON Schema of settings.json).

use super::error::{CliError, exit};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};

use super::EXIT_CONFIG;
use crate::config::Loaded;
use crate::hooks;
use crate::protocol::Tier;
use crate::text::{escape_json, escape_line, escape_text};
pub use crate::tools::explain::evaluate;
use crate::tools::explain::input_from_arg;

/// Exit code of `policy test` for a call that would run without asking.
pub const EXIT_ALLOW: i32 = 0;
/// Exit code of `policy test` for a call that would ask a human.
pub const EXIT_ASK: i32 = 3;
/// Exit code of `policy test` for a call that would be refused.
pub const EXIT_DENY: i32 = 4;

/// The exit code for a decision: 0 allow, 3 ask, 4 deny.
fn exit_code(report: &Value) -> i32 {
    match report["tier"].as_str() {
        Some("allow") => EXIT_ALLOW,
        Some("ask") => EXIT_ASK,
        _ => EXIT_DENY,
    }
}

/// Runs `policy test`: prints the decision and exits 0 (allow), 3 (ask) or 4
/// (deny); 2 when the call cannot be judged. The exit code is the decision even
/// when stdout is a closed pipe (`| head`): the report is a courtesy, the code is
/// the answer.
/// Runs one `policy` subcommand; `helper` is the sandbox helper hooks run in.
pub fn dispatch(
    root: &Path,
    command: crate::cli::PolicyCommand,
    helper: &Path,
) -> Result<ExitCode, CliError> {
    match command {
        crate::cli::PolicyCommand::Test {
            tool,
            input,
            json,
            hooks,
        } => test(root, &tool, &input, json, hooks.then_some(helper)),
        crate::cli::PolicyCommand::Schema => schema(),
    }
}

/// With `hooks` (the sandbox helper), the pre_tool hooks run on the call too.
pub fn test(
    root: &Path,
    tool: &str,
    arg: &str,
    json_out: bool,
    hooks: Option<&Path>,
) -> Result<ExitCode, CliError> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(exit(code)),
    };
    let input = input_from_arg(tool, arg);
    let mut report = match evaluate(&loaded, tool, &input) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e));
            return Ok(exit(EXIT_CONFIG));
        }
    };
    if let Some(helper) = hooks {
        run_hooks(&Arc::new(loaded), helper, tool, &input, &mut report)?;
    }
    let mut out = std::io::stdout().lock();
    let written = if json_out {
        serde_json::to_string_pretty(&report)
            .map_err(std::io::Error::other)
            .and_then(|text| writeln!(out, "{}", escape_json(&text)))
    } else {
        print_report(&mut out, &report)
    };
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(exit(exit_code(&report))),
    }
}

/// Runs the pre_tool hooks on the sample call, confined as for a task, and puts
/// their answers and the final decision into `report`.
fn run_hooks(
    loaded: &Arc<Loaded>,
    helper: &Path,
    tool: &str,
    input: &Value,
    report: &mut Value,
) -> Result<(), CliError> {
    let tier = match report["tier"].as_str() {
        Some("allow") => Tier::Allow,
        Some("ask") => Tier::Ask,
        _ => Tier::Deny,
    };
    let decided = hooks::Decided {
        tier,
        rule: report["rule"].as_str().unwrap_or("default").to_string(),
        raised: report["raised"].is_string() || report["unseen"].is_string(),
    };
    let call = hooks::Call {
        task_id: "policy-test",
        tool,
        tool_use_id: "toolu_policy_test",
        input,
    };
    let executor = crate::exec::Executor::new(helper.to_path_buf());
    let never = tokio_util::sync::CancellationToken::new();
    let out = super::runtime()?.block_on(hooks::pre_tool(&executor, loaded, call, decided, &never));
    report["tier"] = out.decided.tier.as_str().into();
    report["rule"] = out.decided.rule.into();
    report["hooks"] = out
        .records
        .iter()
        .map(|r| {
            json!({
                "hook": r.hook,
                "decision": r.decision.as_str(),
                "reason": r.reason,
                "duration_ms": r.duration_ms,
            })
        })
        .collect();
    Ok(())
}

/// The human-readable report of `policy test`.
fn print_report(out: &mut impl Write, report: &Value) -> std::io::Result<()> {
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
    if let Some(why) = report["raised"].as_str() {
        writeln!(out, "{}", escape_line(why))?;
    }
    if report["server"].is_string() {
        // An MCP call runs in its server, not in a tool process: no profile.
        match report["pinned"].as_str() {
            Some(sha) => writeln!(out, "pinned: sha256 {}", escape_line(sha))?,
            None => writeln!(out, "pinned: no")?,
        }
        return Ok(());
    }
    match (report["tier"].as_str(), report["profile"].as_str()) {
        (Some("deny"), _) | (_, None) => {}
        (tier, Some(profile)) => {
            let what = match profile {
                "read_only" => "it may write only /dev/null and a private temporary directory",
                _ => "it may write allowed_paths.write",
            };
            let when = if tier == Some("ask") {
                ", if approved"
            } else {
                ""
            };
            writeln!(out, "profile: {profile} ({what}{when})")?;
        }
    }
    if let Some(why) = report["refused"].as_str() {
        writeln!(out, "{}", escape_line(why))?;
    }
    if let Some(note) = report["allowed_paths"].as_str() {
        writeln!(out, "note: {}", escape_line(note))?;
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
    for h in report["hooks"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "hook {}: {} ({} ms){}",
            field(&h["hook"]),
            field(&h["decision"]),
            h["duration_ms"].as_u64().unwrap_or(0),
            h["reason"]
                .as_str()
                .map(|r| format!(": {}", escape_line(r)))
                .unwrap_or_default()
        )?;
    }
    if let Some(entries) = report["programs"].as_array() {
        writeln!(out, "program table entries met:")?;
        for e in entries {
            writeln!(out, "  - {}", escape_line(e.as_str().unwrap_or("")))?;
        }
    }
    Ok(())
}

/// The JSON Schema of settings.json, generated from the Rust types.
pub fn settings_schema() -> String {
    crate::config::settings_schema()
}

/// Runs `policy schema`.
pub fn schema() -> Result<ExitCode, CliError> {
    std::io::stdout()
        .lock()
        .write_all(settings_schema().as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
