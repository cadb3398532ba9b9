//! `/v1/tasks`: submit, list, show, cancel and resume. Each answers only once what
//! it did is on the record (`task_queued`, `task_cancelled`, `task_resumed`): 507
//! while the audit log cannot take the line.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::Value;

use super::{ApiError, AppState, Caller};
use crate::agent::{TaskStatus, Transcript};
use crate::config::ConfigSource;
use crate::daemon::registry::{ClaimError, Cursor, ListQuery};
use crate::daemon::tasks::{CancelError, SubmitError, lock_run};
use crate::protocol::{SubmitRequest, SubmitResponse, Task, TaskList};

/// The task `id`, or a 404.
fn task(s: &AppState, id: &str) -> Result<Task, ApiError> {
    s.scheduler
        .registry
        .get(id)
        .ok_or_else(|| ApiError::not_found("task", id))
}

/// A submit or resume not taken: 503 while the daemon stops, else 507.
fn refused(e: SubmitError, prefix: String) -> ApiError {
    match e {
        SubmitError::Stopping => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "stopping", e.to_string())
        }
        e => ApiError::log_failing(format!("{prefix}{e}")),
    }
}

/// Accepts a task once it is on disk (`task_queued` on the record and its `queued`
/// transcript saved); 507 while either cannot be written (each attempt is also the
/// probe that notices space came back).
pub(super) async fn submit(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: axum::http::HeaderMap,
    body: Result<Json<SubmitRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let traceparent = traceparent_of(&headers, body.traceparent.as_deref())?;
    if body.prompt.trim().is_empty() {
        return Err(ApiError::bad_request("prompt must not be empty"));
    }
    if body.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(ApiError::bad_request("model must not be empty"));
    }
    if body.max_turns == Some(0) {
        return Err(ApiError::bad_request("max_turns must be at least 1"));
    }
    let by = caller.by();
    let id = s
        .scheduler
        .submit(body.prompt, body.max_turns, body.model, by, traceparent)
        .await
        .map_err(|e| refused(e, String::new()))?;
    Ok((StatusCode::ACCEPTED, Json(SubmitResponse { task_id: id })).into_response())
}

/// The caller's trace, from the body's `traceparent` or else the header of that
/// name (the W3C way); refused (400) unless it is a valid one.
fn traceparent_of(
    headers: &axum::http::HeaderMap,
    in_body: Option<&str>,
) -> Result<Option<String>, ApiError> {
    let given = match in_body {
        Some(tp) => tp.to_string(),
        None => match headers.get("traceparent") {
            None => return Ok(None),
            Some(v) => v
                .to_str()
                .map_err(|_| ApiError::bad_request("traceparent: the header is not ASCII"))?
                .trim()
                .to_string(),
        },
    };
    crate::telemetry::TraceParent::parse(&given)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Kept as version 00 reads it (parse checked 55 ASCII characters at least):
    // a later version's extra fields are the caller's text, and not the task's.
    Ok(Some(format!("00{}", &given[2..55])))
}

/// Tasks per page when `limit` is not given, and the most a page holds.
const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;

/// `GET /v1/tasks` parameters, as text so that the daemon names a bad one.
#[derive(Deserialize)]
pub(super) struct ListParams {
    status: Option<String>,
    limit: Option<String>,
    before: Option<String>,
}

/// The parameters checked: a known status, a limit from 1 (above 500 is taken as
/// 500), and a cursor that is an RFC 3339 time or else a task id.
fn list_query(p: ListParams) -> Result<ListQuery, ApiError> {
    let status = p
        .status
        .map(|s| {
            serde_json::from_value::<TaskStatus>(Value::String(s.clone()))
                .map_err(|_| ApiError::bad_request(format!("status: unknown status {s:?}")))
        })
        .transpose()?;
    let limit = match p.limit {
        None => DEFAULT_LIMIT,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if n > 0 => n.min(MAX_LIMIT),
            _ => {
                return Err(ApiError::bad_request(format!(
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
pub(super) async fn list_tasks(
    State(s): State<AppState>,
    p: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<TaskList>, ApiError> {
    let Query(p) = p?;
    let page = s
        .scheduler
        .registry
        .page(&list_query(p)?)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Json(TaskList {
        tasks: page.tasks,
        next: page.next,
    }))
}

/// One task; an ended task's answer and whole error are read from its transcript,
/// since the registry does not keep them.
pub(super) async fn show_task(
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

/// Cancels a task, once who cancelled it is on the record.
pub(super) async fn cancel_task(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id?;
    let t = cancel(&s, &id, caller.by()).await?;
    Ok((StatusCode::ACCEPTED, Json(t)).into_response())
}

/// Cancels task `id` on behalf of `by`: what the API's handler and the web
/// console's button both do.
pub(crate) async fn cancel(s: &AppState, id: &str, by: String) -> Result<Task, ApiError> {
    task(s, id)?;
    // Who cancelled is on the log before the cancel takes effect.
    match s.scheduler.cancel(id, by).await {
        Ok(t) => t.ok_or_else(|| ApiError::not_found("task", id)),
        Err(e @ CancelError::Record(_)) => Err(ApiError::log_failing(e.to_string())),
        Err(e @ CancelError::Stopping(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            e.to_string(),
        )),
    }
}

/// Queues an interrupted or stopped task to continue from its transcript.
pub(super) async fn resume_task(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
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
        .resume(claim, transcript, lock, caller.by())
        .await
        .map_err(|e| refused(e, "the task is not resumed: ".into()))?;
    let t = task(&s, &id)?;
    Ok((StatusCode::ACCEPTED, Json(t)).into_response())
}
