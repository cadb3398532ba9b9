//! Turning an [`ExecOutcome`] into the `tool_result` the model sees, capped to
//! `output.max_chars`, and into the full record under `transcripts/<task_id>/`.

use std::io::Write;
use std::path::Path;

use crate::exec::{Captured, CutReason, Ending, ExecOutcome, FLOOD_CAP_BYTES, SpoolBudget};
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
    /// Output counted but not kept in the `.out` file (the task's spool budget or
    /// the disk reserve); `None` when the file holds all of it.
    pub spool_cut: Option<SpoolCut>,
}

/// What of a call's output the `.out` file does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolCut {
    /// Output bytes the file holds.
    pub kept_bytes: u64,
    /// Output bytes counted but not kept.
    pub not_kept_bytes: u64,
    /// Why the first bytes were not kept.
    pub reason: CutReason,
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
            spool_cut: None,
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
            spool_cut: None,
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

/// Renders an outcome for the model and writes the full output to `out_file`,
/// within `budget` (the spools already drew from it; what memory held draws now).
pub fn render_result(
    is_command: bool,
    outcome: &ExecOutcome,
    timeout_secs: u64,
    max_chars: usize,
    out_file: Option<(&Path, &SpoolBudget)>,
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
    let mut spool_cut = None;
    if let Some((path, budget)) = out_file {
        let mut kept = Kept::default();
        if let Err(e) = write_full(path, &header, is_command, outcome, budget, &mut kept) {
            tracing::warn!("cannot keep full tool output at {}: {e}", path.display());
        }
        spool_cut = kept.reason.map(|reason| SpoolCut {
            kept_bytes: kept.bytes,
            not_kept_bytes: output_bytes.saturating_sub(kept.bytes),
            reason,
        });
    }
    if let Some(cut) = &spool_cut {
        // The model is told too, so it does not read the file for what is not there.
        content.push_str(&spool_note(cut, output_bytes));
    }
    ToolResult {
        content,
        is_error,
        exit_code,
        output_bytes,
        truncated,
        spool_cut,
    }
}

/// Renders text made in the daemon (an MCP server's answer) like a tool's output:
/// capped to `max_chars` for the model, kept whole in `out_file` within its budget.
pub fn render_text(
    text: &str,
    is_error: bool,
    max_chars: usize,
    out_file: Option<(&Path, &SpoolBudget)>,
) -> ToolResult {
    let output_bytes = text.len() as u64;
    let (mut content, truncated) = truncate_middle(text, max_chars, 0);
    let mut spool_cut = None;
    if let Some((path, budget)) = out_file {
        let (mut granted, reason) = budget.grant(output_bytes);
        if let Err(e) = write_private(path, &text.as_bytes()[..granted as usize]) {
            // Nothing is kept: the file does not say otherwise.
            budget.give_back(granted);
            granted = 0;
            tracing::warn!("cannot keep full tool output at {}: {e}", path.display());
        }
        spool_cut = reason.map(|reason| SpoolCut {
            kept_bytes: granted,
            not_kept_bytes: output_bytes - granted,
            reason,
        });
    }
    if let Some(cut) = &spool_cut {
        content.push_str(&spool_note(cut, output_bytes));
    }
    ToolResult {
        content,
        is_error,
        exit_code: None,
        output_bytes,
        truncated,
        spool_cut,
    }
}

/// Writes `bytes` to a new private file (mode 0600), never through a link: the
/// daemon may be root, and the directory holds what tools read.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    out.write_all(bytes)
}

/// What the model is told when the `.out` file does not hold all of the output.
fn spool_note(cut: &SpoolCut, output_bytes: u64) -> String {
    format!(
        "[note: the full output file holds {} of {output_bytes} bytes: {}]\n",
        cut.kept_bytes,
        cut_why(cut.reason)
    )
}

/// Why output was not kept, for the model and the `.out` file.
fn cut_why(reason: CutReason) -> &'static str {
    match reason {
        CutReason::Budget => "this task used up output.max_spool_mb",
        CutReason::Reserve => {
            "free space on the transcripts filesystem is under audit.reserve_mb, which is \
             kept for the audit log"
        }
    }
}

