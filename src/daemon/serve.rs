//! The daemon's life: check the socket's directory, lock the root, start the
//! services, bind the socket, take up what the last daemon left (`recover`),
//! serve until the shutdown trigger fires, give running tasks their grace, stop
//! cleanly.
//!
//! A library function: the caller prepares the root ([`crate::services::Prepared`],
//! [`PreparedSocket`]) and passes the shutdown trigger and SIGHUP as a future and a
//! stream, so tests run the daemon in-process with triggers of their own; the
//! `serve` command installs the real signal handlers ([`crate::commands::serve`]).
//!
//! Everything it spawns is spawned on one [`Shutdown`]; it returns only once each
//! of those tasks has ended, or the grace period for them is over.

use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use nix::fcntl::Flock;
use nix::unistd::Gid;
use serde_json::Value;
use tokio::net::UnixListener;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::api::{AppState, router};
use super::approvals::Approvals;
use super::listener::{accept_loop, accept_tcp};
use super::metrics::Metrics;
use super::recover::{RecoverError, recover_tasks, take_up};
use super::registry::Registry;
use super::shutdown::Shutdown;
use super::socket::{SocketDir, SocketError};
use super::tasks::{Scheduler, SchedulerParts};
use crate::config::{ConfigSource, LiveConfig, Loaded, resolve};
use crate::events::{Event, EventError, EventLog, Record};
use crate::services::{Prepared, Services, StartError, StartOptions};

/// Why the daemon could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The services did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The socket directory, the lock or the socket.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The audit log could not be written.
    #[error(transparent)]
    Events(#[from] EventError),
    /// `daemon.operators_group` cannot be resolved (any more).
    #[error("{0}")]
    OperatorsGroup(String),
    /// `daemon.listen` cannot be bound.
    #[error("{0}")]
    Listen(String),
    /// What the last daemon left could not be taken up.
    #[error(transparent)]
    Recover(#[from] RecoverError),
}

/// What `serve` needs besides the root and its triggers.
pub struct ServeOptions {
    /// This executable (the sandbox helper).
    pub helper: PathBuf,
    /// One item per SIGHUP: reload both files.
    pub hangups: BoxStream<'static, ()>,
}

/// The socket's directory, checked and fixed, and the root's lock, held: only one
/// daemon serves a root. The socket itself is bound later, when the daemon is
/// ready, so clients are refused rather than left waiting during start-up.
pub struct PreparedSocket {
    dir: SocketDir,
    /// The socket's path, as `daemon.socket` resolves it.
    path: PathBuf,
    /// Held until the daemon has stopped; dropping it lets the next daemon start.
    _lock: Flock<File>,
}

impl PreparedSocket {
    /// Checks and fixes the socket's directory through its descriptor (warnings are
    /// logged there) and takes the root's lock.
    pub fn prepare(loaded: &Loaded) -> Result<PreparedSocket, ServeError> {
        let path = resolve(&loaded.paths.root, &loaded.config.daemon.socket);
        let group = operators_gid(loaded.config.daemon.operators_group.as_deref())?;
        let (dir, _) = SocketDir::prepare(&path, group)?;
        let lock = dir.lock_at_start()?;
        Ok(PreparedSocket {
            dir,
            path,
            _lock: lock,
        })
    }
}

/// The gid of `daemon.operators_group`, if set. Validated when the config was
/// loaded; looked up again here since the group may have gone since.
fn operators_gid(group: Option<&str>) -> Result<Option<Gid>, ServeError> {
    let Some(name) = group else { return Ok(None) };
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(Some(g.gid)),
        Ok(None) => Err(ServeError::OperatorsGroup(format!(
            "daemon.operators_group {name:?} does not exist (any more); create it or remove the key"
        ))),
        Err(e) => Err(ServeError::OperatorsGroup(format!(
            "cannot look up daemon.operators_group {name:?}: {e}"
        ))),
    }
}

/// A `model_response` adds its tokens to its task, so listings are live.
fn live_usage(registry: &Registry, record: &Record) {
    if let (Some(id), Event::ModelResponse { usage, .. }) = (&record.task_id, &record.event) {
        registry.add_usage(id, usage);
    }
}

/// A child task runs inside its parent's run, not from the queue: the registry
/// learns of it from its records, so listings, `show` and `cancel` know it.
fn live_children(registry: &Registry, record: &Record) {
    let (Some(id), Some(_)) = (&record.task_id, &record.parent_task_id) else {
        return;
    };
    match &record.event {
        Event::TaskStarted { prompt, .. } => registry.child_started(id, Some(prompt), &record.ts),
        Event::TaskResumed { .. } => registry.child_started(id, None, &record.ts),
        Event::TaskInterrupted { .. } => {
            registry.set_status(id, crate::protocol::TaskStatus::Interrupted)
        }
        Event::TaskFinished {
            stop_reason,
            turns,
            usage,
            usd,
            error,
            ..
        } => registry.finish(
            id,
            &crate::agent::TaskOutcome {
                stop_reason: *stop_reason,
                answer: String::new(),
                turns: *turns,
                usage: *usage,
                usd: *usd,
                error: error.clone(),
                interrupted: false,
            },
        ),
        _ => {}
    }
}

