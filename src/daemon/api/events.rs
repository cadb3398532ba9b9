//! `GET /v1/events` (docs/commands.md, docs/api.md): the matching lines of the audit log across its
//! rotated files, then, with `follow`, new ones as they are written.
//!
//! Memory is bounded whatever the log's size: the files are read one line at a
//! time on a blocking thread that hands each matching line to the response through
//! a small channel, so a slow client slows the reading instead of filling memory.
//! A follower that falls behind the live broadcast (its buffer is bounded too)
//! does not lose lines: it reads what it missed back from the files, then goes on
//! live. A line that does not parse is sent as an `unreadable_line` object naming
//! its file and line number, never skipped.
//!
//! With `Accept: text/event-stream` the same lines are server-sent events (`id:` the
//! seq, so a client's `Last-Event-ID` resumes after it).
//!
//! When the daemon stops, a follower is sent the lines up to the last one
//! (`daemon_stopping`) from the files, then its stream ends: the client sees the
//! end of the response, not a connection cut mid-line.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::path::PathBuf;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query as QueryParam, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::{ApiError, AppState};
use crate::config::ConfigSource as _;
use crate::events::query::{self, Found, Query, QueryParams};

/// Lines in flight between the file reader and the response.
const CHANNEL_LINES: usize = 64;

/// The query string; the same filters as `harnessd events`.
#[derive(Deserialize)]
pub(super) struct EventsQuery {
    task: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    tool: Option<String>,
    since: Option<String>,
    until: Option<String>,
    grep: Option<String>,
    follow: Option<String>,
    /// `1`: a followed stream also carries the model's text as it streams
    /// (`text_delta` objects: no `seq`, never in events.jsonl, never replayed).
    text: Option<String>,
}

/// An `unreadable_line` object, newline included: what a reader sends in place of
/// line `line` of `file` (docs/events.md: never skipped silently).
fn unreadable_line(file: &std::path::Path, line: u64, error: &str) -> Bytes {
    let mut text = json!({
        "type": "unreadable_line",
        "file": file.display().to_string(),
        "line": line,
        "error": error,
    })
    .to_string();
    text.push('\n');
    Bytes::from(text)
}

/// Sends the lines of the files matching `q` (with its seq bounds) to `tx`, on a
/// blocking thread; `false` once the client has gone.
async fn send_from_files(live: PathBuf, q: Query, tx: mpsc::Sender<Bytes>) -> bool {
    let task = tokio::task::spawn_blocking(move || {
        let found = match query::run(&live, q) {
            Ok(found) => found,
            Err(e) => {
                let error = format!("cannot list the log's files: {e}");
                return tx.blocking_send(unreadable_line(&live, 0, &error)).is_ok();
            }
        };
        for f in found {
            let bytes = match f {
                Found::Line(mut bytes, _) => {
                    bytes.push(b'\n');
                    Bytes::from(bytes)
                }
                Found::Unreadable { path, line, error } => unreadable_line(&path, line, &error),
            };
            if tx.blocking_send(bytes).is_err() {
                return false;
            }
        }
        true
    });
    task.await.unwrap_or(false)
}

