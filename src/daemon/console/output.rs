//! `/console/tasks/{id}/output?call=ID`: the kept output of one tool call, as
//! escaped text. The file is never named by the request: the task must be one the
//! daemon knows, the call one of its transcript's, and the file name is made by
//! the one function that names `.out` files.

use std::io::Read as _;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::Viewer;
use super::layout::{self, Nav};
use super::shown::{line, url_part};
use crate::agent::Transcript;
use crate::config::ConfigSource as _;
use crate::daemon::api::AppState;
use crate::llm::Role;

/// Bytes of a kept output shown; a larger file is cut, and says so.
const SHOWN_BYTES: u64 = 1 << 20;

/// The call asked for.
#[derive(Deserialize)]
pub(super) struct Params {
    call: String,
}

/// `GET /console/tasks/{id}/output?call=ID`.
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Query(p): Query<Params>,
) -> Response {
    let back = format!("/console/tasks/{}", url_part(&id));
    let missing = |what: String| layout::error(&viewer, StatusCode::NOT_FOUND, &what, &back);
    if !crate::protocol::tree::is_task_id(&id) || s.scheduler.registry.get(&id).is_none() {
        return missing(format!("no task {:?}", line(&id)));
    }
    let dir = s.config.current().paths.transcripts.clone();
    let t = match Transcript::read_async(Transcript::path(&dir, &id)).await {
        Ok(t) if t.task_id == id => t,
        _ => return missing(format!("no readable transcript for {id}")),
    };
    let known = t
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .any(|m| m.tool_uses().iter().any(|u| u.id == p.call));
    if !known {
        return missing(format!("task {id} has no call {:?}", line(&p.call)));
    }
    let path = dir.join(&id).join(crate::tools::out_file_name(&p.call));
    let read = tokio::task::spawn_blocking(move || read_escaped(&path)).await;
    let (shown, size) = match read {
        Ok(Ok(r)) => r,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return missing(format!("call {} kept no output", line(&p.call)));
        }
        Ok(Err(e)) => return missing(format!("cannot read the kept output: {e}")),
        Err(e) => return missing(e.to_string()),
    };
    let main = html! {
        h1 { "Output of " code { (line(&p.call)) } }
        p { "Task " a href=(back) { (line(&id)) } ", " (size) " bytes kept"
            @if size > SHOWN_BYTES { "; the first " (SHOWN_BYTES) " are shown" } "." }
        pre class="output" { (shown) }
    };
    layout::page(&viewer, Nav::Tasks, "Output", main).into_response()
}

/// The start of the file at `path` (a regular file only), escaped as the
/// terminal shows a command's output, and the file's size.
fn read_escaped(path: &std::path::Path) -> std::io::Result<(String, u64)> {
    let file = crate::events::segments::open_regular(path)?;
    let size = file.metadata()?.len();
    let mut bytes = Vec::new();
    file.take(SHOWN_BYTES).read_to_end(&mut bytes)?;
    let mut out = Vec::with_capacity(bytes.len());
    let mut esc = crate::text::StreamEscaper::default();
    esc.push(&bytes, &mut out);
    esc.finish(&mut out);
    Ok((String::from_utf8_lossy(&out).into_owned(), size))
}