/// Serves the root until `shutdown` resolves (with the reason recorded in
/// `daemon_stopping`), then stops accepting, starts no queued task, gives running
/// tasks `daemon.shutdown_grace_secs`, interrupts the rest, stops the services and,
/// once `daemon_stopping` is on the record, ends the connections and waits for
/// every task it spawned (within the grace again).
pub async fn serve(
    prepared: Prepared,
    socket: PreparedSocket,
    opts: ServeOptions,
    shutdown: impl Future<Output = String>,
) -> Result<(), ServeError> {
    // A sink whose event types, credential files or secret are wrong is a config
    // error before anything starts, as a missing API key is.
    let env = |var: &str| std::env::var(var).ok();
    crate::notify::resolve(&prepared.loaded, &env).map_err(StartError::from)?;
    let daemon = Shutdown::new();
    // Whichever way this returns, every task it spawned is told to end.
    let _cancel_all = daemon.token().clone().drop_guard();
    let (tap_tx, tap_rx) = mpsc::unbounded_channel::<Value>();
    let start = StartOptions {
        helper: opts.helper,
        tap: Some(tap_tx),
        hangups: opts.hangups,
        record_daemon_started: true,
    };
    let services = prepared
        .start_tracked(start, daemon.tracker(), daemon.child())
        .await?;
    let (state, scheduler) = wire(&services, tap_rx, &daemon).await?;
    // The tasks that write to the record or the transcripts: stopped, and waited
    // for, before `daemon_stopping`.
    let writers = daemon.child();
    let transcripts = services.loaded.paths.transcripts.clone();
    let keeper = super::checkpoint::spawn(
        &daemon,
        writers.clone(),
        services.events.clone(),
        scheduler.unsaved().clone(),
        transcripts.clone(),
    );
    let notify_status = crate::notify::Status::new(services.events.clone());
    state.metrics.watch_notify(notify_status.clone());
    let notifier = daemon.spawn(crate::notify::run(
        services.live.clone(),
        services.events.clone(),
        notify_status,
        writers.clone(),
    ));
    services.events.log_head("start");
    let head_logger = daemon.spawn(log_heads(services.events.clone(), writers.clone()));
    // We hold the lock, so a socket file left there is a crashed daemon's.
    let listener = socket.dir.bind()?;
    let tcp = bind_tcp(&services).await?;
    daemon.spawn(state.logins.clone().sweep_every_minute(writers.clone()));
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    watchdog(&daemon);
    tracing::info!(
        target: crate::text::NOTICE,
        "harnessd serving on {} (pid {})",
        crate::text::escape_text(&socket.path.display().to_string()),
        std::process::id()
    );
    let listeners = Listeners {
        dir: &socket.dir,
        socket: listener,
        tcp,
    };
    let reason = listeners
        .serve(router(state), services.live.clone(), &daemon, shutdown)
        .await;
    // No longer accepting: the listener is gone with the server future.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    socket.dir.remove_socket();
    let grace = Duration::from_secs(services.live.current().config.daemon.shutdown_grace_secs);
    scheduler.drain(grace).await;
    // Nothing left open behind `daemon_stopping`: the next start trusts it.
    scheduler.settle_owed().await;
    writers.cancel();
    let _ = keeper.await;
    let _ = head_logger.await;
    let _ = notifier.await;
    super::checkpoint::at_stop(&services.events, scheduler.unsaved(), &transcripts).await;
    let events = services.events.clone();
    services.shutdown().await;
    scheduler.seal().await;
    events
        .record(None, Event::DaemonStopping { reason })
        .await?;
    events.log_head("stop");
    // Followers get the lines up to `daemon_stopping`, then their streams end.
    if !daemon.finish(grace).await {
        tracing::info!(
            target: crate::text::NOTICE,
            "harnessd: connections still open {} s after the stop were dropped",
            grace.as_secs()
        );
    }
    Ok(())
}

/// The daemon's listeners: the control socket and, with `daemon.listen`, TCP.
struct Listeners<'a> {
    dir: &'a SocketDir,
    socket: UnixListener,
    tcp: Option<tokio::net::TcpListener>,
}

