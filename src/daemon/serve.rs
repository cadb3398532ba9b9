//! The daemon's life: lock the root, bind the socket, mark what a crash left as
//! interrupted, serve until SIGTERM, give running tasks their grace, stop cleanly.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::api::{AppState, Peer, router};
use super::approvals::Approvals;
use super::metrics::Metrics;
use super::tasks::{Registry, Scheduler, SchedulerParts, Status, TaskInfo};
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

/// Takes the root's lock so a second daemon is refused; returns it (held while the
/// daemon lives).
fn lock_root(socket: &Path) -> anyhow::Result<Flock<std::fs::File>> {
    let lock_path = socket.with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", lock_path.display()))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, _)| {
        anyhow::anyhow!(
            "another harnessd is already serving this root (it holds {}); stop it first",
            lock_path.display()
        )
    })
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
        let status = if t.status == "running" || t.status == "interrupted" {
            if t.status == "running" {
                t.status = "interrupted".into();
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
            Status::Interrupted
        } else {
            Status::Finished
        };
        registry.insert_recorded(TaskInfo {
            task_id: t.task_id.clone(),
            status,
            stop_reason: t.stop_reason.clone(),
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
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let _lock = lock_root(&socket)?;
    // We hold the lock, so a socket file left here is a crashed daemon's.
    let _ = std::fs::remove_file(&socket);

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

    let listener = tokio::net::UnixListener::bind(&socket)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
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
    let _ = std::fs::remove_file(&socket);
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
