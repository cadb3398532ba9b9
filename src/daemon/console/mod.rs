//! The web console: server-rendered pages over the daemon's state, served on the
//! control socket and on `daemon.listen` (docs/console.md). Who may see them is
//! decided before any handler here runs (`super::access` and `super::login`): every
//! request that reaches a page carries the [`Viewer`] of its session, and every
//! state-changing one has had its CSRF token checked.
//!
//! Every page reads without JavaScript; the one script only follows the live
//! event stream and swaps in sections the server renders again. Model and tool
//! text is escaped twice over: as the terminal shows it (control, bidi and
//! invisible characters as `\u…` escapes, [`crate::text`]) and then for HTML
//! (maud escapes every interpolated string).

mod approvals;
mod assets;
mod audit;
mod events;
mod layout;
mod output;
mod policy;
mod shown;
mod task;
mod tasks;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::{get, post};

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

/// The policy every console response is served under: nothing but the console's
/// own script and style, no frames, no form posting elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The console's routes, each under `/console`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(|| async { layout::see_other("/console/") }))
        .route("/console/", get(tasks::page))
        .route("/console/tasks/{id}", get(task::page))
        .route("/console/tasks/{id}/cancel", post(task::cancel))
        .route("/console/tasks/{id}/output", get(output::page))
        .route("/console/approvals", get(approvals::page))
        .route("/console/approvals/{id}", post(approvals::answer))
        .route("/console/events", get(events::page))
        .route("/console/policy", get(policy::page))
        .route("/console/audit", get(audit::page))
        .route("/console/static/console.css", get(assets::css))
        .route("/console/static/console.js", get(assets::js))
        .layer(axum::middleware::map_response(secure_headers))
}

/// Headers on every console response: the strict policy, no sniffing, no
/// referrer to any other site (ids in URLs stay here), nothing cached (pages show
/// live state and hold a CSRF token).
///
/// The referrer policy is `same-origin`, not `no-referrer`: under `no-referrer` a
/// browser sends `Origin: null` with every form POST, and the access layer refuses
/// an origin that is not the daemon's own.
async fn secure_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests;
