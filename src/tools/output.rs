//! Turning an [`ExecOutcome`] into the `tool_result` the model sees, capped to
//! `output.max_chars`, and into the full record under `transcripts/<task_id>/`.

use std::io::Write;
use std::path::Path;

use crate::exec::{Captured, Ending, ExecOutcome, FLOOD_CAP_BYTES};
use crate::sandbox::SETUP_FAILED;
use crate::text::truncate_middle;

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The text the model sees, capped.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// The process's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Bytes of output the call produced (stdout + stderr).
    pub output_bytes: u64,
    /// Whether `content` was cut to the cap.
    pub truncated: bool,
}

impl ToolResult {
    /// A result that never ran anything (policy, validation, limits).
    pub fn error(message: impl Into<String>) -> ToolResult {
        ToolResult {
            content: message.into(),
            is_error: true,
            exit_code: None,
            output_bytes: 0,
            truncated: false,
        }
    }

    /// A successful in-process result (e.g. `get_time`).
    pub fn ok(content: impl Into<String>) -> ToolResult {
        let content = content.into();
        ToolResult {
            output_bytes: content.len() as u64,
            content,
            is_error: false,
            exit_code: None,
            truncated: false,
        }
    }
}

fn ending_header(ending: &Ending, timeout_secs: u64) -> String {
    match ending {
        Ending::Exited(code) => format!("exit_code: {code}\n"),
        Ending::Signaled(sig) => format!("exit_code: {}\nkilled by signal {sig}\n", 128 + sig),
        Ending::TimedOut => format!(
            "timed out after {timeout_secs} s; the command and every process it started were \
             killed. Make it faster, give it less input, or run part of the work at a time.\n"
        ),
        Ending::Flooded => format!(
            "output passed {} MiB; the command and every process it started were killed. \
             Redirect output to a file and read the parts you need.\n",
            FLOOD_CAP_BYTES / (1024 * 1024)
        ),
        Ending::Cancelled => "cancelled: the task was stopped; the process was killed.\n".into(),
        Ending::SpawnFailed(e) => format!("the tool could not be started: {e}\n"),
    }
}

fn section(name: &str, c: &Captured) -> String {
    if c.total == 0 {
        return String::new();
    }
    let mut text = c.text();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    format!("{name}:\n{text}")
}

/// Renders an outcome for the model and writes the full output to `out_file`.
pub fn render_result(
    is_command: bool,
    outcome: &ExecOutcome,
    timeout_secs: u64,
    max_chars: usize,
    out_file: Option<&Path>,
) -> ToolResult {
    let exit_code = match outcome.ending {
        Ending::Exited(c) => Some(c),
        Ending::Signaled(s) => Some(128 + s),
        _ => None,
    };
    let output_bytes = outcome.stdout.total + outcome.stderr.total;
    let omitted = outcome.stdout.omitted() + outcome.stderr.omitted();
    let (header, is_error, view) = if is_command {
        let header = ending_header(&outcome.ending, timeout_secs);
        let view = format!(
            "{header}{}{}",
            section("stdout", &outcome.stdout),
            section("stderr", &outcome.stderr)
        );
        (header, exit_code != Some(0), view)
    } else {
        match &outcome.ending {
            Ending::Exited(0) => (String::new(), false, outcome.stdout.text()),
            Ending::Exited(SETUP_FAILED) => {
                let view = format!(
                    "the sandbox refused to run this call: {}",
                    outcome.stderr.text().trim_end()
                );
                (String::new(), true, view)
            }
            Ending::Exited(_) => (String::new(), true, outcome.stderr.text()),
            other => {
                let h = ending_header(other, timeout_secs);
                (h.clone(), true, h)
            }
        }
    };
    let mut notes = String::new();
    for n in &outcome.notes {
        notes.push_str(&format!("[note: {n}]\n"));
    }
    // Notes always reach the model, so they are paid for out of the cap.
    let budget = max_chars.saturating_sub(notes.chars().count());
    let (mut content, truncated) = truncate_middle(&view, budget, omitted);
    content.push_str(&notes);
    if let Some(path) = out_file
        && let Err(e) = write_full(path, &header, is_command, outcome)
    {
        tracing::warn!("cannot keep full tool output at {}: {e}", path.display());
    }
    ToolResult {
        content,
        is_error,
        exit_code,
        output_bytes,
        truncated,
    }
}

/// Writes header + full stdout + full stderr (from their spools, which it removes).
/// Neither file is opened through a symlink: harnessd may be root here.
fn write_full(path: &Path, header: &str, is_command: bool, o: &ExecOutcome) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        // Tool output can hold anything the tools read: private like the transcript.
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    out.write_all(header.as_bytes())?;
    for (name, c) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        if c.total == 0 {
            if let Some(spool) = &c.spool {
                let _ = std::fs::remove_file(spool);
            }
            continue;
        }
        if is_command {
            writeln!(out, "{name}:")?;
        }
        match &c.spool {
            Some(spool) => {
                let mut spooled = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(spool)?;
                std::io::copy(&mut spooled, &mut out)?;
                let _ = std::fs::remove_file(spool);
            }
            None => out.write_all(&c.bytes())?,
        }
    }
    out.flush()
}
