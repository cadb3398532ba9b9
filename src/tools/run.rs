//! Running one validated, allowed call: `get_time` and `load_skill` in-process
//! (nothing to confine: the time, or text the task read at its start), everything
//! else as a [`Job`] in the executor's child process, on a blocking thread.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::paths::PathError;
use super::{ToolInput, ToolName, ToolResult, render_result};
use crate::config::Loaded;
use crate::exec::{ExecRequest, Executor};
use crate::policy::{self, Decision, Subject};
use crate::protocol::Tier;
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
    /// What of the output may be kept on disk: shared by every call of the task.
    pub spool: crate::exec::SpoolBudget,
    /// The skills the task read at its start: what `load_skill` answers from.
    pub knowledge: std::sync::Arc<crate::knowledge::Knowledge>,
}

/// What a call is judged on, and for a file tool the path it will open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judged {
    /// The argument policy matches: a normalised path, the command, the code or
    /// the skill's name; `None` for `get_time`.
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
        ToolInput::LoadSkill(i) => text(&i.name),
        ToolInput::Delegate(i) => text(&i.prompt),
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
                profile: crate::protocol::Profile::Write,
                raised: None,
                unseen: None,
                shell: None,
            },
            refusal: Some(e.to_string()),
        },
    }
}

/// The helper's job for `input`; `Ok(None)` for `get_time` and `load_skill`,
/// which run in-process.
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
        // One proven simple command runs without bash (docs/sandbox.md): how it
        // runs, not whether — the decision was made on the command text already.
        ToolInput::RunBash(i) => Job::Bash {
            command: i.command.clone(),
            direct: policy::shell::simple_command(&i.command),
        },
        ToolInput::RunPython(i) => Job::Python {
            code: i.code.clone(),
        },
        ToolInput::GetTime(_) | ToolInput::LoadSkill(_) => return Ok(None),
        // A child task is the loop's to run, never a tool process's.
        ToolInput::Delegate(_) => {
            return Err("internal error: delegate reached the tool runner".to_string());
        }
    }))
}

/// Longest id kept as its own file name; longer ids are hashed.
const MAX_KEPT_ID: usize = 128;

/// Whether `id` is used as its file name unchanged: non-empty, at most
/// [`MAX_KEPT_ID`] characters, only ASCII letters, digits, `_` and `-` (as the API's
/// ids are).
fn kept_as_is(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEPT_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The file name (without `.out`) that holds the full output of the call `id`;
/// it is injective, so two calls never share a file.
///
/// Why no two ids share a name:
/// - an id that is [`kept_as_is`] is its own name, so two such ids keep their
///   distinct names, and such a name never holds a `.`;
/// - every other id is named `<readable>.h<sha256 of the id, hex>`: it holds a
///   `.`, so it never equals a kept name, and two different ids have different
///   SHA-256 digests (collision resistance), hence different names. The readable
///   part (the id's first 64 characters, each outside the safe set shown as `_`)
///   only helps a reader; it is not what makes names distinct.
///
/// Every name is a single path component made of `[A-Za-z0-9_.-]`, never `.` or
/// `..`, and at most 64 + 2 + 64 characters.
pub fn safe_file_name(id: &str) -> String {
    if kept_as_is(id) {
        return id.to_string();
    }
    let mut name: String = id
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.push_str(".h");
    name.push_str(&crate::protocol::sha256_hex(id.as_bytes()));
    name
}

/// The name of the file that keeps the full output of the call `id`:
/// [`safe_file_name`] and `.out`. Everything that writes or reads the file
/// builds its name here.
pub fn out_file_name(id: &str) -> String {
    format!("{}.out", safe_file_name(id))
}

/// Bytes the `.out` files in `dir` (a task's output directory) hold: where a
/// resumed task's spool budget starts, since those files stay on disk.
pub fn kept_output_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".out"))
        // The entry itself, never a link's target.
        .filter_map(|e| e.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len())
        .sum()
}

