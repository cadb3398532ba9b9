//! [`CliError`]: why a command could not do its work, and the exit code that says
//! so (docs/commands.md). Commands print what they can say themselves (a refusal
//! of the daemon, a bad prompt file) and return an exit code; what they cannot
//! handle comes back here, for `main` to print once.

use std::process::ExitCode;

use crate::config::ConfigError;
use crate::control::ClientError;
use crate::daemon::serve::ServeError;
use crate::events::EventError;
use crate::services::StartError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// config.toml or settings.json is invalid, or the API key is missing (exit 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `run` or `serve` could not start (exit 2 for a config error, else 1).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The daemon could not be reached or its answer not read (exit 1).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The audit log could not be opened, read or written (exit 1).
    #[error(transparent)]
    Events(#[from] EventError),
    /// The daemon could not start or stop cleanly (exit 2 for a config error, else 1).
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The task's transcript lock could not be taken (exit 1).
    #[error(transparent)]
    Lock(#[from] crate::agent::LockError),
    /// An audit log query the files cannot answer (exit 1).
    #[error(transparent)]
    Query(#[from] crate::events::query::QueryError),
    /// A task's view cannot be read from the audit log (exit 1).
    #[error(transparent)]
    TaskView(#[from] crate::control::task_view::TaskViewError),
    /// The workspace cannot be made ready for a command (exit 1).
    #[error(transparent)]
    Workspace(#[from] crate::exec::WorkspaceError),
    /// A read or write of the terminal or a file failed (exit 1; a closed pipe is
    /// not reported, `main` exits 0).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// JSON could not be written or read (exit 1).
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Anything else, said in full: names the file or the value (exit 1).
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// The exit code of this error.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Config(_)
            | CliError::Start(StartError::Config(_))
            | CliError::Serve(ServeError::Start(StartError::Config(_))) => exit(super::EXIT_CONFIG),
            _ => ExitCode::FAILURE,
        }
    }

    /// Whether the error is, at bottom, a write to a closed pipe (`| head`).
    pub fn is_broken_pipe(&self) -> bool {
        // `transparent` hands `source()` on to the inner error's cause: the inner
        // error itself is only seen here.
        if let CliError::Io(io) = self {
            return io.kind() == std::io::ErrorKind::BrokenPipe;
        }
        if let CliError::Json(json) = self {
            return json.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe);
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::BrokenPipe
            {
                return true;
            }
            cause = e.source();
        }
        false
    }

    /// The message `main` prints after `error: `: a config error as it is, the
    /// others with their causes.
    pub fn message(&self) -> String {
        if let CliError::Config(c)
        | CliError::Start(StartError::Config(c))
        | CliError::Serve(ServeError::Start(StartError::Config(c))) = self
        {
            return c.to_string();
        }
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            let more = e.to_string();
            if !text.contains(&more) {
                text.push_str(": ");
                text.push_str(&more);
            }
            cause = e.source();
        }
        text
    }
}

/// A command's exit code for the process: codes outside 0–255 (none are
/// documented) become 1.
pub fn exit(code: i32) -> ExitCode {
    u8::try_from(code).map_or(ExitCode::FAILURE, ExitCode::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_exit_2_a_closed_pipe_is_quiet_and_others_exit_1() {
        let config = || ConfigError::invalid("c.toml", None, "api.model", "empty");
        let code = |e: &CliError| format!("{:?}", e.exit_code());
        assert_eq!(code(&CliError::Config(config())), format!("{:?}", exit(2)));
        let started = CliError::Start(StartError::Config(config()));
        assert_eq!(code(&started), format!("{:?}", exit(2)));
        assert_eq!(started.message(), "c.toml: key `api.model`: empty");
        let pipe = CliError::Io(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(pipe.is_broken_pipe());
        let other = CliError::Failed("cannot read x".into());
        assert!(!other.is_broken_pipe());
        assert_eq!(code(&other), format!("{:?}", ExitCode::FAILURE));
        assert_eq!(
            format!("{:?}", exit(300)),
            format!("{:?}", ExitCode::FAILURE)
        );
    }
}
