//! The daemon's life: check the socket's directory, lock the root, start the
//! services, bind the socket, mark what a crash left as interrupted, serve until
//! the shutdown trigger fires, give running tasks their grace, stop cleanly.
//!
//! A library function: the caller prepares the root ([`crate::services::Prepared`],
//! [`PreparedSocket`]) and passes the shutdown trigger and SIGHUP as a future and a
//! stream, so tests run the daemon in-process with triggers of their own; the
//! `serve` command installs the real signal handlers ([`crate::commands::serve`]).

use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use nix::fcntl::Flock;
use nix::unistd::Gid;
use serde_json::Value;
use tokio::sync::broadcast;

use super::connection_slots::{Heard, Slots};
use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::UnixListener;

use super::api::{AppState, Peer, router};
use super::approvals::Approvals;
use super::loose_ends::close_at_start;
use super::metrics::Metrics;
use super::recover::recover_tasks;
use super::socket::{SocketDir, SocketError};
use super::tasks::{Registry, Scheduler, SchedulerParts, TaskStatus};
use crate::config::{ConfigSource, LiveConfig, Loaded, resolve};
use crate::events::{Event, EventError};
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
    /// A crashed daemon's task could not be marked interrupted on disk.
    #[error("cannot save the transcript of {task_id} as interrupted: {error}")]
    Transcript {
        /// The task whose transcript it is.
        task_id: String,
        /// The write's error.
        error: std::io::Error,
    },
    /// Tasks left open on the record could not be closed.
    #[error(transparent)]
    LooseEnds(#[from] super::loose_ends::LooseEndsError),
    /// The start-up scan of the transcripts ended abnormally (it panicked).
    #[error("the scan of the transcripts at start-up failed: {0}")]
    Scan(tokio::task::JoinError),
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
        let lock = dir.lock()?;
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
fn live_usage(registry: &Registry, ev: &Value) {
    if ev["type"] != "model_response" {
        return;
    }
    if let (Some(id), Ok(usage)) = (
        ev["task_id"].as_str(),
        serde_json::from_value::<crate::usage::Usage>(ev["usage"].clone()),
    ) {
        registry.add_usage(id, &usage);
    }
}

/// Serves the root until `shutdown` resolves (with the reason recorded in
/// `daemon_stopping`), then stops accepting, starts no queued task, gives running
/// tasks `daemon.shutdown_grace_secs`, interrupts the rest and stops the services.
pub async fn serve(
    prepared: Prepared,
    socket: PreparedSocket,
    opts: ServeOptions,
    shutdown: impl Future<Output = String>,
) -> Result<(), ServeError> {
    let (tap_tx, tap_rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let services = prepared
        .start(StartOptions {
            helper: opts.helper,
            tap: Some(tap_tx),
            hangups: opts.hangups,
            record_daemon_started: true,
        })
        .await?;
    let (state, scheduler) = wire(&services, tap_rx).await?;
    let transcripts = services.loaded.paths.transcripts.clone();
    let keeper = super::checkpoint::spawn(
        services.events.clone(),
        scheduler.unsaved().clone(),
        transcripts.clone(),
    );
    services.events.log_head("start");
    let hourly = services.events.clone();
    let head_logger = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(3600));
        tick.tick().await;
        loop {
            tick.tick().await;
            hourly.log_head("hourly");
        }
    });
    // We hold the lock, so a socket file left there is a crashed daemon's.
    let listener = socket.dir.bind()?;
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    watchdog();
    tracing::info!(
        target: crate::text::NOTICE,
        "harnessd serving on {} (pid {})",
        crate::text::escape_text(&socket.path.display().to_string()),
        std::process::id()
    );
    let max_connections = services.live.current().config.daemon.max_connections;
    let reason = tokio::select! {
        () = accept_loop(&socket.dir, listener, router(state), max_connections, services.live.clone()) => {
            "server ended".to_string()
        }
        reason = shutdown => reason,
    };
    // No longer accepting: the listener is gone with the server future.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    socket.dir.remove_socket();
    let grace = Duration::from_secs(services.live.current().config.daemon.shutdown_grace_secs);
    drain(&scheduler, grace).await;
    // Nothing left open behind `daemon_stopping`: the next start trusts it.
    scheduler.settle_owed().await;
    keeper.abort();
    super::checkpoint::at_stop(&services.events, scheduler.unsaved(), &transcripts).await;
    let events = services.events.clone();
    services.shutdown().await;
    head_logger.abort();
    events
        .record(None, Event::DaemonStopping { reason })
        .await?;
    events.log_head("stop");
    Ok(())
}

