//! The web console: server-rendered pages over the daemon's state, served on the
//! control socket and on `daemon.listen`. Who may see them is decided before any
//! handler here runs (`super::access` and `super::login`): every request that reaches
//! a page carries the [`Viewer`] of its session, and every state-changing one has
//! had its CSRF token checked.

use axum::Router;

use super::api::AppState;

/// The logged-in operator a console request comes from, put on the request by the
/// access layer from its session cookie.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// The name given to `harnessd console-url --name`.
    pub name: String,
    /// The session's CSRF token, which every form and script request sends back.
    pub csrf: String,
}

impl Viewer {
    /// Who acted, for the audit log's `by`.
    pub fn by(&self) -> String {
        format!("console:{}", self.name)
    }
}

/// The console's routes, each under `/console`.
pub fn routes() -> Router<AppState> {
    Router::new()
}
