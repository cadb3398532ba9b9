//! What the executor asks the helper to do: the wire format on the helper's stdin.
//!
//! These types are the helper's own: it imports nothing of `config`, so the
//! confined side depends on no file format. The parent builds a [`Confinement`]
//! from settings (see `Confinement::from_settings`, defined in [`crate::exec`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One request to the helper: the job and the confinement to apply first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelperRequest {
    /// What to do once confined.
    pub job: Job,
    /// How to confine.
    pub confine: Confinement,
}

/// The confinement of one tool process, resolved by the parent from settings: the
/// helper applies it and decides nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confinement {
    /// Absolute paths readable (and executable).
    pub read: Vec<PathBuf>,
    /// Absolute paths writable (and readable) under the write profile; under the
    /// read-only profile they are only readable.
    pub write: Vec<PathBuf>,
    /// Whether the process may write `write` or only `/dev/null` and a private
    /// temporary directory.
    pub profile: Profile,
    /// `settings.sandbox` as it was when the call started: network, resource
    /// limits, user, require.
    pub limits: Limits,
}

/// What a tool process may write (docs/policy.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Nothing but `/dev/null` and a private temporary directory gone at the end of
    /// the call: a call allowed by a pattern `allow` rule.
    ReadOnly,
    /// `allowed_paths.write`: whole-tool allows, approved asks, `allow_write`, file
    /// tools.
    Write,
}

/// Whether the helper may run a job when a layer cannot be enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Require {
    /// Refuse the job if any layer cannot be enforced.
    Full,
    /// Run with what the kernel offers; the report says what is missing.
    BestEffort,
}

/// Network, resource limits and account of one tool process. The wall-clock
/// timeout is not here: the parent enforces it, the helper never sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Whether the process may use the network.
    pub network: bool,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_secs: u64,
    /// Address space in MiB.
    pub memory_mb: u64,
    /// Processes of the sandbox user.
    pub max_processes: u64,
    /// Largest file it may write, in MiB.
    pub max_file_mb: u64,
    /// Open descriptors per process.
    pub max_open_files: u64,
    /// MiB of the private temporary directory of a read-only call.
    pub tmp_mb: u64,
    /// Account it runs as when the helper starts as root.
    pub user: String,
    /// Whether every layer is required.
    pub require: Require,
}

/// One unit of work for the helper. A file job's `path` is the path the daemon
/// judged: absolute, normalised and free of symbolic links when it was judged. The
/// helper opens exactly that name, following no link, or refuses; the kernel, not
/// this type, decides what is reachable.
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
    /// Any program with arguments (`harnessd sandbox -- CMD…`).
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
    },
    /// Confine, then print a JSON report of what is enforced (for `check`).
    Probe,
}

impl Job {
    /// Whether the job's output is a command's (`exit_code`/`stdout`/`stderr`
    /// sections) rather than a file operation's text.
    pub fn is_command(&self) -> bool {
        matches!(
            self,
            Job::Bash { .. } | Job::Python { .. } | Job::Exec { .. }
        )
    }
}
