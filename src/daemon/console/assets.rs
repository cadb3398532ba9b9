//! The console's only assets, compiled in: no page loads anything from elsewhere.

use axum::http::header;
use axum::response::IntoResponse;

/// `/console/static/console.css`.
pub(super) async fn css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("static/console.css"),
    )
}

/// `/console/static/console.js`.
pub(super) async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("static/console.js"),
    )
}
