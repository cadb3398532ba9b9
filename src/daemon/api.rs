//! The control API: HTTP/1.1 + JSON on the unix socket (docs/api.md). Every error is
//! `{error: {type, message}}` with a fitting status. Every request is first
//! authorised by the peer's uid, from SO_PEERCRED ([`super::access`]); who answered
//! an approval is that uid too.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::approvals::{Answer, Approvals, ResolveError};
use super::metrics::Metrics;
use super::tasks::{ClaimError, Cursor, ListQuery, Scheduler, lock_run};
use crate::agent::Transcript;
use crate::config::{ConfigSource, LiveConfig};
use crate::events::Event;
use crate::protocol::{
    ApprovalList, DecisionRequest, DecisionResponse, ErrorBody, ErrorDetail, SubmitRequest,
    SubmitResponse, Task, TaskList, TaskStatus,
};

/// Largest request body accepted.
pub const MAX_BODY: usize = 256 * 1024;

/// A body declared over [`MAX_BODY`] but no larger than this is still read (and
/// thrown away, within [`BODY_TIMEOUT`]) before the 413, so a client that writes
/// all of it before reading gets the answer rather than a broken pipe; a larger one
/// is answered at once.
const DRAIN_LIMIT: u64 = 4 * MAX_BODY as u64;

/// How long a request's body may take to arrive in full, once its head has: a
/// body that stops arriving is answered 408 and its connection closed.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// The model's text as it streams (`text_delta` objects, for `follow` with
    /// `text=1`). A channel of its own: a flood of text that makes a slow follower
    /// lag must not make it skip audit events.
    pub live_text: broadcast::Sender<Value>,
}

/// The peer of a connection: its credentials, read from SO_PEERCRED when the
/// connection is accepted (`serve`'s accept loop) and attached to every request on
/// it as `ConnectInfo<Peer>`.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The peer's uid, if the kernel told.
    pub uid: Option<u32>,
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

/// An API error.
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    /// 507: the audit log cannot take the line that must precede the action, so
    /// the action does not happen.
    fn log_failing(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_storage",
            message,
        )
    }

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

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::new(r.status(), "invalid_request", r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::new(r.status(), "invalid_request", r.body_text())
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
        .route("/v1/events", get(super::events_api::events))
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
        .layer(axum::middleware::from_fn(bounded_body))
        // Outermost, so it runs first, for every route and both fallbacks.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::access::authorize,
        ))
        .with_state(state)
}

/// Reads the whole body before any handler runs, within [`MAX_BODY`] and
/// [`BODY_TIMEOUT`]: a declared length over the limit is refused (413) — past
/// [`DRAIN_LIMIT`] before a byte of it is read — and a body that stops arriving is
/// dropped (408), so no peer can hold a request open by promising more than it
/// sends.
async fn bounded_body(req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (parts, body) = req.into_parts();
    if let Some(n) = declared.filter(|&n| n > MAX_BODY as u64) {
        if n <= DRAIN_LIMIT {
            let _ = tokio::time::timeout(BODY_TIMEOUT, discard(body)).await;
        }
        return closing(too_large());
    }
    let collected = tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect());
    match collected.await {
        Ok(Ok(body)) => {
            next.run(Request::from_parts(parts, Body::from(body.to_bytes())))
                .await
        }
        Ok(Err(e)) if e.is::<LengthLimitError>() => closing(too_large()),
        Ok(Err(e)) => closing(
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("cannot read the request body: {e}"),
            )
            .into_response(),
        ),
        Err(_) => closing(
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!(
                    "the request body did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            )
            .into_response(),
        ),
    }
}

/// Reads `body` to its end, keeping nothing.
async fn discard(body: Body) {
    let mut body = Limited::new(body, DRAIN_LIMIT as usize);
    while let Some(Ok(_)) = body.frame().await {}
}

fn too_large() -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!("a request body may have at most {MAX_BODY} bytes"),
    )
    .into_response()
}

/// The response, with the connection closed after it: what is left of the body
/// on the wire is not read.
fn closing(mut r: Response) -> Response {
    r.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    r
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
/// write failed (docs/events.md, docs/api.md).
async fn healthz(State(s): State<AppState>) -> Response {
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
    if body.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "model must not be empty",
        ));
    }
    if body.max_turns == Some(0) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "max_turns must be at least 1",
        ));
    }
    let by = peer.by();
    let id = s
        .scheduler
        .submit(body.prompt, body.max_turns, body.model, by)
        .await
        .map_err(|e| ApiError::log_failing(e.to_string()))?;
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

/// A page of tasks, newest first; items carry no answer (docs/api.md).
async fn list_tasks(
    State(s): State<AppState>,
    p: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<TaskList>, ApiError> {
    let Query(p) = p?;
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
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Task>, ApiError> {
    let Path(id) = id?;
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
    ConnectInfo(peer): ConnectInfo<Peer>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id?;
    task(&s, &id)?;
    // Who cancelled is on the log before the cancel takes effect.
    s.scheduler
        .events()
        .record(Some(&id), Event::TaskCancelled { by: peer.by() })
        .await
        .map_err(|e| ApiError::log_failing(e.to_string()))?;
    let t = s
        .scheduler
        .registry
        .cancel(&id)
        .ok_or_else(|| ApiError::not_found("task", &id))?;
    Ok((StatusCode::ACCEPTED, Json(t)).into_response())
}

async fn resume_task(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id?;
    // The claim is the registry's check-and-set: of racing resumes, one wins and the
    // rest are answered 409 here, before anything else is read.
    let claim = s.scheduler.claim(&id).map_err(|e| match e {
        ClaimError::NotFound(_) => ApiError::not_found("task", &id),
        e => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
    })?;
    let dir = s.config.current().paths.transcripts.clone();
    // The run lock keeps other processes off the transcript; taken before the
    // transcript is read, so what is read is what this run continues. It is held
    // until the resume is queued on disk, and taken again when the run starts.
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
    // Answered only once `task_resumed` is on the record, like a new task: 507
    // while the log cannot take it.
    s.scheduler
        .resume(claim, transcript, lock, peer.by())
        .await
        .map_err(|e| ApiError::log_failing(format!("the task is not resumed: {e}")))?;
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
    id: Result<Path<String>, PathRejection>,
    body: Result<Json<DecisionRequest>, JsonRejection>,
) -> Result<Json<DecisionResponse>, ApiError> {
    let Path(id) = id?;
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
    let by = peer.by();
    let answer = Answer {
        approved,
        by,
        reason: body.reason,
        remember: body.remember,
    };
    let remembered = s.approvals.resolve(&id, answer).await.map_err(|e| {
        let (status, kind) = match e {
            ResolveError::Unknown(_) => (StatusCode::NOT_FOUND, "not_found"),
            ResolveError::RememberDenial => (StatusCode::BAD_REQUEST, "invalid_request"),
            ResolveError::Remember(_) | ResolveError::AnsweredMeanwhile(..) => {
                (StatusCode::CONFLICT, "conflict")
            }
        };
        ApiError::new(status, kind, e.to_string())
    })?;
    Ok(Json(DecisionResponse {
        approval_id: id,
        decision: body.decision,
        remembered,
    }))
}
