//! Running one validated, allowed call: `get_time` in-process, everything else as a
//! [`Job`] in the executor's child process, on a blocking thread.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{ToolInput, ToolResult, render_result, resolve_in_workspace};
use crate::config::Loaded;
use crate::exec::{ExecRequest, Executor};
use crate::sandbox::{Confinement, Job};

/// What a call needs from its surroundings.
#[derive(Clone)]
pub struct RunContext {
    /// Spawns the helper.
    pub executor: Executor,
    /// Config and policy in force for this call.
    pub loaded: std::sync::Arc<Loaded>,
    /// `transcripts/<task_id>/`, where full outputs go.
    pub output_dir: Option<PathBuf>,
    /// Cancels a running call.
    pub cancel: CancellationToken,
}

/// The argument policy matches for this input: a normalised path, the command or
/// the code; `None` for `get_time`.
pub fn policy_subject(input: &ToolInput, loaded: &Loaded) -> Option<String> {
    let norm =
        |p: &str| super::normalize_for_policy(&loaded.paths.root, &loaded.paths.workspace, p);
    match input {
        ToolInput::ReadFile(i) => Some(norm(&i.path)),
        ToolInput::WriteFile(i) => Some(norm(&i.path)),
        ToolInput::EditFile(i) => Some(norm(&i.path)),
        ToolInput::ListDir(i) => Some(norm(i.path.as_deref().unwrap_or("."))),
        ToolInput::RunBash(i) => Some(i.command.clone()),
        ToolInput::RunPython(i) => Some(i.code.clone()),
        ToolInput::GetTime(_) => None,
    }
}

fn job_for(input: &ToolInput, workspace: &Path) -> Option<Job> {
    let path = |p: &str| resolve_in_workspace(workspace, p);
    Some(match input {
        ToolInput::ReadFile(i) => Job::ReadFile {
            path: path(&i.path),
            offset: i.offset,
            limit: i.limit,
        },
        ToolInput::WriteFile(i) => Job::WriteFile {
            path: path(&i.path),
            content: i.content.clone(),
        },
        ToolInput::EditFile(i) => Job::EditFile {
            path: path(&i.path),
            old_string: i.old_string.clone(),
            new_string: i.new_string.clone(),
        },
        ToolInput::ListDir(i) => Job::ListDir {
            path: path(i.path.as_deref().unwrap_or(".")),
        },
        ToolInput::RunBash(i) => Job::Bash {
            command: i.command.clone(),
        },
        ToolInput::RunPython(i) => Job::Python {
            code: i.code.clone(),
        },
        ToolInput::GetTime(_) => return None,
    })
}

/// A file name safe to build from a model-chosen id.
fn safe_file_name(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect()
}

/// Runs the call; returns its result and the full-output file, if one was kept.
pub async fn run(
    tool_use_id: &str,
    input: &ToolInput,
    ctx: &RunContext,
) -> (ToolResult, Option<PathBuf>) {
    let loaded = &ctx.loaded;
    let Some(job) = job_for(input, &loaded.paths.workspace) else {
        let now = chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
        return (ToolResult::ok(now), None);
    };
    let sandbox = &loaded.policy.settings.sandbox;
    let timeout_secs = match input {
        ToolInput::RunBash(i) => i.timeout_secs.unwrap_or(u64::MAX).min(sandbox.timeout_secs),
        _ => sandbox.timeout_secs,
    };
    let max_chars = loaded.policy.settings.output.max_chars;
    let out_file = ctx.output_dir.as_ref().and_then(|dir| {
        std::fs::create_dir_all(dir)
            .map_err(|e| tracing::warn!("cannot create {}: {e}", dir.display()))
            .ok()
            .map(|()| dir.join(format!("{}.out", safe_file_name(tool_use_id))))
    });
    // New allowed paths and limits apply from the next child process.
    let confine = Confinement::from_settings(&loaded.policy.settings, &loaded.paths.root);
    let (executor, workspace, cancel) = (
        ctx.executor.clone(),
        loaded.paths.workspace.clone(),
        ctx.cancel.clone(),
    );
    let is_command = job.is_command();
    let spool_prefix = out_file.clone();
    // Keep enough of each stream that the model's view is exact for any sane cap.
    let keep_bytes = (max_chars * 4).max(64 * 1024);
    let outcome = tokio::task::spawn_blocking(move || {
        executor.run(&ExecRequest {
            job: &job,
            workspace: &workspace,
            confine: &confine,
            timeout: Duration::from_secs(timeout_secs),
            spool_prefix,
            keep_bytes,
            cancel: &cancel,
            relay_output: false,
        })
    })
    .await;
    match outcome {
        Ok(outcome) => {
            let result = render_result(
                is_command,
                &outcome,
                timeout_secs,
                max_chars,
                out_file.as_deref(),
            );
            (result, out_file)
        }
        Err(e) => (
            ToolResult::error(format!("internal error running the tool: {e}")),
            None,
        ),
    }
}
