//! The control API: HTTP/1.1 + JSON on the unix socket (SPEC §9). Every error is
//! `{error: {type, message}}` with a fitting status. Every request is first
//! authorised by the peer's uid, from SO_PEERCRED ([`super::access`]); who answered
//! an approval is that uid too.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::IncomingStream;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::UnixListener;
use tokio::sync::broadcast;

use super::approvals::Approvals;
use super::metrics::Metrics;
use super::tasks::{ClaimError, Cursor, ListQuery, Scheduler, TaskStatus, lock_run};
use crate::agent::Transcript;
use crate::config::{ConfigSource, LiveConfig};
use crate::control::{
    ApprovalList, DecisionRequest, DecisionResponse, ErrorBody, ErrorDetail, SubmitRequest,
    SubmitResponse, Task, TaskList,
};

/// Largest request body accepted.
pub const MAX_BODY: usize = 256 * 1024;

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
    /// Every event as it is written (for `follow`).
    pub live_events: broadcast::Sender<Value>,
}

/// The peer of a connection: its credentials.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The peer's uid, if the kernel told.
    pub uid: Option<u32>,
}

impl Connected<IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        Peer {
            uid: stream.io().peer_cred().ok().map(|c| c.uid()),
        }
    }
}

/// An API error.
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    /// An error with this status, `type` and message.
    pub(crate) fn new(
        status: StatusCode,
        kind: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }

    fn not_found(what: &str, id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no {what} {id:?}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: ErrorDetail {
                    kind: self.kind.to_string(),
                    message: self.message,
                },
            }),
        )
            .into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        let status = r.status();
        let kind = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "too_large"
        } else {
            "invalid_request"
        };
        ApiError::new(status, kind, r.body_text())
    }
}

/// The router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/tasks", post(submit).get(list_tasks))
        .route("/v1/tasks/{id}", get(show_task))
        .route("/v1/tasks/{id}/cancel", post(cancel_task))
        .route("/v1/tasks/{id}/resume", post(resume_task))
        .route("/v1/approvals", get(list_approvals))
        .route("/v1/approvals/{id}", post(answer_approval))
        .route("/v1/events", get(events))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint; see SPEC §9",
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
        // Outermost, so it runs first, for every route and both fallbacks.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::access::authorize,
        ))
        .with_state(state)
}

/// The task `id`, or a 404.
fn task(s: &AppState, id: &str) -> Result<Task, ApiError> {
    s.scheduler
        .registry
        .get(id)
        .ok_or_else(|| ApiError::not_found("task", id))
}

async fn metrics(State(s): State<AppState>) -> Response {
    let body = s.metrics.render(&s.scheduler.registry);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// 200 while the audit log can be written; 503 with the reason while its last
/// write failed (SPEC §7, §9).
async fn healthz(State(s): State<AppState>) -> Response {
    match s.scheduler.events().failing() {
        None => Json(json!({"status": "ok"})).into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "degraded", "reason": reason})),
        )
            .into_response(),
    }
}

/// Accepts a task once it is on disk (`task_queued` on the record and its `queued`
/// transcript saved); 507 while either cannot be written (each attempt is also the
/// probe that notices space came back).
async fn submit(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    body: Result<Json<SubmitRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    if body.prompt.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "prompt must not be empty",
        ));
    }
    if body.max_turns == Some(0) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "max_turns must be at least 1",
        ));
    }
    let by = peer
        .uid
        .map_or("uid:unknown".to_string(), |u| format!("uid:{u}"));
    let id = s
        .scheduler
        .submit(body.prompt, body.max_turns, by)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "insufficient_storage",
                e.to_string(),
            )
        })?;
    Ok((StatusCode::ACCEPTED, Json(SubmitResponse { task_id: id })).into_response())
}

/// Tasks per page when `limit` is not given, and the most a page holds.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

/// `GET /v1/tasks` parameters, as text so that the daemon names a bad one.
#[derive(Deserialize)]
struct ListParams {
    status: Option<String>,
    limit: Option<String>,
    before: Option<String>,
}

fn bad_request(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
}

/// The parameters checked: a known status, a limit from 1 (above 500 is taken as
/// 500), and a cursor that is an RFC 3339 time or else a task id.
fn list_query(p: ListParams) -> Result<ListQuery, ApiError> {
    let status = p
        .status
        .map(|s| {
            serde_json::from_value::<TaskStatus>(Value::String(s.clone()))
                .map_err(|_| bad_request(format!("status: unknown status {s:?}")))
        })
        .transpose()?;
    let limit = match p.limit {
        None => DEFAULT_LIMIT,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if n > 0 => n.min(MAX_LIMIT),
            _ => {
                return Err(bad_request(format!(
                    "limit: {l:?} is not a number from 1 to {MAX_LIMIT}"
                )));
            }
        },
    };
    // Times are compared as text, so a given one is put in the registry's own
    // form (UTC, milliseconds) first.
    let before = p
        .before
        .map(|b| match chrono::DateTime::parse_from_rfc3339(&b) {
            Ok(t) => Cursor::Time(
                t.to_utc()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            ),
            Err(_) => Cursor::Task(b),
        });
    Ok(ListQuery {
        status,
        limit,
        before,
    })
}

