//! The names of the built-in tools: plain data, so that `config` (which checks
//! rule tool names) and `policy` (which matches on them) can speak them without
//! importing the tool runner, which sits above both. What a tool advertises
//! (description, input schema) stays with the tool runner, which owns the schemas.

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
    /// Returns a skill's body.
    LoadSkill,
    /// Runs a child task and returns its answer.
    Delegate,
}

impl ToolName {
    /// Every tool, in the order they are advertised.
    pub const ALL: [ToolName; 9] = [
        ToolName::ReadFile,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::ListDir,
        ToolName::RunBash,
        ToolName::RunPython,
        ToolName::GetTime,
        ToolName::LoadSkill,
        ToolName::Delegate,
    ];

    /// Every tool's name, in the order of [`ToolName::ALL`].
    pub const ALL_NAMES: [&'static str; 9] = [
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "run_bash",
        "run_python",
        "get_time",
        "load_skill",
        "delegate",
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
            ToolName::ReadFile | ToolName::ListDir | ToolName::GetTime | ToolName::LoadSkill
        )
    }

    /// Whether the tool runs a command or code (`run_bash`, `run_python`): a call
    /// of it allowed by a pattern runs read-only.
    pub fn runs_commands(self) -> bool {
        matches!(self, ToolName::RunBash | ToolName::RunPython)
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
}
