//! The control socket's listener: the accept loop, the connections' slots
//! ([`slots`]) and binding the socket again when it is removed under the daemon;
//! and the TCP listener of `daemon.listen`, with the same slots and timeouts.
//!
//! Every connection is served on the daemon's [`Shutdown`]: when it is cancelled
//! (after `daemon_stopping` is on the record), an idle kept-alive connection is
//! closed at once and a busy one after its response, so the daemon waits for each
//! instead of dropping it mid-write.

mod slots;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

use super::access::SessionsOnSlot;
use super::api::{Peer, Via};
use super::shutdown::Shutdown;
use super::socket::SocketDir;
use crate::config::LiveConfig;
use slots::{Heard, Slot, Slots};

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
pub(super) async fn accept_loop(
    dir: &SocketDir,
    listener: UnixListener,
    app: Router,
    max_connections: u32,
    config: Arc<LiveConfig>,
    shutdown: &Shutdown,
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
            via: Via::Socket,
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
        shutdown.spawn(connection(stream, service, slot, shutdown.clone()));
    }
}

/// Accepts connections on `daemon.listen` until dropped, with the socket's limits:
/// `max_connections` slots of their own, the same head and body timeouts, the same
/// graceful end at the stop. When they are full the oldest connection that is not
/// answering a console session's request gives way ([`Slots::sessions_only`]):
/// anyone may connect here, so a connection mid-head proves nothing.
/// There is no peer uid here: the access middleware lets only `/metrics` and
/// `/healthz` through without a console session.
pub(super) async fn accept_tcp(
    listener: TcpListener,
    app: Router,
    max_connections: u32,
    shutdown: &Shutdown,
) {
    let slots = Slots::sessions_only(usize::try_from(max_connections).unwrap_or(usize::MAX));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("daemon.listen: accept failed: {e}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Some(slot) = slots.admit() else {
            tracing::debug!("daemon.listen: connection limit reached; closed a connection");
            continue;
        };
        let peer = Peer {
            uid: None,
            via: Via::Tcp,
        };
        let service = TowerToHyperService::new(
            app.clone()
                .layer(axum::Extension(ConnectInfo(peer)))
                .layer(axum::Extension(SessionsOnSlot(Arc::clone(&slot.sessions)))),
        );
        shutdown.spawn(connection(stream, service, slot, shutdown.clone()));
    }
}

/// Serves one connection until it ends, its slot is given to a newer one, or the
/// daemon stops: then it ends as soon as it is idle (at once if it is; after the
/// response being written if not, a `/v1/events` stream included), so no response
/// is cut mid-write.
async fn connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    service: TowerToHyperService<Router>,
    slot: Slot,
    shutdown: Shutdown,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let io = TokioIo::new(Heard::new(stream, Arc::clone(&slot.heard)));
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    // A connection that ends in error (timeout, reset) is the peer's doing.
    tokio::select! {
        _ = conn.as_mut() => {}
        () = slot.evicted.cancelled() => {}
        () = shutdown.token().cancelled() => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                _ = conn => {}
                () = slot.evicted.cancelled() => {}
            }
        }
    }
    drop(slot);
}
