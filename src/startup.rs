//! What `run` and `serve` both do before the first task: open the audit log (and
//! record a repair and the config loaded), hand the workspace to the sandbox user,
//! and probe the sandbox so a weaker one is said out loud.

use serde_json::Value;
use tokio::sync::mpsc;

use crate::config::{CONFIG_FILE, Loaded, SandboxRequire};
use crate::events::{Event, EventError, EventLog};
use crate::exec::{Executor, WorkspaceError, prepare_workspace};
use crate::sandbox::{Confinement, Report};

/// Why start-up failed.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The audit log could not be opened or written.
    #[error(transparent)]
    Events(#[from] EventError),
    /// The workspace directory itself is unusable (a planted entry inside it never
    /// is a reason: it is moved aside with a warning).
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// Opens events.jsonl with `tap`, records a torn-line repair and `config_loaded`
/// for both files.
pub async fn open_audit_log(
    loaded: &Loaded,
    tap: Option<mpsc::UnboundedSender<Value>>,
) -> Result<EventLog, StartupError> {
    let (events, repair) = EventLog::open(&loaded.paths.events, tap)?;
    if let Some(r) = repair {
        events
            .record(
                None,
                Event::EventsRepaired {
                    torn_file: loaded.paths.display(&r.torn_file),
                    bytes: r.bytes,
                },
            )
            .await?;
    }
    for (file, sha256) in [
        (CONFIG_FILE.to_string(), &loaded.config_sha256),
        (
            loaded.paths.display(&loaded.paths.settings),
            &loaded.settings_sha256,
        ),
    ] {
        let event = Event::ConfigLoaded {
            file,
            sha256: sha256.clone(),
            changes: Vec::new(),
            restart_needed: Vec::new(),
            trigger: "start".into(),
        };
        events.record(None, event).await?;
    }
    Ok(events)
}

/// Prepares the workspace and probes the sandbox; warns when tools would be refused
/// (`full`) or run weakened (`best_effort`, then the executor says so in every
/// `tool_finished`). Returns the probe's report.
pub fn prepare_sandbox(
    executor: &mut Executor,
    loaded: &Loaded,
) -> Result<Result<Report, String>, StartupError> {
    let settings = &loaded.policy.settings;
    // Its warnings (a planted `.tmp` moved aside…) are logged where they arise.
    prepare_workspace(&loaded.paths.workspace, &settings.sandbox.user)?;
    let confine = Confinement::from_settings(settings, &loaded.paths.root);
    let report = executor.probe(&confine, &loaded.paths.workspace);
    let missing = match &report {
        Ok(r) => r.missing(),
        Err(e) => vec![e.clone()],
    };
    if !missing.is_empty() {
        let missing = missing.join("; ");
        // A failed probe quotes the helper's stderr.
        let shown = crate::text::escape_text(&missing);
        match settings.sandbox.require {
            SandboxRequire::Full => {
                eprintln!("warning: tools will be refused, the sandbox is incomplete here: {shown}")
            }
            SandboxRequire::BestEffort => {
                eprintln!("warning: tools run in a weakened sandbox (best_effort): {shown}");
                executor.set_weakened(Some(missing));
            }
        }
    }
    Ok(report)
}
