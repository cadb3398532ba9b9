//! `harnessd tasks` when no daemon answers: the same table, from the transcripts
//! themselves, so an operator (or an auditor) can list tasks while the service is
//! down. Each file's head only is parsed (serde skips the messages), as the
//! daemon does at start; the whole transcript only for the tasks shown.

use super::error::{CliError, exit};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::agent::TranscriptHead;
use crate::protocol::Task;
use crate::text::escape_text;

/// How many tasks are listed, newest first, like the daemon's first page.
const PAGE: usize = 50;

/// Lists the newest tasks of `root`'s transcripts; exit 0, or 1 when a
/// transcript could not be read (named on stderr, the others still listed).
pub fn run(root: &Path, json_out: bool) -> Result<ExitCode, CliError> {
    let loaded = match crate::commands::load_root(root) {
        Ok(l) => l,
        Err(code) => return Ok(exit(code)),
    };
    let (mut found, unreadable) = read_heads(&loaded.paths.transcripts);
    found.sort_by(|(a, _), (b, _)| (&b.created, &b.task_id).cmp(&(&a.created, &a.task_id)));
    let older = found.len().saturating_sub(PAGE);
    found.truncate(PAGE);
    // The prompt is in the messages, which the heads skip: read for this page only,
    // from the file the head came from (a path made from the id it holds could
    // name any file, a FIFO included).
    let mut tasks = Vec::with_capacity(found.len());
    for (mut t, path) in found {
        t.prompt = crate::agent::Transcript::read_text(&path)
            .ok()
            .and_then(|text| serde_json::from_str::<crate::agent::Transcript>(&text).ok())
            .and_then(|whole| Task::prompt_start(&whole.messages.first()?.text()));
        tasks.push(t);
    }
    if json_out {
        let list = crate::protocol::TaskList { tasks, next: None };
        super::clients::print_json(&list)?;
    } else {
        eprintln!("(no daemon answers: listed from the transcripts)");
        super::listing::print_tasks(&mut std::io::stdout().lock(), &tasks)?;
    }
    if older > 0 {
        eprintln!("({older} older task(s) not shown)");
    }
    Ok(if unreadable {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The task of every transcript in `dir` with its file, and whether one could not
/// be read.
fn read_heads(dir: &Path) -> (Vec<(Task, PathBuf)>, bool) {
    let mut tasks = Vec::new();
    let mut unreadable = false;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (tasks, false);
    };
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let head = crate::agent::Transcript::read_text(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<TranscriptHead>(&t).map_err(|e| e.to_string()));
        match head {
            Ok(h) => tasks.push((task_of(h), path)),
            Err(e) => {
                unreadable = true;
                let _ = writeln!(
                    std::io::stderr(),
                    "warning: cannot read {}: {}",
                    escape_text(&path.display().to_string()),
                    escape_text(&e)
                );
            }
        }
    }
    (tasks, unreadable)
}

fn task_of(h: TranscriptHead) -> Task {
    Task {
        parent_task_id: crate::protocol::tree::parent_task_id(&h.task_id).map(str::to_string),
        task_id: h.task_id,
        status: h.status,
        stop_reason: h.stop_reason,
        usage: h.usage,
        prompt: h.prompt.as_deref().and_then(Task::prompt_start),
        answer: None,
        error: h.error,
        updated: h.created.clone(),
        created: h.created,
        usd: h.usd,
    }
}
