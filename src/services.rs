//! The start/stop core `run` and `serve` share: load the root's config and the API
//! key, build the model client, open the audit log (recording a repair and the
//! config loaded), hand the workspace to the sandbox user, probe the sandbox so a
//! weaker one is said out loud, and start hot reload; [`Services::shutdown`] stops
//! it again.
//!
//! It prints nothing but start-up warnings: errors go back as [`StartError`] and
//! the binary's edge decides how to show them and which exit code they mean. It
//! installs no signal handler: SIGHUP arrives as a stream passed in.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::TaskServices;
use crate::approval::Approver;
use crate::config::{
    ApiKey, CONFIG_FILE, ConfigError, Judge, LiveConfig, Loaded, SandboxRequire, load,
};
use crate::events::{Event, EventError, EventLog};
use crate::exec::{Executor, WorkspaceError, prepare_workspace, verdict};
use crate::llm::{AnthropicClient, LlmError, ResponseBudget};
use crate::protocol::Trigger;
use crate::sandbox::{Confinement, Report};
use crate::telemetry::Telemetry;

/// Why start-up failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// config.toml or settings.json is invalid, or the API key is missing: a config
    /// error (exit 2), found before any request or record.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model client could not be built.
    #[error(transparent)]
    Client(#[from] LlmError),
    /// The audit log could not be opened or written.
    #[error(transparent)]
    Events(#[from] EventError),
    /// The workspace directory itself is unusable (a planted entry inside it never
    /// is a reason: it is moved aside with a warning).
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// A root's config and model client, loaded but nothing started or written yet:
/// `serve` locks the root between this and [`Prepared::start`], so a second daemon
/// is refused before it touches the audit log.
pub struct Prepared {
    /// The config and policy as loaded.
    pub loaded: Arc<Loaded>,
    client: AnthropicClient,
    /// Trace export, when `[telemetry]` or the environment asks for it.
    telemetry: Option<crate::telemetry::Settings>,
}

impl Prepared {
    /// Loads the root's config and policy and builds a model client with the key
    /// (looked up through `env`; `main` passes the process environment). A missing
    /// key is a config error before any request.
    pub fn load(root: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Prepared, StartError> {
        let loaded = Arc::new(load(root)?);
        let key = ApiKey::load(&loaded, &env)?;
        let config = &loaded.config;
        // Validation made sure one response fits; a failure here is a bug.
        let budget =
            ResponseBudget::new(config.response_budget_bytes(), config.response_cost_bytes())
                .map_err(|e| LlmError::Client(e.to_string()))?;
        let client = AnthropicClient::new(&config.api, key, budget)?;
        let telemetry = crate::telemetry::Settings::resolve(&config.telemetry, &env)?;
        Ok(Prepared {
            loaded,
            client,
            telemetry,
        })
    }

    /// Opens the audit log, prepares the workspace, probes the sandbox and starts
    /// hot reload.
    pub async fn start(self, opts: StartOptions) -> Result<Services, StartError> {
        self.start_tracked(opts, &TaskTracker::new(), CancellationToken::new())
            .await
    }

    /// [`Prepared::start`], with the reloader spawned on `tracker` and stopped by
    /// `stop` as well as by [`Services::shutdown`]: the daemon's one shutdown
    /// covers it.
    pub async fn start_tracked(
        self,
        opts: StartOptions,
        tracker: &TaskTracker,
        stop: CancellationToken,
    ) -> Result<Services, StartError> {
        let loaded = self.loaded;
        let telemetry = match &self.telemetry {
            Some(settings) => Telemetry::start(settings, loaded.paths.root.clone())?,
            None => Telemetry::off(),
        };
        let events = open_audit_log(&loaded, telemetry.tee(opts.tap)).await?;
        let mut executor = Executor::new(opts.helper);
        // Its warnings (a planted `.tmp` moved aside…) are logged where they arise.
        prepare_workspace(&loaded.paths.workspace, &loaded.tool_user.user)?;
        let mut probe = probe_sandbox(&mut executor, &loaded);
        if let (Ok(report), Some(confined)) = (&mut probe, crate::exec::daemon_confinement()) {
            let (enforced, detail) = match confined {
                Ok(done) => (true, format!("serve runs in its own cgroup, {done}")),
                Err(why) => (false, format!("serve runs without its memory limit: {why}")),
            };
            report.push_optional("daemon_cgroup", enforced, detail);
        }
        if opts.record_daemon_started {
            events.record(None, daemon_started(&probe, &loaded)).await?;
        }
        // Hot reload: a valid edit of either file applies from the next tool call,
        // once it passes what `check` would judge of it.
        let live = Arc::new(LiveConfig::with_judge(
            loaded.clone(),
            reload_judge(&executor, &loaded),
        ));
        let mcp = crate::mcp::Hub::new(
            Arc::new(crate::mcp::launch::Sandboxed {
                executor: executor.clone(),
            }),
            Some(events.clone()),
            crate::config::lock_file(&loaded.paths.root),
        );
        let stop_reloader = stop;
        let reloader = tracker.spawn(crate::reload::watch(
            live.clone(),
            events.clone(),
            opts.hangups,
            stop_reloader.clone(),
            Some(mcp.clone()),
        ));
        Ok(Services {
            loaded,
            live,
            client: self.client,
            events,
            executor,
            probe,
            mcp,
            telemetry,
            stop_reloader,
            reloader,
        })
    }
}

/// What [`Prepared::start`] needs besides the loaded root.
pub struct StartOptions {
    /// This executable: tools run as it re-executed (the sandbox helper).
    pub helper: PathBuf,
    /// Receives every event as it is recorded (progress lines, metrics, the live
    /// event stream); `None` when nobody watches.
    pub tap: Option<mpsc::UnboundedSender<Value>>,
    /// One item per SIGHUP: each reloads both files. Installed by the caller (the
    /// command entry), so nothing below it touches signal handlers.
    pub hangups: BoxStream<'static, ()>,
    /// Record `daemon_started` (`serve`) before hot reload starts.
    pub record_daemon_started: bool,
}

/// What a running `run` or `serve` is made of. Its handles are cheap to clone;
/// [`Services::task_services`] bundles them for tasks.
pub struct Services {
    /// The config and policy as loaded at start.
    pub loaded: Arc<Loaded>,
    /// The config in force, swapped by hot reload.
    pub live: Arc<LiveConfig>,
    /// The model client.
    pub client: AnthropicClient,
    /// The audit log; its writer ends when the last clone is dropped.
    pub events: EventLog,
    /// Spawns tool processes; weakened when the probe found a layer missing under
    /// `best_effort`.
    pub executor: Executor,
    /// The sandbox probe's report, or why the probe failed.
    pub probe: Result<Report, String>,
    /// MCP servers: started in the sandbox, pinned in the root's lock file.
    pub mcp: crate::mcp::Hub,
    /// Trace export (off unless configured).
    pub telemetry: Telemetry,
    /// Cancelled by [`Services::shutdown`]: the reloader stops watching.
    stop_reloader: CancellationToken,
    /// The reloader; awaited at shutdown so no reload is recorded after it.
    reloader: JoinHandle<Result<(), EventError>>,
}

impl Services {
    /// [`Prepared::load`] then [`Prepared::start`]: what `run` does.
    pub async fn start(
        root: &Path,
        env: impl Fn(&str) -> Option<String>,
        opts: StartOptions,
    ) -> Result<Services, StartError> {
        Prepared::load(root, env)?.start(opts).await
    }

    /// What tasks run with: these services, with `approver` answering `ask` calls.
    pub fn task_services(&self, approver: Arc<dyn Approver>) -> TaskServices {
        TaskServices {
            config: self.live.clone(),
            client: self.client.clone(),
            events: self.events.clone(),
            executor: self.executor.clone(),
            approver,
            live_text: None,
            unsaved: crate::agent::Unsaved::default(),
            mcp: self.mcp.clone(),
            telemetry: self.telemetry.clone(),
            delegates: crate::agent::Delegates::default(),
        }
    }

    /// Stops hot reload and waits for it, removes the idle pooled call cgroups (a
    /// clean exit leaves none in the host's tree), then drops this handle to the
    /// audit log (the writer ends once the clones given out are dropped too).
    pub async fn shutdown(self) {
        self.mcp.stop_shared();
        self.stop_reloader.cancel();
        // A reloader that failed to record has nothing left to say at shutdown.
        let _ = self.reloader.await;
        // rmdir and the kill check block briefly: off the runtime's workers. A
        // failure is logged where it happens; the next start sweeps what is left.
        let _ = tokio::task::spawn_blocking(crate::exec::remove_pooled_cgroups).await;
        // The last spans leave within a short bound: `run` exits soon after.
        self.telemetry.shutdown(self.events.head().0).await;
    }
}

/// `daemon_started`: version, pid, what the sandbox enforces here and which
/// model endpoint is in force.
fn daemon_started(probe: &Result<Report, String>, loaded: &Loaded) -> Event {
    let (abi, layers) = match probe {
        Ok(r) => (
            r.landlock_abi,
            serde_json::to_value(&r.layers).unwrap_or_default(),
        ),
        Err(e) => (
            crate::sandbox::landlock_abi(),
            serde_json::json!({"probe_error": e}),
        ),
    };
    Event::DaemonStarted {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        landlock_abi: abi,
        enforced: layers,
        base_url: crate::config::shown_url(&loaded.config.api.base_url),
        base_url_from: loaded.base_url_from,
    }
}

/// Opens events.jsonl with `tap`, records a torn-line repair and `config_loaded`
/// for both files.
async fn open_audit_log(
    loaded: &Loaded,
    tap: Option<mpsc::UnboundedSender<Value>>,
) -> Result<EventLog, StartError> {
    let (events, repair) = EventLog::open(&loaded.paths.events, tap)?;
    events.set_sync(loaded.config.audit.sync);
    events.set_rotate_mb(loaded.config.audit.rotate_mb);
    // Before anything else is written: the space for recording a failure.
    let reserve = loaded.paths.transcripts.join(".reserve");
    if let Err(e) = events
        .hold_reserve(reserve, loaded.config.audit.reserve_mb)
        .await
    {
        tracing::warn!(
            "no audit reserve: {e}; a full disk may then keep a task's end off the record"
        );
    }
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
            trigger: Trigger::Start,
            by: None,
        };
        events.record(None, event).await?;
    }
    Ok(events)
}

/// The judge of a reload: the probe `check` runs, through this executor, each
/// time the confinement of tools changes from the last one judged (the start's
/// first).
fn reload_judge(executor: &Executor, loaded: &Loaded) -> Judge {
    let executor = executor.clone();
    let mut last = verdict::probed(loaded);
    Box::new(move |candidate| {
        // A sink whose types or secrets are wrong keeps the config in force.
        let env = |var: &str| std::env::var(var).ok();
        crate::notify::resolve(candidate, &env)?;
        verdict::judge_change(candidate, &mut last, &executor)
    })
}

/// Probes the sandbox; warns when tools would be refused (`full`) or run weakened
/// (`best_effort`, then the executor says so in every `tool_finished`). Returns
/// the probe's report, or why the probe failed.
fn probe_sandbox(executor: &mut Executor, loaded: &Loaded) -> Result<Report, String> {
    let settings = &loaded.policy.settings;
    let confine = Confinement::for_root(loaded, crate::sandbox::Profile::Write);
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
                tracing::info!(
                    target: crate::text::NOTICE,
                    "warning: tools will be refused, the sandbox is incomplete here: {shown}"
                )
            }
            SandboxRequire::BestEffort => {
                tracing::info!(
                    target: crate::text::NOTICE,
                    "warning: tools run in a weakened sandbox (best_effort): {shown}"
                );
                executor.set_weakened(Some(missing));
            }
        }
    }
    report
}