impl Listeners<'_> {
    /// Serves `app` on every listener until `shutdown` resolves (its reason) or a
    /// listener's loop ends.
    async fn serve(
        self,
        app: axum::Router,
        live: Arc<LiveConfig>,
        daemon: &Shutdown,
        shutdown: impl Future<Output = String>,
    ) -> String {
        let max_connections = live.current().config.daemon.max_connections;
        let tcp = async {
            match self.tcp {
                Some(tcp) => accept_tcp(tcp, app.clone(), max_connections, daemon).await,
                None => std::future::pending().await,
            }
        };
        let socket = accept_loop(
            self.dir,
            self.socket,
            app.clone(),
            max_connections,
            live,
            daemon,
        );
        tokio::select! {
            () = socket => "server ended".to_string(),
            () = tcp => "server ended".to_string(),
            reason = shutdown => reason,
        }
    }
}

/// Binds `daemon.listen`, when set, before the daemon says it is ready: an address
/// in use is a start-up error, not a console that silently never answers.
async fn bind_tcp(services: &Services) -> Result<Option<tokio::net::TcpListener>, ServeError> {
    let Some(addr) = services.live.current().config.daemon.listen_addr() else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Listen(format!("cannot listen on {addr} (daemon.listen): {e}")))?;
    tracing::info!(
        target: crate::text::NOTICE,
        "harnessd also serving on http://{addr} (/metrics and /healthz open, the rest with a \
         console login)"
    );
    Ok(Some(listener))
}

/// Writes the audit log's chain head to stderr every hour (journald keeps it), so
/// a later tampering with the log shows against a copy kept elsewhere; ends when
/// `stop` is cancelled.
async fn log_heads(events: EventLog, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => events.log_head("hourly"),
            () = stop.cancelled() => return,
        }
    }
}

/// Recovers a crashed daemon's tasks and builds the scheduler and the API's state;
/// the tap feeds metrics and the live event stream.
async fn wire(
    services: &Services,
    tap_rx: mpsc::UnboundedReceiver<Value>,
    daemon: &Shutdown,
) -> Result<(AppState, Scheduler), ServeError> {
    let (live_tx, _) = broadcast::channel::<Value>(1024);
    let (text_live_tx, _) = broadcast::channel::<Value>(1024);
    let metrics = Metrics::new(services.telemetry.spans_dropped());
    let registry = Registry::default();
    let observe = {
        let (metrics, registry) = (metrics.clone(), registry.clone());
        move |ev: &Value| {
            if let Some(record) = Record::from_value(ev.clone()) {
                metrics.observe(&record.event);
                live_usage(&registry, &record);
                live_children(&registry, &record);
            }
        }
    };
    daemon.spawn(relay(tap_rx, live_tx.clone(), observe, daemon.child()));
    let queued = recover_tasks(&services.loaded, &registry, &services.events).await?;
    let remember =
        crate::remember::LiveRemember::new(services.live.clone(), services.events.clone());
    let approvals = Approvals::new(registry.clone(), services.live.clone(), Arc::new(remember));
    let mut task_services = services.task_services(Arc::new(approvals.clone()));
    // The model's text, as it streams, goes to the live event stream only (it is
    // not an audit event and feeds no metric).
    let (text_tx, text_rx) = mpsc::unbounded_channel::<Value>();
    task_services.live_text = Some(text_tx);
    daemon.spawn(relay(
        text_rx,
        text_live_tx.clone(),
        |_: &Value| {},
        daemon.child(),
    ));
    let scheduler = Scheduler::new(SchedulerParts {
        services: task_services,
        registry,
        shutdown: daemon.clone(),
    });
    take_up(&services.loaded, &services.events, &scheduler, queued).await?;
    let state = AppState {
        scheduler: scheduler.clone(),
        approvals,
        metrics,
        config: services.live.clone(),
        mcp: services.mcp.clone(),
        live_events: live_tx,
        live_text: text_live_tx,
        shutdown: daemon.clone(),
        logins: super::login::Logins::new(services.events.clone()),
    };
    Ok((state, scheduler))
}

/// Passes what `rx` receives to the broadcast `tx` (after `observe` has seen it)
/// until `rx` closes or `stop` is cancelled. Nobody listening is not an error.
async fn relay(
    mut rx: mpsc::UnboundedReceiver<Value>,
    tx: broadcast::Sender<Value>,
    observe: impl Fn(&Value) + Send + 'static,
    stop: CancellationToken,
) {
    loop {
        let item = tokio::select! {
            item = rx.recv() => item,
            () = stop.cancelled() => return,
        };
        let Some(item) = item else { return };
        observe(&item);
        let _ = tx.send(item);
    }
}

/// With WatchdogSec= in the unit, pings at half the interval while the runtime is
/// alive, until the daemon has stopped; a wedged runtime stops the pings and
/// systemd restarts the service.
fn watchdog(daemon: &Shutdown) {
    if let Some(interval) = sd_notify::watchdog_enabled() {
        let stop = daemon.child();
        daemon.spawn(async move {
            let mut tick = tokio::time::interval(interval / 2);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                    }
                    () = stop.cancelled() => return,
                }
            }
        });
    }
}
