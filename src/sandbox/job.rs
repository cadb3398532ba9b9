//! What the executor asks the helper to do: the wire format on the helper's stdin.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One unit of work for the helper. Paths are absolute (resolved against the
/// workspace by the parent); the kernel, not this type, decides what is reachable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Job {
    /// Print lines `offset..offset+limit` (1-based) of a UTF-8 file.
    ReadFile {
        /// The file.
        path: PathBuf,
        /// First line, 1-based.
        offset: Option<u64>,
        /// Number of lines.
        limit: Option<u64>,
    },
    /// Replace a file's content, creating parent directories.
    WriteFile {
        /// The file.
        path: PathBuf,
        /// New content.
        content: String,
    },
    /// Replace the single occurrence of `old_string`.
    EditFile {
        /// The file.
        path: PathBuf,
        /// Text that must occur exactly once.
        old_string: String,
        /// Its replacement.
        new_string: String,
    },
    /// List a directory.
    ListDir {
        /// The directory.
        path: PathBuf,
    },
    /// `bash -c command`.
    Bash {
        /// The command.
        command: String,
    },
    /// `python3 -c code`.
    Python {
        /// The code.
        code: String,
    },
}

impl Job {
    /// Whether the job's output is a command's (`exit_code`/`stdout`/`stderr`
    /// sections) rather than a file operation's text.
    pub fn is_command(&self) -> bool {
        matches!(self, Job::Bash { .. } | Job::Python { .. })
    }
}
