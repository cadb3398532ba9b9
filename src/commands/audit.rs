//! `harnessd audit verify`: checks the audit log's hash chain and seq over every
//! file (docs/events.md, docs/commands.md). Reads only `config/config.toml` to find the log, so a
//! broken policy file does not stop an audit.

use super::error::{CliError, exit};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;

use super::EXIT_CONFIG;
use crate::events::verify::{Head, VerifyError, verify_against};
use crate::text::escape_text;

/// The live audit log of `root`, from `paths.events` in its config.toml.
pub fn events_path(root: &Path) -> Result<PathBuf, String> {
    let file = root.join(crate::config::CONFIG_FILE);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let config = crate::config::Config::parse(&text, crate::config::CONFIG_FILE)
        .map_err(|e| e.to_string())?;
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    Ok(crate::config::resolve(&root, &config.paths.events))
}

/// `audit verify`: exit 0 and the chain head, 1 naming what is wrong, 2 when the
/// root cannot be read.
/// With `head`, the log must still hold that line unchanged (see
/// [`crate::events::verify::Head`]).
pub fn verify(root: &Path, head: Option<&Head>, json_out: bool) -> Result<ExitCode, CliError> {
    let live = match events_path(root) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e));
            return Ok(exit(EXIT_CONFIG));
        }
    };
    let mut out = std::io::stdout().lock();
    match verify_against(&live, head) {
        Ok(r) => {
            let (head_seq, head) = r.head.clone().unwrap_or((0, crate::events::GENESIS.into()));
            if json_out {
                let begins = r.chain_begins.as_ref().map(|(p, line, seq)| {
                    json!({"file": p.display().to_string(), "line": line, "seq": seq})
                });
                let gaps: Vec<_> = r
                    .gaps
                    .iter()
                    .map(|g| {
                        json!({
                            "file": g.path.display().to_string(), "line": g.line, "seq": g.seq,
                            "first_missing": g.first_missing, "last_missing": g.last_missing,
                        })
                    })
                    .collect();
                let v = json!({"ok": r.gaps.is_empty(), "lines": r.lines, "files": r.files,
                    "head_seq": head_seq, "head": head, "chain_begins": begins,
                    "unchained": r.unchained, "gaps": gaps});
                writeln!(out, "{v}")?;
                return Ok(if r.gaps.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
            if !r.gaps.is_empty() {
                return report_gaps(&r);
            }
            writeln!(
                out,
                "ok: {} lines in {} file(s), head seq {head_seq} {head}",
                r.lines, r.files
            )?;
            if r.unchained > 0 {
                let at = r
                    .chain_begins
                    .as_ref()
                    .map_or("nowhere yet".to_string(), |(p, l, s)| {
                        format!("{}:{l} (seq {s})", p.display())
                    });
                writeln!(
                    out,
                    "note: the first {} lines were written without prev (an earlier version); the chain begins at {}",
                    r.unchained,
                    escape_text(&at)
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(VerifyError::Broken(b)) => {
            if json_out {
                let v = json!({"ok": false, "file": b.path.display().to_string(),
                    "line": b.line, "seq": b.seq, "error": b.what});
                writeln!(out, "{v}")?;
            }
            eprintln!("audit log broken: {}", escape_text(&b.to_string()));
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("error: {}", escape_text(&e.to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A chain intact but for gaps the daemon recorded: each is named, and the exit is
/// 1, since lines are missing (docs/auditing.md).
fn report_gaps(r: &crate::events::verify::Report) -> Result<ExitCode, CliError> {
    for g in &r.gaps {
        let missing = if g.first_missing == g.last_missing {
            format!("seq {}", g.first_missing)
        } else {
            format!("seq {} to {}", g.first_missing, g.last_missing)
        };
        eprintln!(
            "audit log has a recorded gap: {}:{}: seq {}: events_gap: {missing} missing (the \
             log file was removed or replaced under the daemon, which noticed and recorded \
             it); the chain is intact on either side",
            escape_text(&g.path.display().to_string()),
            g.line,
            g.seq
        );
    }
    let (head_seq, head) = r.head.clone().unwrap_or((0, crate::events::GENESIS.into()));
    writeln!(
        std::io::stdout().lock(),
        "gaps: {} recorded; {} lines in {} file(s), head seq {head_seq} {head}",
        r.gaps.len(),
        r.lines,
        r.files
    )?;
    Ok(ExitCode::FAILURE)
}

/// `audit schema`: the JSON Schema of a line of events.jsonl.
pub fn schema() -> Result<ExitCode, CliError> {
    std::io::stdout()
        .lock()
        .write_all(crate::events::events_schema().as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
