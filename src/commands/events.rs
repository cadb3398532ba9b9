//! `harnessd events`: queries the audit log (docs/commands.md). Through the daemon's
//! `/v1/events` when it runs (and always with `--follow`), from the files
//! otherwise; either way the log is streamed, never held whole. A table by
//! default, the log's own JSON lines with `--json`. An unknown `--type`, a bad
//! time or regex is a usage error (exit 2) before anything is read; a line that
//! does not parse is named on stderr by file and line, and the exit code is 1.

use super::error::{CliError, exit};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;

use super::EXIT_CONFIG;
use super::clients::{enc, socket_of, warn, warn_unreadable};
use crate::cli::EventsArgs;
use crate::control::LineStream;
use crate::events::query::{self, Found, Query, QueryParams};
use crate::text::{escape_json, escape_line, escape_text};

/// Fields shown in the table's last column, in this order, when present.
const DETAIL_FIELDS: &[&str] = &[
    "tool",
    "tier",
    "rule",
    "decision",
    "by",
    "commands",
    "not_provable",
    "input",
    "exit_code",
    "duration_ms",
    "is_error",
    "output_file",
    "stop_reason",
    "error",
    "prompt",
    "reason",
    "file",
    "first_seq",
    "last_seq",
    "trigger",
    "usage",
];

/// Longest value shown in the table (the full line is in `--json`).
const MAX_VALUE_CHARS: usize = 120;

/// Runs `events`.
pub fn run(root: &Path, args: EventsArgs) -> Result<ExitCode, CliError> {
    let params = QueryParams {
        task: args.task,
        kind: args.kind,
        tool: args.tool,
        since: args.since,
        until: args.until,
        grep: args.grep,
    };
    if let Err(e) = Query::new(params.clone()) {
        eprintln!("error: {}", escape_text(&e.to_string()));
        return Ok(exit(EXIT_CONFIG));
    }
    let socket = match socket_of(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e));
            return Ok(exit(EXIT_CONFIG));
        }
    };
    let mut printer = Printer {
        json: args.json,
        header: false,
    };
    if !args.follow && std::os::unix::net::UnixStream::connect(&socket).is_err() {
        return from_files(root, params, &mut printer);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(through_daemon(&socket, &params, args.follow, &mut printer))
}

/// Prints events as a table or as JSON lines.
struct Printer {
    json: bool,
    header: bool,
}

impl Printer {
    fn print(&mut self, out: &mut impl Write, raw: &str, ev: &Value) -> std::io::Result<()> {
        if self.json {
            return writeln!(out, "{}", escape_json(raw));
        }
        if !self.header {
            self.header = true;
            writeln!(
                out,
                "{:>6}  {:<24}  {:<26}  {:<20}  details",
                "seq", "ts", "task", "type"
            )?;
        }
        let field = |k: &str| ev.get(k).and_then(Value::as_str).unwrap_or("-");
        writeln!(
            out,
            "{:>6}  {:<24}  {:<26}  {:<20}  {}",
            ev.get("seq").and_then(Value::as_u64).unwrap_or(0),
            escape_line(field("ts")),
            escape_line(field("task_id")),
            escape_line(field("type")),
            details(ev)
        )
    }
}

/// `key=value` for the fields of [`DETAIL_FIELDS`] the event has, escaped.
fn details(ev: &Value) -> String {
    let mut parts = Vec::new();
    for key in DETAIL_FIELDS {
        let Some(v) = ev.get(*key).filter(|v| !v.is_null()) else {
            continue;
        };
        let text = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let shown: String = text.chars().take(MAX_VALUE_CHARS).collect();
        let more = if shown.len() < text.len() { "…" } else { "" };
        parts.push(format!("{key}={}{more}", escape_line(&shown)));
    }
    parts.join(" ")
}

/// Without a daemon: the files themselves.
fn from_files(
    root: &Path,
    params: QueryParams,
    printer: &mut Printer,
) -> Result<ExitCode, CliError> {
    let live = match super::audit::events_path(root) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e));
            return Ok(exit(EXIT_CONFIG));
        }
    };
    let query = Query::new(params)?;
    let mut out = std::io::stdout().lock();
    let mut unreadable = false;
    for found in query::run(&live, query)? {
        match found {
            Found::Line(bytes, ev) => {
                printer.print(&mut out, &String::from_utf8_lossy(&bytes), &ev)?;
            }
            Found::Unreadable { path, line, error } => {
                unreadable = true;
                warn(&format!(
                    "{}:{line}: unreadable line: {error}",
                    path.display()
                ));
            }
        }
    }
    Ok(if unreadable {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Through the daemon's `/v1/events`, with the same filters as query parameters.
async fn through_daemon(
    socket: &Path,
    params: &QueryParams,
    follow: bool,
    printer: &mut Printer,
) -> Result<ExitCode, CliError> {
    let mut q = Vec::new();
    for (key, value) in [
        ("task", &params.task),
        ("type", &params.kind),
        ("tool", &params.tool),
        ("since", &params.since),
        ("until", &params.until),
        ("grep", &params.grep),
    ] {
        if let Some(v) = value {
            q.push(format!("{key}={}", enc(v)));
        }
    }
    if follow {
        q.push("follow=1".into());
    }
    let path = format!("/v1/events?{}", q.join("&"));
    let mut out = std::io::stdout().lock();
    let mut unreadable = false;
    let mut lines = match LineStream::open(socket, &path).await {
        Ok(lines) => lines,
        Err(e) => {
            eprintln!("error: {}", escape_text(&e.to_string()));
            return Ok(ExitCode::FAILURE);
        }
    };
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                eprintln!("error: {}", escape_text(&e.to_string()));
                return Ok(ExitCode::FAILURE);
            }
        };
        let Ok(ev) = serde_json::from_str::<Value>(&line) else {
            writeln!(out, "{}", escape_text(&line))?;
            continue;
        };
        // The daemon names a line of the log that does not parse; a warning, and
        // exit 1 at the end, rather than an event among the others.
        if ev["type"] == "unreadable_line" {
            unreadable = true;
            warn_unreadable(&ev);
            continue;
        }
        // A reader that went away (`| head`) ends the command, `--follow` too: the
        // write error goes up and `main` ends quietly on a closed pipe.
        printer.print(&mut out, &line, &ev)?;
        out.flush()?;
    }
    Ok(if lines.status() == 200 && !unreadable {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
