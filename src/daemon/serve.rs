//! The daemon's life: check the socket's directory, lock the root, bind the
//! socket, mark what a crash left as interrupted, serve until SIGTERM, give running
//! tasks their grace, stop cleanly.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::unistd::Gid;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::api::{AppState, Peer, router};
use super::approvals::Approvals;
use super::metrics::Metrics;
use super::socket::SocketDir;
use super::tasks::{Registry, Scheduler, SchedulerParts, TaskInfo, TaskStatus};
use crate::agent::Transcript;
use crate::config::{ConfigSource, LiveConfig, Loaded, resolve};
use crate::events::{Event, EventLog};
use crate::exec::Executor;
use crate::llm::AnthropicClient;

/// Options of `serve`.
pub struct ServeOptions {
    /// The root.
    pub root: PathBuf,
    /// This executable (the sandbox helper).
    pub helper: PathBuf,
}

/// The gid of `daemon.operators_group`, if set. Validated when the config was
/// loaded; looked up again here since the group may have gone since.
fn operators_gid(group: Option<&str>) -> anyhow::Result<Option<Gid>> {
    let Some(name) = group else { return Ok(None) };
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(Some(g.gid)),
        Ok(None) => anyhow::bail!(
            "daemon.operators_group {name:?} does not exist (any more); create it or remove the key"
        ),
        Err(e) => anyhow::bail!("cannot look up daemon.operators_group {name:?}: {e}"),
    }
}

/// Loads every transcript; those still `running` belong to a daemon that died:
/// they are marked interrupted, on disk and in the record.
async fn recover_tasks(
    loaded: &Loaded,
    registry: &Registry,
    events: &EventLog,
) -> anyhow::Result<()> {
    let Ok(dir) = std::fs::read_dir(&loaded.paths.transcripts) else {
        return Ok(());
    };
    for entry in dir.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Ok(mut t) = std::fs::read_to_string(&path)
            .map_err(|_| ())
            .and_then(|s| serde_json::from_str::<Transcript>(&s).map_err(|_| ()))
        else {
            continue;
        };
        let status = if matches!(t.status, TaskStatus::Running | TaskStatus::Interrupted) {
            if t.status == TaskStatus::Running {
                t.status = TaskStatus::Interrupted;
                t.save(&loaded.paths.transcripts)?;
                events
                    .record(
                        Some(&t.task_id),
                        Event::TaskInterrupted {
                            was: "running".into(),
                        },
                    )
                    .await?;
            }
            TaskStatus::Interrupted
        } else {
            TaskStatus::Finished
        };
        registry.insert_recorded(TaskInfo {
            task_id: t.task_id.clone(),
            status,
            stop_reason: t.stop_reason,
            usage: t.usage,
            answer: t.answer.clone(),
            error: t.error.clone(),
            created: t.created.clone(),
            updated: t.created.clone(),
        });
    }
    Ok(())
}

/// Runs `serve`; returns the exit code.
pub fn serve(opts: ServeOptions, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<i32> {
    let (loaded, client) = match crate::commands::load_with_client(&opts.root, env)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(serve_async(opts, loaded, client))
}

async fn serve_async(
    opts: ServeOptions,
    loaded: Arc<Loaded>,
    client: AnthropicClient,
) -> anyhow::Result<i32> {
    let socket = resolve(&loaded.paths.root, &loaded.config.daemon.socket);
    let group = operators_gid(loaded.config.daemon.operators_group.as_deref())?;
    // Checked and fixed through its descriptor; warnings are logged there.
    let (socket_dir, _) = SocketDir::prepare(&socket, group)?;
    let _lock = socket_dir.lock()?;

    let (tap_tx, mut tap_rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let events = crate::startup::open_audit_log(&loaded, Some(tap_tx)).await?;
    let (live_tx, _) = broadcast::channel::<Value>(1024);
    let metrics = Metrics::new();
    {
        let (live_tx, metrics) = (live_tx.clone(), metrics.clone());
        tokio::spawn(async move {
            while let Some(ev) = tap_rx.recv().await {
                metrics.observe(&ev);
                let _ = live_tx.send(ev);
            }
        });
    }
    let mut executor = Executor::new(opts.helper.clone());
    let report = crate::startup::prepare_sandbox(&mut executor, &loaded)?;
    let (abi, layers) = match &report {
        Ok(r) => (
            r.landlock_abi,
            serde_json::to_value(&r.layers).unwrap_or_default(),
        ),
        Err(e) => (
            crate::sandbox::landlock_abi(),
            serde_json::json!({"probe_error": e}),
        ),
    };
    events
        .record(
            None,
            Event::DaemonStarted {
                version: env!("CARGO_PKG_VERSION").into(),
                pid: std::process::id(),
                landlock_abi: abi,
                enforced: layers,
            },
        )
        .await?;

    let live = Arc::new(LiveConfig::new(loaded.clone()));
    let stop_reloader = CancellationToken::new();
    let reloader = tokio::spawn(crate::reload::run_reloader(
        live.clone(),
        events.clone(),
        stop_reloader.clone(),
    ));
    let registry = Registry::default();
    recover_tasks(&loaded, &registry, &events).await?;
    let approvals = Approvals::new(registry.clone(), live.clone());
    let scheduler = Scheduler::new(SchedulerParts {
        config: live.clone(),
        client,
        events: events.clone(),
        executor,
        approver: Arc::new(approvals.clone()),
        registry,
    });
    let state = AppState {
        scheduler: scheduler.clone(),
        approvals,
        metrics,
        config: live.clone(),
        live_events: live_tx,
    };

    // We hold the lock, so a socket file left there is a crashed daemon's.
    let listener = socket_dir.bind()?;
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    // With WatchdogSec= in the unit, ping at half the interval while the runtime is
    // alive; a wedged runtime stops the pings and systemd restarts the service.
    if let Some(interval) = sd_notify::watchdog_enabled() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval / 2);
            loop {
                tick.tick().await;
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            }
        });
    }
    eprintln!(
        "harnessd serving on {} (pid {})",
        socket.display(),
        std::process::id()
    );

    let app = router(state).into_make_service_with_connect_info::<Peer>();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let reason = tokio::select! {
        r = axum::serve(listener, app) => format!("server ended: {r:?}"),
        _ = term.recv() => "SIGTERM".to_string(),
        _ = tokio::signal::ctrl_c() => "SIGINT".to_string(),
    };
    // No longer accepting: the listener is gone with the server future.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    socket_dir.remove_socket();
    let grace = Duration::from_secs(live.current().config.daemon.shutdown_grace_secs);
    scheduler.tracker.close();
    if tokio::time::timeout(grace, scheduler.tracker.wait())
        .await
        .is_err()
    {
        eprintln!("grace period over: cancelling running tasks");
        scheduler.shutdown.cancel();
        scheduler.tracker.wait().await;
    }
    stop_reloader.cancel();
    let _ = reloader.await;
    events
        .record(None, Event::DaemonStopping { reason })
        .await?;
    Ok(0)
}