/// Runs the call as it was judged; returns its result and the full-output file,
/// if one was kept.
pub async fn run(
    tool_use_id: &str,
    input: &ToolInput,
    judged: &Judged,
    profile: crate::protocol::Profile,
    ctx: &RunContext,
) -> (ToolResult, Option<PathBuf>) {
    let loaded = &ctx.loaded;
    let job = match job_for(input, judged) {
        Ok(job) => job,
        Err(message) => return (ToolResult::error(message), None),
    };
    let Some(job) = job else {
        return in_process(tool_use_id, input, ctx);
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
            .map(|()| dir.join(out_file_name(tool_use_id)))
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
    let spool = ctx.spool.clone();
    let rendered = tokio::task::spawn_blocking(move || {
        let outcome = executor.run(&ExecRequest {
            job: &job,
            workspace: &workspace,
            confine: &confine,
            timeout: Duration::from_secs(timeout_secs),
            spool_prefix,
            spool_budget: spool.clone(),
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
            out_path.as_deref().map(|p| (p, &spool)),
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

/// A call that needs no tool process: `get_time`, or `load_skill`, whose answer
/// is kept like any tool's output (its `.out` file, within the spool budget).
fn in_process(
    tool_use_id: &str,
    input: &ToolInput,
    ctx: &RunContext,
) -> (ToolResult, Option<PathBuf>) {
    let ToolInput::LoadSkill(i) = input else {
        let now = chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
        return (ToolResult::ok(now), None);
    };
    let (text, is_error) = match ctx.knowledge.load_skill(&i.name) {
        Ok(body) => (body, false),
        Err(why) => (why, true),
    };
    let out_file = ctx.output_dir.as_ref().and_then(|dir| {
        std::fs::create_dir_all(dir)
            .map_err(|e| tracing::warn!("cannot create {}: {e}", dir.display()))
            .ok()
            .map(|()| dir.join(out_file_name(tool_use_id)))
    });
    // A skill is returned whole, never cut in its middle: its size is already
    // bounded by the skill limit, which the operator's output cap may be under.
    let max_chars = (ctx.loaded.policy.settings.output.max_chars)
        .max(crate::knowledge::MAX_SKILL_BYTES as usize + 1024);
    let result = super::render_text(
        &text,
        is_error,
        max_chars,
        out_file.as_deref().map(|p| (p, &ctx.spool)),
    );
    (result, out_file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_names_keep_api_ids_unchanged() {
        for id in ["toolu_01A-b_c", "a", &"x".repeat(128)] {
            assert_eq!(safe_file_name(id), id);
            assert_eq!(out_file_name(id), format!("{id}.out"));
        }
    }

    #[test]
    fn out_names_of_ids_differing_only_in_unsafe_chars_differ() {
        let ids = [
            "toolu_x.1",
            "toolu_x:1",
            "toolu_x_1",
            "toolu_x/1",
            "toolu_x 1",
            "toolu_x\u{e9}1",
            "",
            ".",
            "..",
            &"x".repeat(129),
            &format!("{}y", "x".repeat(128)),
        ];
        let names: std::collections::HashSet<String> =
            ids.iter().map(|id| safe_file_name(id)).collect();
        assert_eq!(names.len(), ids.len(), "{names:?}");
    }

    #[test]
    fn out_names_are_one_safe_component() {
        for id in [
            "../../etc/passwd",
            "",
            ".",
            "..",
            "a\0b",
            &"\u{202e}".repeat(300),
        ] {
            let name = safe_file_name(id);
            assert!(name != "." && name != ".." && !name.is_empty(), "{name:?}");
            assert!(name.len() <= 64 + 2 + 64, "{name:?}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
                "{name:?}"
            );
        }
    }

    /// A property test over generated ids: kept names have no `.`, every other
    /// name has one, and no two distinct ids share a name.
    #[test]
    fn out_names_are_injective_over_generated_ids() {
        let alphabet = ['a', 'Z', '0', '_', '-', '.', ':', '/', ' ', '\u{e9}'];
        let mut ids = Vec::new();
        // Every string of length 0..=4 over the alphabet: 11 110 ids.
        let mut frontier = vec![String::new()];
        for _ in 0..4 {
            let mut next = Vec::new();
            for s in &frontier {
                for c in alphabet {
                    next.push(format!("{s}{c}"));
                }
            }
            ids.extend(frontier);
            frontier = next;
        }
        ids.extend(frontier);
        let mut seen = std::collections::HashMap::new();
        for id in &ids {
            let name = safe_file_name(id);
            assert_eq!(kept_as_is(id), !name.contains('.'), "{id:?} -> {name:?}");
            if let Some(other) = seen.insert(name.clone(), id.clone()) {
                panic!("{id:?} and {other:?} share {name:?}");
            }
        }
    }
}
