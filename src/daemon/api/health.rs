//! `GET /healthz` and `GET /metrics`: whether the audit log takes lines, and the
//! counters, for probes and scrapers.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;

/// The Prometheus text of the counters and the registry's task counts.
pub(super) async fn metrics(State(s): State<AppState>) -> Response {
    let body = s.metrics.render(&s.scheduler.registry);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// 200 while the audit log can be written; 503 with the reason while its last
/// write failed (docs/events.md, docs/api.md).
pub(super) async fn healthz(State(s): State<AppState>) -> Response {
    let events = s.scheduler.events();
    let gap = events.gap();
    match (events.failing(), gap) {
        (None, None) => Json(json!({"status": "ok"})).into_response(),
        // The log is written again, but lost lines: 200, since work goes on and is
        // recorded, with the gap named until restart (docs/api.md).
        (None, Some(gap)) => Json(json!({
            "status": "degraded",
            "reason": gap_reason(&gap),
            "gap": gap,
        }))
        .into_response(),
        (Some(reason), gap) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "degraded", "reason": reason, "gap": gap})),
        )
            .into_response(),
    }
}

/// What `/healthz` says of a recorded `events_gap`.
fn gap_reason(gap: &crate::events::Gap) -> String {
    format!(
        "the audit log {} was removed or replaced under the daemon: the lines up to seq {} \
         are not in it; events_gap recorded at seq {} (until restart)",
        gap.file, gap.last_seq, gap.seq
    )
}
