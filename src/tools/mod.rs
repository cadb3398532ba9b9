//! The tools the model sees: names, input schemas, validation, and turning a
//! validated call into a [`Job`](crate::sandbox::Job) for the executor and its outcome into a result.
//!
//! Inputs are validated against the same Rust types that generate the advertised
//! schemas, so the model is held to exactly what it was shown. Nothing here touches
//! the filesystem on a tool's behalf: every tool but `get_time` runs as a job in the
//! executor's child process. File tools' paths are judged here (see [`judge`]): links
//! followed to where they lead, `/proc` refused; the job carries the judged path.

mod input;
mod output;
mod paths;
#[cfg(test)]
mod props;
mod run;

pub use input::{
    EditFileInput, GetTimeInput, ListDirInput, ReadFileInput, RunBashInput, RunPythonInput,
    ToolInput, WriteFileInput,
};
pub use output::{ToolResult, render_result};
pub use paths::{JudgedPath, MAX_LINKS, PathError, Walk, WalkError, resolve_in_workspace, walk};
pub use run::{Judged, RunContext, Verdict, decide, judge, run};

use serde_json::{Value, json};

/// A built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolName {
    /// Reads a UTF-8 text file.
    ReadFile,
    /// Writes a file, creating parent directories.
    WriteFile,
    /// Replaces one exact occurrence of a string in a file.
    EditFile,
    /// Lists a directory.
    ListDir,
    /// Runs a bash command.
    RunBash,
    /// Runs Python code with `python3`.
    RunPython,
    /// Returns the current time.
    GetTime,
}

impl ToolName {
    /// Every tool, in the order they are advertised.
    pub const ALL: [ToolName; 7] = [
        ToolName::ReadFile,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::ListDir,
        ToolName::RunBash,
        ToolName::RunPython,
        ToolName::GetTime,
    ];

    /// Every tool's name.
    pub const ALL_NAMES: [&'static str; 7] = [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "run_bash",
        "run_python",
        "get_time",
    ];

    /// The name the model uses.
    pub fn as_str(self) -> &'static str {
        Self::ALL_NAMES[self as usize]
    }

    /// The tool called `name`, if there is one.
    pub fn parse(name: &str) -> Option<ToolName> {
        Self::ALL_NAMES
            .iter()
            .position(|n| *n == name)
            .map(|i| Self::ALL[i])
    }

    /// Whether calls of this tool change nothing, so a turn's may run concurrently.
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            ToolName::ReadFile | ToolName::ListDir | ToolName::GetTime
        )
    }

    fn description(self) -> &'static str {
        match self {
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
        }
    }

    /// The tool definition sent to the model: name, description, input schema.
    pub fn definition(self) -> Value {
        json!({
            "name": self.as_str(),
            "description": self.description(),
            "input_schema": input::schema(self),
        })
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in ToolName::ALL {
            assert_eq!(ToolName::parse(t.as_str()), Some(t));
        }
        assert_eq!(ToolName::parse("rm"), None);
    }

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