/// How long a request's head may take to arrive (docs/config.md). hyper restarts this
/// clock whenever a connection waits for a head, so it also bounds how long a
/// kept-alive connection may sit idle between requests.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after a failed accept (out of descriptors, say), so the loop does not spin
/// while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Connections from peers the API refuses (403) served at once, apart from the
/// `daemon.max_connections` slots: they get their 403, but cannot take the slots
/// operators need.
const REFUSED_CONNECTIONS: usize = 8;

/// How often the accept loop checks that the socket it listens on is still the
/// one at `daemon.socket` (a removed socket is recreated within this).
const SOCKET_CHECK: Duration = Duration::from_secs(1);

/// The listening socket and the inode of the file it was bound as.
struct Bound {
    listener: UnixListener,
    inode: Option<(u64, u64)>,
    /// Whether the last attempt to bind it again failed (logged once).
    lost: bool,
    /// The socket directory made again after it was removed (the root's lock
    /// taken in it is held until exit), replacing the one checked at start.
    remade: Option<SocketDir>,
}

impl Drop for Bound {
    /// The socket of a remade directory goes with the accept loop, as the first
    /// one is removed by `serve` when it stops.
    fn drop(&mut self) {
        if let Some(dir) = &self.remade {
            dir.remove_socket();
        }
    }
}

/// Binds the socket again if its file was removed or replaced under the daemon,
/// so clients reach it again within [`SOCKET_CHECK`]; an error is logged either way.
fn keep_socket(first: &SocketDir, bound: &mut Bound) {
    let dir = bound.remade.as_ref().unwrap_or(first);
    match dir.remade() {
        None => {}
        Some(Ok(remade)) => {
            tracing::error!(
                "the socket directory of {} was removed under the running daemon; made \
                 it again and took the root's lock in it",
                dir.socket_path().display()
            );
            let (remade, lock) = remade;
            // Held until the process exits (the kernel releases it then), past the
            // accept loop and the grace, like the lock taken at start.
            std::mem::forget(lock);
            bound.remade = Some(remade);
            bound.inode = None;
            return keep_socket(first, bound);
        }
        Some(Err(e)) => {
            if !bound.lost {
                tracing::error!(
                    "the socket directory of {} was removed and cannot be made again \
                     ({e}); clients cannot reach the daemon until this is fixed",
                    dir.socket_path().display()
                );
                bound.lost = true;
            }
            return;
        }
    }
    let now = dir.socket_inode();
    if now.is_some() && now == bound.inode {
        return;
    }
    let path = dir.socket_path();
    match dir.bind() {
        Ok(listener) => {
            tracing::error!(
                "control socket {} was removed or replaced under the running daemon; \
                 bound it again",
                path.display()
            );
            bound.inode = dir.socket_inode();
            bound.listener = listener;
            bound.lost = false;
        }
        Err(e) if !bound.lost => {
            tracing::error!(
                "control socket {} was removed and cannot be bound again ({e}); clients \
                 cannot reach the daemon until this is fixed (retrying every {} s)",
                path.display(),
                SOCKET_CHECK.as_secs()
            );
            bound.lost = true;
        }
        Err(_) => {}
    }
}

/// Accepts control connections until dropped. At most `max_connections` are
/// served at once; past that, the oldest connection that has sent nothing gives up
/// its slot, and a new connection is closed as soon as it is accepted only when
/// every open one is busy ([`Slots`]), so idle or slow peers can neither use up the
/// daemon's descriptors nor keep `/healthz` from answering. A peer the API refuses
/// (the tool uid, a stranger) is told so at accept and counted in a small pool of
/// its own ([`REFUSED_CONNECTIONS`]), so that a tool holding connections open cannot
/// lock the operators out. Each connection carries its peer's SO_PEERCRED uid as
/// `ConnectInfo<Peer>`, read once at accept, for the access middleware, which
/// checks every request again. The socket is checked every [`SOCKET_CHECK`] and
/// bound again if it was removed.
async fn accept_loop(
    dir: &SocketDir,
    listener: UnixListener,
    app: Router,
    max_connections: u32,
    config: Arc<LiveConfig>,
) {
    let slots = Slots::new(usize::try_from(max_connections).unwrap_or(usize::MAX));
    let refused_slots = Slots::new(REFUSED_CONNECTIONS);
    let mut bound = Bound {
        listener,
        inode: dir.socket_inode(),
        lost: false,
        remade: None,
    };
    let mut check = tokio::time::interval(SOCKET_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let stream = tokio::select! {
            accepted = bound.listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("control socket: accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = check.tick() => {
                keep_socket(dir, &mut bound);
                continue;
            }
        };
        let peer = Peer {
            uid: stream.peer_cred().ok().map(|c| c.uid()),
        };
        let allowed = match peer.uid {
            Some(uid) => super::access::verdict(&config, uid).await.is_ok(),
            None => false,
        };
        let pool = if allowed { &slots } else { &refused_slots };
        let Some(slot) = pool.admit() else {
            // Dropping the stream closes it: the peer sees EOF at once.
            tracing::debug!("control socket: connection limit reached; closed a connection");
            continue;
        };
        let service =
            TowerToHyperService::new(app.clone().layer(axum::Extension(ConnectInfo(peer))));
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let io = TokioIo::new(Heard::new(stream, Arc::clone(&slot.heard)));
            // A connection that ends in error (timeout, reset) is the peer's doing.
            tokio::select! {
                _ = builder.serve_connection(io, service) => {}
                () = slot.evicted.cancelled() => {}
            }
            drop(slot);
        });
    }
}

