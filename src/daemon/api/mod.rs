//! The control API: HTTP/1.1 + JSON on the unix socket (docs/api.md). Every error is
//! `{error: {type, message}}` with a fitting status ([`ApiError`]). Every request is
//! first authorised by the peer's uid, from SO_PEERCRED ([`super::access`]); who
//! answered an approval is that uid too. The body is read whole, within bounds,
//! before any handler runs (`body`); the handlers are grouped by resource.

pub(crate) mod approvals;
mod body;
mod error;
pub(crate) mod events;
mod health;
mod mcp;
pub(crate) mod tasks;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::broadcast;

pub use body::{BODY_TIMEOUT, MAX_BODY};
pub use error::ApiError;

use super::approvals::Approvals;
use super::console::Viewer;
use super::login::Logins;
use super::metrics::Metrics;
use super::shutdown::Shutdown;
use super::tasks::Scheduler;
use crate::config::LiveConfig;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Runs tasks.
    pub scheduler: Scheduler,
    /// Pending approvals.
    pub approvals: Approvals,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Config in force.
    pub config: Arc<LiveConfig>,
    /// MCP servers: their pins, `mcp list` and `mcp pin`.
    pub mcp: crate::mcp::Hub,
    /// Every event as it is written (for `follow`).
    pub live_events: broadcast::Sender<Value>,
    /// The model's text as it streams (`text_delta` objects, for `follow` with
    /// `text=1`). A channel of its own: a flood of text that makes a slow follower
    /// lag must not make it skip audit events.
    pub live_text: broadcast::Sender<Value>,
    /// The daemon's shutdown: what a handler spawns (the reader behind a
    /// `/v1/events` response) is spawned on it and ends when it is cancelled.
    pub shutdown: Shutdown,
    /// Console links and sessions.
    pub logins: Logins,
}

/// The peer of a connection: the listener it came through and, on the socket, its
/// credentials, read from SO_PEERCRED when the connection is accepted (the
/// listener's accept loop) and attached to every request on it as
/// `ConnectInfo<Peer>`.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The peer's uid, if the kernel told (never on the TCP listener).
    pub uid: Option<u32>,
    /// Which listener.
    pub via: Via,
}

/// The listener a connection came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The control socket (`daemon.socket`).
    Socket,
    /// The TCP listener (`daemon.listen`).
    Tcp,
}

/// Who a request comes from, as the access layer decided; the handlers take who
/// acted (`by`) from it, never from the body.
#[derive(Clone, Debug)]
pub enum Caller {
    /// A command-line client on the socket, by its uid.
    Peer(Peer),
    /// A console session.
    Console(Viewer),
}

impl Caller {
    /// Who acted, for the audit log's `by`: `uid:N (name)` or `console:<name>`.
    pub fn by(&self) -> String {
        match self {
            Caller::Peer(peer) => peer.by(),
            Caller::Console(viewer) => viewer.by(),
        }
    }
}

impl Peer {
    /// Who acted, for the audit log's `by`: `uid:N (name)`, the name from the
    /// user database when it has one (docs/events.md).
    pub fn by(&self) -> String {
        let Some(uid) = self.uid else {
            return "uid:unknown".to_string();
        };
        match nix::unistd::User::from_uid(uid.into()) {
            Ok(Some(user)) => format!("uid:{uid} ({})", user.name),
            _ => format!("uid:{uid}"),
        }
    }
}

/// The router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .route("/v1/tasks", post(tasks::submit).get(tasks::list_tasks))
        .route("/v1/tasks/{id}", get(tasks::show_task))
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel_task))
        .route("/v1/tasks/{id}/resume", post(tasks::resume_task))
        .route("/v1/approvals", get(approvals::list_approvals))
        .route("/v1/approvals/{id}", post(approvals::answer_approval))
        .route("/v1/events", get(events::events))
        .route("/v1/mcp/servers", get(mcp::list_servers))
        .route("/v1/mcp/servers/{name}/pin", post(mcp::pin_server))
        .route("/v1/console/links", post(super::login::make_link))
        .route("/v1/console/session", get(super::login::session))
        .route(super::login::LOGIN_PATH, get(super::login::login))
        .route(super::login::LOGOUT_PATH, post(super::login::logout))
        .merge(super::console::routes())
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint; see docs/api.md",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this endpoint",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        // Inside the body's bounds, so a form's token is read from a body already
        // whole; before every handler, so a refused request changes nothing.
        .layer(axum::middleware::from_fn(super::login::csrf))
        .layer(axum::middleware::from_fn(body::bounded_body))
        // Outermost, so it runs first, for every route and both fallbacks.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::access::authorize,
        ))
        .with_state(state)
}
