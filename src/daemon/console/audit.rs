//! `/console/audit`: `audit verify` over the whole log (every line's seq and hash
//! chain, across the rotated files) and the head the daemon last wrote, to copy
//! somewhere the log's writer cannot reach.

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;

use super::Viewer;
use super::layout::{self, Nav};
use super::shown::{line, text};
use crate::config::ConfigSource as _;
use crate::daemon::api::AppState;
use crate::events::verify::{self, Report, VerifyError};

/// `GET /console/audit`.
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
) -> Response {
    let live = s.config.current().paths.events.clone();
    let (seq, hash) = s.scheduler.events().head();
    let checked = tokio::task::spawn_blocking(move || verify::verify(&live)).await;
    let main = html! {
        h1 { "Audit log" }
        h2 { "Head" }
        p { "The last line the daemon wrote: seq " strong { (seq) } ", SHA-256 " code class="hash" { (line(&hash)) } "." }
        h2 { "Verification" }
        @match &checked {
            Ok(Ok(r)) => (intact(r)),
            Ok(Err(VerifyError::Broken(b))) => {
                p class="error" role="alert" { "The chain is broken." }
                pre class="error" { (text(&b.to_string())) }
            }
            Ok(Err(e)) => p class="error" role="alert" { (text(&e.to_string())) },
            Err(e) => p class="error" role="alert" { (text(&e.to_string())) },
        }
    };
    layout::page(&viewer, Nav::Audit, "Audit", main).into_response()
}

/// What an intact log's report says.
fn intact(r: &Report) -> maud::Markup {
    html! {
        p class="ok" role="status" { "Intact: " (r.lines) " lines in " (r.files) " files." }
        @if let Some((seq, hash)) = &r.head {
            p { "Last line in the files: seq " (seq) ", SHA-256 " code class="hash" { (line(hash)) } "." }
        }
        @if let Some((path, number, seq)) = &r.chain_begins {
            p { "The chain begins at " (line(&path.display().to_string())) ":" (number) " (seq " (seq) "); "
                (r.unchained) " earlier lines are unchained." }
        }
        @if !r.gaps.is_empty() {
            p class="error" { "Recorded gaps:" }
            ul {
                @for g in &r.gaps {
                    li { (line(&g.path.display().to_string())) ":" (g.line) ": seq " (g.first_missing) "–" (g.last_missing) " missing (recorded at seq " (g.seq) ")" }
                }
            }
        }
    }
}