/// What [`write_full`] kept: output bytes written, and why the first not written
/// were not.
#[derive(Debug, Default)]
struct Kept {
    bytes: u64,
    reason: Option<CutReason>,
}

impl Kept {
    fn cut(&mut self, reason: CutReason) {
        self.reason.get_or_insert(reason);
    }
}

/// Writes header + full stdout + full stderr (from their spools, which it removes).
/// Neither file is opened through a symlink: harnessd may be root here. A stream's
/// bytes that are not kept are followed by a line saying how many and why.
fn write_full(
    path: &Path,
    header: &str,
    is_command: bool,
    o: &ExecOutcome,
    budget: &SpoolBudget,
    kept: &mut Kept,
) -> std::io::Result<()> {
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
        let (written, reason) = match &c.spool {
            Some(spool) => {
                let copied = copy_spool(spool, &mut out, budget);
                let _ = std::fs::remove_file(spool);
                let copied = copied?;
                // The spool's own cut comes first; else a copy stopped at the floor.
                let reason = c.cut.or((copied < c.spooled).then_some(CutReason::Reserve));
                (copied, reason)
            }
            None => {
                // Held in memory only; it is kept on disk now, so it draws now.
                let bytes = c.bytes();
                let (n, reason) = budget.grant(bytes.len() as u64);
                let n = usize::try_from(n).unwrap_or(bytes.len()).min(bytes.len());
                out.write_all(&bytes[..n])?;
                (n as u64, reason)
            }
        };
        kept.bytes += written;
        if let Some(reason) = reason {
            kept.cut(reason);
            writeln!(
                out,
                "\n[harnessd: {} more bytes of {name} not kept: {}]",
                c.total.saturating_sub(written),
                cut_why(reason)
            )?;
        }
    }
    out.flush()
}

/// Copies a spool into the `.out` file and returns the bytes copied. Each copied
/// piece is punched out of the spool at once, so the copy never holds the output
/// twice on disk; where the filesystem cannot punch holes, copying stops when free
/// space reaches the reserve (the rest is counted, not kept).
fn copy_spool(spool: &Path, out: &mut std::fs::File, budget: &SpoolBudget) -> std::io::Result<u64> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut spooled = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(spool)?;
    let mut buf = vec![0u8; 1024 * 1024];
    let (mut copied, mut punches) = (0u64, false);
    loop {
        let n = spooled.read(&mut buf)?;
        if n == 0 {
            return Ok(copied);
        }
        // Without holes each piece is held twice until the spool is removed. With
        // them, at most one piece (1 MiB) is, which the floor's check allows.
        // The first piece needs only the floor itself: spooling stopped at it.
        let needs = if copied == 0 { 0 } else { n as u64 };
        if !punches && !budget.room_for(needs) {
            return Ok(copied);
        }
        out.write_all(&buf[..n])?;
        punches = nix::fcntl::fallocate(
            &spooled,
            nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
                | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
            copied as i64,
            n as i64,
        )
        .is_ok();
        copied += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_made_in_the_daemon_is_capped_for_the_model_and_kept_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c1.out");
        let text = format!("{}middle{}", "a".repeat(500), "z".repeat(500));
        let budget = SpoolBudget::unlimited();
        let r = render_text(&text, false, 100, Some((&path, &budget)));
        assert!(r.truncated);
        assert!(
            r.content.starts_with("aaaa") && r.content.contains("chars omitted"),
            "{}",
            r.content
        );
        assert_eq!(r.output_bytes, 1006);
        assert_eq!(std::fs::read_to_string(&path).expect("kept"), text);
        assert_eq!(r.spool_cut, None);
        // Past the task's budget the file holds what fits, and the model is told.
        let small = SpoolBudget::new(0, Default::default(), dir.path().to_path_buf(), 0);
        let r = render_text(&text, true, 100, Some((&path, &small)));
        assert!(r.is_error);
        assert_eq!(r.spool_cut.map(|c| c.not_kept_bytes), Some(1006));
        assert!(r.content.contains("holds 0 of 1006 bytes"), "{}", r.content);
    }
}