/// Sends matching events written after `done` as they come; on falling behind,
/// reads the missed ones back from the files first.
async fn send_live(
    s: &AppState,
    mut live: broadcast::Receiver<Value>,
    mut text: Option<TextFeed>,
    mut done: u64,
    q: &Query,
    tx: &mpsc::Sender<Bytes>,
) {
    let path = s.config.current().paths.events.clone();
    let mut pending = VecDeque::new();
    let stopped = s.shutdown.token().clone();
    loop {
        let next = tokio::select! {
            biased;
            () = stopped.cancelled() => {
                // `daemon_stopping` is on the record: whatever the broadcast has
                // not brought yet is read from the files, and the stream ends.
                let mut rest = q.clone();
                rest.after_seq = done;
                rest.until_seq = Some(s.scheduler.events().head().0);
                send_from_files(path, rest, tx.clone()).await;
                return;
            }
            next = next_live(&mut live, &mut text, &mut pending) => next,
        };
        let next = match next {
            Next::Live(ev) => ev,
            Next::Text => {
                if !send_text(&mut pending, done, tx).await {
                    return;
                }
                continue;
            }
        };
        match next {
            Ok(ev) => {
                let seq = ev["seq"].as_u64().unwrap_or(0);
                if seq <= done {
                    continue;
                }
                done = seq;
                let mut line = ev.to_string();
                if !q.matches(&ev, &line) {
                    continue;
                }
                line.push('\n');
                if tx.send(Bytes::from(line)).await.is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                // Every line up to the head is on disk: read the gap from there.
                let head = s.scheduler.events().head().0;
                let mut gap = q.clone();
                gap.after_seq = done;
                gap.until_seq = Some(head);
                if !send_from_files(path.clone(), gap, tx.clone()).await {
                    return;
                }
                done = done.max(head);
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
        if !send_text(&mut pending, done, tx).await {
            return;
        }
    }
}

/// What a follower's wait brought.
enum Next {
    /// The live broadcast's next event (or why there is none).
    Live(Result<Value, broadcast::error::RecvError>),
    /// A text delta was taken into the pending text (or the text feed ended).
    Text,
}

/// Waits for the next live event or, for a follower with `text=1`, the next text
/// delta, which is put in `pending`. Text first: a text was sent before every
/// event written after it, so taking what is waiting there first keeps it ahead of
/// those events however far behind this follower is; text written after events not
/// yet sent waits for them in `pending`. Cancel-safe: both receivers are.
async fn next_live(
    live: &mut broadcast::Receiver<Value>,
    text: &mut Option<TextFeed>,
    pending: &mut VecDeque<Value>,
) -> Next {
    let Some(feed) = text.as_mut() else {
        return Next::Live(live.recv().await);
    };
    tokio::select! {
        biased;
        delta = feed.rx.recv() => {
            match delta {
                Ok(delta) if feed.wants(&delta) => pending.push_back(delta),
                // Text is a courtesy: a lagging or closed feed loses only text,
                // never an event.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => *text = None,
            }
            Next::Text
        }
        ev = live.recv() => Next::Live(ev),
    }
}

/// Sends the waiting text written after lines up to `done` only (its events are
/// sent); `false` once the client has gone.
async fn send_text(pending: &mut VecDeque<Value>, done: u64, tx: &mpsc::Sender<Bytes>) -> bool {
    while pending
        .front()
        .is_some_and(|d| d["after_seq"].as_u64().unwrap_or(0) <= done)
    {
        let Some(mut delta) = pending.pop_front() else {
            break;
        };
        if let Some(d) = delta.as_object_mut() {
            d.remove("after_seq");
        }
        let mut line = delta.to_string();
        line.push('\n');
        if tx.send(Bytes::from(line)).await.is_err() {
            return false;
        }
    }
    true
}

/// The live text of one task (or all), for a follower that asked with `text=1`.
struct TextFeed {
    rx: broadcast::Receiver<Value>,
    task: Option<String>,
}

impl TextFeed {
    fn wants(&self, delta: &Value) -> bool {
        self.task
            .as_deref()
            .is_none_or(|t| delta["task_id"].as_str() == Some(t))
    }
}

/// Whether the client asked for server-sent events (`Accept: text/event-stream`).
fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// The seq an SSE client last saw (`Last-Event-ID`), to resume after it.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(v) = headers.get("last-event-id") else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be the seq of an event"))
}

/// One ndjson line as a server-sent event: `id:` its seq (none for a text delta,
/// which has no seq and is never replayed), `data:` the line. A CR or LF would end
/// the `data:` field and let the rest read as fields of its own (a forged `id:`):
/// JSON written by the daemon never holds one raw, but a line of the file may
/// (JSON allows them as whitespace), so such a line is sent re-serialised.
fn as_sse(line: &Bytes) -> Bytes {
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let parsed = serde_json::from_slice::<Value>(text).ok();
    let seq = parsed.as_ref().and_then(|v| v["seq"].as_u64());
    let data: std::borrow::Cow<'_, [u8]> = if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        match &parsed {
            Some(v) => v.to_string().into_bytes().into(),
            None => text
                .iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
                .collect::<Vec<u8>>()
                .into(),
        }
    } else {
        text.into()
    };
    let mut out = Vec::with_capacity(data.len() + 32);
    if let Some(seq) = seq {
        out.extend_from_slice(format!("id: {seq}\n").as_bytes());
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// `GET /v1/events`.
pub(super) async fn events(
    State(s): State<AppState>,
    headers: HeaderMap,
    params: Result<QueryParam<EventsQuery>, QueryRejection>,
) -> Response {
    let sse = wants_sse(&headers);
    let resume_after = match last_event_id(&headers) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let p = match params {
        Ok(QueryParam(p)) => p,
        Err(r) => return ApiError::from(r).into_response(),
    };
    let follow = p.follow.as_deref().is_some_and(|f| f == "1" || f == "true");
    let text =
        (follow && p.text.as_deref().is_some_and(|t| t == "1" || t == "true")).then(|| TextFeed {
            rx: s.live_text.subscribe(),
            task: p.task.clone(),
        });
    let q = match Query::new(QueryParams {
        task: p.task,
        kind: p.kind,
        tool: p.tool,
        since: p.since,
        until: p.until,
        grep: p.grep,
    }) {
        Ok(mut q) => {
            q.after_seq = q.after_seq.max(resume_after.unwrap_or(0));
            q
        }
        Err(e) => {
            return ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", e.to_string())
                .into_response();
        }
    };
    // Subscribe, then take the head: lines up to it are read from the files, the
    // ones after it come from the broadcast, so none is missed or sent twice.
    let live = s.live_events.subscribe();
    let head = s.scheduler.events().head().0;
    let path = s.config.current().paths.events.clone();
    let (tx, mut rx) = mpsc::channel::<Bytes>(CHANNEL_LINES);
    let shutdown = s.shutdown.clone();
    shutdown.spawn(async move {
        let mut from_files = q.clone();
        if follow {
            from_files.until_seq = Some(head);
        }
        if !send_from_files(path, from_files, tx.clone()).await {
            return;
        }
        if follow {
            send_live(&s, live, text, head, &q, &tx).await;
        }
    });
    let body = futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|b| b.map(|line| Ok::<Bytes, Infallible>(if sse { as_sse(&line) } else { line })))
    });
    let kind = if sse {
        "text/event-stream"
    } else {
        "application/x-ndjson"
    };
    ([(header::CONTENT_TYPE, kind)], Body::from_stream(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_holding_a_raw_cr_cannot_forge_a_field() {
        let line = Bytes::from_static(b"{\"seq\":5,\r\"type\":\"x\"}\n");
        let out = as_sse(&line);
        let text = std::str::from_utf8(&out).unwrap();
        assert_eq!(text, "id: 5\ndata: {\"seq\":5,\"type\":\"x\"}\n\n");
        let junk = as_sse(&Bytes::from_static(b"not json\r\nid: 99\n"));
        let text = std::str::from_utf8(&junk).unwrap();
        assert_eq!(text, "data: not json  id: 99\n\n");
    }
}