/// A page of tasks, newest first; items carry no answer (SPEC §9).
async fn list_tasks(
    State(s): State<AppState>,
    Query(p): Query<ListParams>,
) -> Result<Json<TaskList>, ApiError> {
    let page = s
        .scheduler
        .registry
        .page(&list_query(p)?)
        .map_err(|e| bad_request(e.to_string()))?;
    Ok(Json(TaskList {
        tasks: page.tasks,
        next: page.next,
    }))
}

/// One task; an ended task's answer and whole error are read from its transcript,
/// since the registry does not keep them.
async fn show_task(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Task>, ApiError> {
    let mut t = task(&s, &id)?;
    if t.status == TaskStatus::Finished && s.scheduler.registry.ended(&id) {
        let dir = s.config.current().paths.transcripts.clone();
        match Transcript::read_async(Transcript::path(&dir, &id)).await {
            Ok(r) if r.task_id == id => {
                t.answer = r.answer;
                t.error = r.error.or(t.error);
            }
            Ok(_) => tracing::warn!("transcript of {id} names another task"),
            // The summary is still right; only the answer is missing.
            Err(e) => tracing::warn!("cannot read the transcript of {id}: {e}"),
        }
    }
    Ok(Json(t))
}

async fn cancel_task(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let t = s
        .scheduler
        .registry
        .cancel(&id)
        .ok_or_else(|| ApiError::not_found("task", &id))?;
    Ok((StatusCode::ACCEPTED, Json(t)).into_response())
}

async fn resume_task(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    // The claim is the registry's check-and-set: of racing resumes, one wins and the
    // rest are answered 409 here, before anything else is read.
    let claim = s.scheduler.claim(&id).map_err(|e| match e {
        ClaimError::NotFound(_) => ApiError::not_found("task", &id),
        e => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
    })?;
    let dir = s.config.current().paths.transcripts.clone();
    // The run lock keeps other processes off the transcript; taken before the
    // transcript is read, so what is read is what this run continues.
    let lock = match lock_run(dir.clone(), id.clone()).await {
        Ok(lock) => lock,
        Err(e) => {
            s.scheduler.release(claim);
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                e.to_string(),
            ));
        }
    };
    let transcript = match Transcript::read_async(Transcript::path(&dir, &id)).await {
        Ok(t) => t,
        Err(e) => {
            s.scheduler.release(claim);
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("no readable transcript for {id}: {e}"),
            ));
        }
    };
    s.scheduler.resume(claim, transcript, lock);
    let t = task(&s, &id)?;
    Ok((StatusCode::ACCEPTED, Json(t)).into_response())
}

async fn list_approvals(State(s): State<AppState>) -> Json<ApprovalList> {
    Json(ApprovalList {
        approvals: s.approvals.list(),
    })
}

async fn answer_approval(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<String>,
    body: Result<Json<DecisionRequest>, JsonRejection>,
) -> Result<Json<DecisionResponse>, ApiError> {
    let Json(body) = body?;
    let approved = body.approves().ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!(
                "decision must be \"approve\" or \"deny\", not {:?}",
                body.decision
            ),
        )
    })?;
    let by = peer
        .uid
        .map_or("uid:unknown".to_string(), |u| format!("uid:{u}"));
    s.approvals
        .resolve(&id, approved, by, body.reason)
        .map_err(|e| ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()))?;
    Ok(Json(DecisionResponse {
        approval_id: id,
        decision: body.decision,
    }))
}

#[derive(Deserialize)]
struct EventsQuery {
    task: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    follow: Option<String>,
}

fn matches(ev: &Value, q: &EventsQuery) -> bool {
    q.task.as_ref().is_none_or(|t| ev["task_id"] == t.as_str())
        && q.kind.as_ref().is_none_or(|k| ev["type"] == k.as_str())
}

async fn events(State(s): State<AppState>, Query(q): Query<EventsQuery>) -> Response {
    // Subscribe before reading the file, so nothing written in between is missed;
    // lines already read are skipped by seq.
    let mut live = s.live_events.subscribe();
    let path = s.config.current().paths.events.clone();
    let text = tokio::fs::read_to_string(&path).await.unwrap_or_default();
    let mut last_seq = 0;
    let mut head = String::new();
    for line in text.lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        last_seq = ev["seq"].as_u64().unwrap_or(last_seq);
        if matches(&ev, &q) {
            head.push_str(line);
            head.push('\n');
        }
    }
    let follow = q.follow.as_deref().is_some_and(|f| f == "1" || f == "true");
    let first = futures::stream::once(async move { Ok::<Bytes, Infallible>(Bytes::from(head)) });
    let body = if follow {
        let rest = async_stream(move |tx| async move {
            loop {
                match live.recv().await {
                    Ok(ev) => {
                        if ev["seq"].as_u64().unwrap_or(0) <= last_seq || !matches(&ev, &q) {
                            continue;
                        }
                        let mut line = ev.to_string();
                        line.push('\n');
                        if tx.send(Bytes::from(line)).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Body::from_stream(futures::StreamExt::chain(first, rest))
    } else {
        Body::from_stream(first)
    };
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

/// A stream fed by a task through a channel.
fn async_stream<F, Fut>(f: F) -> impl futures::Stream<Item = Result<Bytes, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Bytes>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    futures::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|b| (Ok(b), rx)) },
    )
}