/// Recovers a crashed daemon's tasks and builds the scheduler and the API's state;
/// the tap feeds metrics and the live event stream.
async fn wire(
    services: &Services,
    mut tap_rx: tokio::sync::mpsc::UnboundedReceiver<Value>,
) -> Result<(AppState, Scheduler), ServeError> {
    let (live_tx, _) = broadcast::channel::<Value>(1024);
    let (text_live_tx, _) = broadcast::channel::<Value>(1024);
    let metrics = Metrics::new();
    let registry = Registry::default();
    {
        let (live_tx, metrics, registry) = (live_tx.clone(), metrics.clone(), registry.clone());
        tokio::spawn(async move {
            while let Some(ev) = tap_rx.recv().await {
                metrics.observe(&ev);
                live_usage(&registry, &ev);
                let _ = live_tx.send(ev);
            }
        });
    }
    let queued = recover_tasks(&services.loaded, &registry, &services.events).await?;
    let remember =
        super::remember::LiveRemember::new(services.live.clone(), services.events.clone());
    let approvals = Approvals::new(registry.clone(), services.live.clone(), Arc::new(remember));
    let mut task_services = services.task_services(Arc::new(approvals.clone()));
    // The model's text, as it streams, goes to the live event stream only (it is
    // not an audit event and feeds no metric).
    let (text_tx, mut text_rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    task_services.live_text = Some(text_tx);
    {
        let text_live_tx = text_live_tx.clone();
        tokio::spawn(async move {
            while let Some(delta) = text_rx.recv().await {
                let _ = text_live_tx.send(delta);
            }
        });
    }
    let scheduler = Scheduler::new(SchedulerParts {
        services: task_services,
        registry,
    });
    let paths = &services.loaded.paths;
    let closed = close_at_start(
        paths.transcripts.clone(),
        paths.events.clone(),
        &services.events,
    )
    .await?;
    if closed > 0 {
        tracing::info!(
            target: crate::text::NOTICE,
            "harnessd: recorded task_finished for {closed} task(s) the log left open \
             (see their events)"
        );
    }
    let requeued = scheduler.requeue(queued).await?;
    if requeued > 0 {
        tracing::info!(
            target: crate::text::NOTICE,
            "harnessd: requeued {requeued} queued task(s) accepted before the last stop, \
             oldest first"
        );
    }
    let state = AppState {
        scheduler: scheduler.clone(),
        approvals,
        metrics,
        config: services.live.clone(),
        live_events: live_tx,
        live_text: text_live_tx,
    };
    Ok((state, scheduler))
}

/// With WatchdogSec= in the unit, pings at half the interval while the runtime is
/// alive; a wedged runtime stops the pings and systemd restarts the service.
fn watchdog() {
    if let Some(interval) = sd_notify::watchdog_enabled() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval / 2);
            loop {
                tick.tick().await;
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            }
        });
    }
}

/// Starts no more queued tasks (they stay queued, on disk, for the next start),
/// lets running tasks finish within `grace`, then stops the rest, which are left
/// `interrupted` (resumable), and waits for them.
async fn drain(scheduler: &Scheduler, grace: Duration) {
    scheduler.stop_starting();
    scheduler.tracker.close();
    if tokio::time::timeout(grace, scheduler.tracker.wait())
        .await
        .is_err()
    {
        tracing::info!(
            target: crate::text::NOTICE,
            "grace period over: interrupting running tasks (resume continues them)"
        );
        scheduler.shutdown.cancel();
        scheduler.tracker.wait().await;
    }
    let queued = scheduler
        .registry
        .counts()
        .get(TaskStatus::Queued.as_str())
        .copied()
        .unwrap_or(0);
    if queued > 0 {
        tracing::info!(
            target: crate::text::NOTICE,
            "harnessd: {queued} queued task(s) stay queued for the next start"
        );
    }
}
