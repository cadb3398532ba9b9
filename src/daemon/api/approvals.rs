//! `/v1/approvals`: the calls waiting for a human, and their answers. Who answered
//! is the connection's uid, never a field of the body.

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};

use super::{ApiError, AppState, Caller};
use crate::daemon::approvals::{Answer, ResolveError};
use crate::protocol::{ApprovalList, DecisionRequest, DecisionResponse};

/// The pending approvals.
pub(super) async fn list_approvals(State(s): State<AppState>) -> Json<ApprovalList> {
    Json(ApprovalList {
        approvals: s.approvals.list(),
    })
}

/// Approves or denies one pending call; with `remember`, its allow rules are
/// written first, and the approval stays pending if they cannot be.
pub(super) async fn answer_approval(
    State(s): State<AppState>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
    body: Result<Json<DecisionRequest>, JsonRejection>,
) -> Result<Json<DecisionResponse>, ApiError> {
    let Path(id) = id?;
    let Json(body) = body?;
    let by = caller.by();
    Ok(Json(answer(&s, id, body, by).await?))
}

/// Answers approval `id` as `body` says, on behalf of `by`: what the API's
/// handler and the web console's form both do.
pub(crate) async fn answer(
    s: &AppState,
    id: String,
    body: DecisionRequest,
    by: String,
) -> Result<DecisionResponse, ApiError> {
    let approved = body.approves().ok_or_else(|| {
        ApiError::bad_request(format!(
            "decision must be \"approve\" or \"deny\", not {:?}",
            body.decision
        ))
    })?;
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
    Ok(DecisionResponse {
        approval_id: id,
        decision: body.decision,
        remembered,
    })
}
