//! The tools the model sees: names, input schemas, validation, and turning a
//! validated call into a [`Job`](crate::sandbox::Job) for the executor and its outcome into a result.
//!
//! Inputs are validated against the same Rust types that generate the advertised
//! schemas, so the model is held to exactly what it was shown. Nothing here touches
//! the filesystem on a tool's behalf: every tool but `get_time` and `load_skill`
//! (which answers from the skills the task read at its start) runs as a job in the
//! executor's child process. File tools' paths are judged here (see [`judge`]): links
//! followed to where they lead, `/proc` refused; the job carries the judged path.

pub mod explain;
mod input;
mod output;
mod paths;
#[cfg(test)]
mod props;
mod run;

/// Re-exported so that the tool runner's users name tools from one place.
pub use crate::protocol::ToolName;
pub use input::{
    DelegateInput, EditFileInput, GetTimeInput, ListDirInput, LoadSkillInput, ReadFileInput,
    RunBashInput, RunPythonInput, ToolInput, WriteFileInput,
};
pub use output::{SpoolCut, ToolResult, render_result, render_text, write_private};
pub use paths::{JudgedPath, MAX_LINKS, PathError, Walk, WalkError, resolve_in_workspace, walk};
pub use run::{
    Judged, RunContext, Verdict, decide, judge, kept_output_bytes, out_file_name, run,
    safe_file_name,
};

use serde_json::{Value, json};

/// What the model is shown of a tool. A trait rather than inherent methods because
/// [`ToolName`] lives in the leaf [`crate::protocol`], below the input types whose
/// schemas a definition carries.
pub trait ToolDefinition {
    /// The tool definition sent to the model: name, description, input schema.
    fn definition(self) -> Value;
}

impl ToolDefinition for ToolName {
    fn definition(self) -> Value {
        // Built once: every request carries the offered tools, and generating
        // their schemas was a visible share of a turn.
        static DEFINITIONS: std::sync::LazyLock<Vec<(ToolName, Value)>> =
            std::sync::LazyLock::new(|| {
                ToolName::ALL
                    .into_iter()
                    .map(|t| {
                        let d = json!({
                            "name": t.as_str(),
                            "description": description(t),
                            "input_schema": input::schema(t),
                        });
                        (t, d)
                    })
                    .collect()
            });
        DEFINITIONS
            .iter()
            .find(|(t, _)| *t == self)
            .map(|(_, d)| d.clone())
            .unwrap_or(Value::Null)
    }
}

/// The description the model reads for `tool`.
fn description(tool: ToolName) -> &'static str {
    match tool {
        ToolName::ReadFile => {
            "Read a UTF-8 text file. Relative paths are resolved against the workspace. \
             offset is the first line to return (1-based), limit the number of lines \
             (default 2000)."
        }
        ToolName::WriteFile => {
            "Write content to a file, replacing it if it exists and creating parent \
             directories. Relative paths are resolved against the workspace."
        }
        ToolName::EditFile => {
            "Replace old_string with new_string in a file. old_string must occur exactly \
             once; include surrounding lines to make it unique."
        }
        ToolName::ListDir => {
            "List a directory (the workspace when path is omitted). Directories end \
             with '/', symbolic links with '@'."
        }
        ToolName::RunBash => {
            "Run a bash command in the workspace. Returns exit_code, stdout and stderr. \
             timeout_secs is clamped to the policy's limit."
        }
        ToolName::RunPython => {
            "Run Python 3 code in the workspace. Returns exit_code, stdout and stderr; \
             print what you want to see."
        }
        ToolName::GetTime => "Return the current local time in RFC 3339 format.",
        ToolName::LoadSkill => {
            "Load a skill: return the instructions of the skill called name, as the system \
             prompt lists it. Load a skill when the task matches its description."
        }
        ToolName::Delegate => {
            "Run a child task on a self-contained piece of work and return its answer. \
             The child starts with no history: give it everything it needs in prompt. \
             tools narrows what it may use (a subset of your tools); its spending counts \
             against this task's budgets."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_objects_with_schemas() {
        for t in ToolName::ALL {
            let d = t.definition();
            assert_eq!(d["input_schema"]["type"], "object", "{d}");
            assert!(d["input_schema"].get("$schema").is_none());
        }
        let bash = ToolName::RunBash.definition();
        assert_eq!(bash["input_schema"]["required"], json!(["command"]));
    }
}
