//! Running one validated, allowed call: `get_time` in-process, everything else as a
//! [`Job`] in the executor's child process, on a blocking thread.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::paths::PathError;
use super::{ToolInput, ToolName, ToolResult, render_result};
use crate::config::Loaded;
use crate::exec::{ExecRequest, Executor};
use crate::policy::{self, Decision, Subject, Tier};
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

/// What a call is judged on, and for a file tool the path it will open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judged {
    /// The argument policy matches: a normalised path, the command or the code;
    /// `None` for `get_time`.
    pub subject: Option<String>,
    /// For a file tool: the absolute, link-free path that was judged. The helper
    /// opens exactly this name or refuses (see `sandbox::files`).
    pub path: Option<PathBuf>,
}

/// Judges `input`: its policy subject and, for a file tool, the path it resolves
/// to. `Err` refuses the call before any rule is read (a path through `/proc`, a
/// link loop, a NUL byte …); its message is written for the model.
pub fn judge(input: &ToolInput, loaded: &Loaded) -> Result<Judged, PathError> {
    let file = |p: &str| {
        super::paths::judge(&loaded.paths.root, &loaded.paths.workspace, p).map(|j| Judged {
            subject: Some(j.subject),
            path: Some(j.absolute),
        })
    };
    let text = |t: &str| {
        Ok(Judged {
            subject: Some(t.to_string()),
            path: None,
        })
    };
    match input {
        ToolInput::ReadFile(i) => file(&i.path),
        ToolInput::WriteFile(i) => file(&i.path),
        ToolInput::EditFile(i) => file(&i.path),
        ToolInput::ListDir(i) => file(i.path.as_deref().unwrap_or(".")),
        ToolInput::RunBash(i) => text(&i.command),
        ToolInput::RunPython(i) => text(&i.code),
        ToolInput::GetTime(_) => Ok(Judged::default()),
    }
}

/// A call's decision with what it was judged on.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The subject and, for a file tool, the path it will open.
    pub judged: Judged,
    /// The tier and the rule that made it.
    pub decision: Decision,
    /// Why the call was refused before any rule was read, written for the model.
    pub refusal: Option<String>,
}

/// Decides a call: judges it, then asks the policy. A path harnessd will not
/// resolve (through `/proc`, a link loop …) is a `deny` before any rule is read,
/// with the refusal as its rule, so it is recorded like every other denial.
pub fn decide(tool: ToolName, input: &ToolInput, loaded: &Loaded) -> Verdict {
    match judge(input, loaded) {
        Ok(judged) => Verdict {
            decision: policy::decide(
                &loaded.policy,
                Subject {
                    tool,
                    arg: judged.subject.as_deref(),
                },
            ),
            judged,
            refusal: None,
        },
        Err(e) => Verdict {
            judged: Judged::default(),
            decision: Decision {
                tier: Tier::Deny,
                rule: Some(e.rule().into()),
                profile: policy::Profile::Write,
                raised: None,
                shell: None,
            },
            refusal: Some(e.to_string()),
        },
    }
}

/// The helper's job for `input`; `Ok(None)` for `get_time`, which runs in-process.
/// A file job carries the judged path, never the path as the model wrote it.
fn job_for(input: &ToolInput, judged: &Judged) -> Result<Option<Job>, String> {
    let path = || {
        judged.path.clone().ok_or_else(|| {
            "internal error: a file tool reached the executor without a judged path; \
             call the tool again"
                .to_string()
        })
    };
    Ok(Some(match input {
        ToolInput::ReadFile(i) => Job::ReadFile {
            path: path()?,
            offset: i.offset,
            limit: i.limit,
        },
        ToolInput::WriteFile(i) => Job::WriteFile {
            path: path()?,
            content: i.content.clone(),
        },
        ToolInput::EditFile(i) => Job::EditFile {
            path: path()?,
            old_string: i.old_string.clone(),
            new_string: i.new_string.clone(),
        },
        ToolInput::ListDir(_) => Job::ListDir { path: path()? },
        ToolInput::RunBash(i) => Job::Bash {
            command: i.command.clone(),
        },
        ToolInput::RunPython(i) => Job::Python {
            code: i.code.clone(),
        },
        ToolInput::GetTime(_) => return Ok(None),
    }))
}

/// A file name safe to build from a model-chosen id.
pub fn safe_file_name(id: &str) -> String {
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

/// Runs the call as it was judged; returns its result and the full-output file,
/// if one was kept.
pub async fn run(
    tool_use_id: &str,
    input: &ToolInput,
    judged: &Judged,
    profile: policy::Profile,
    ctx: &RunContext,
) -> (ToolResult, Option<PathBuf>) {
    let loaded = &ctx.loaded;
    let job = match job_for(input, judged) {
        Ok(job) => job,
        Err(message) => return (ToolResult::error(message), None),
    };
    let Some(job) = job else {
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
    let confine = Confinement::for_root(loaded, profile.into());
    let (executor, workspace, cancel) = (
        ctx.executor.clone(),
        loaded.paths.workspace.clone(),
        ctx.cancel.clone(),
    );
    let is_command = job.is_command();
    let spool_prefix = out_file.clone();
    // Keep enough of each stream that the model's view is exact for any sane cap.
    let keep_bytes = (max_chars * 4).max(64 * 1024);
    let out_path = out_file.clone();
    let rendered = tokio::task::spawn_blocking(move || {
        let outcome = executor.run(&ExecRequest {
            job: &job,
            workspace: &workspace,
            confine: &confine,
            timeout: Duration::from_secs(timeout_secs),
            spool_prefix,
            keep_bytes,
            cancel: &cancel,
            relay_output: false,
        });
        // Rendering copies the full output from its spools into the `.out` file:
        // file I/O, so it stays on this blocking thread too.
        render_result(
            is_command,
            &outcome,
            timeout_secs,
            max_chars,
            out_path.as_deref(),
        )
    })
    .await;
    match rendered {
        Ok(result) => (result, out_file),
        Err(e) => (
            ToolResult::error(format!("internal error running the tool: {e}")),
            None,
        ),
    }
}
