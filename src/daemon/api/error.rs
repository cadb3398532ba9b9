//! The control API's one error type: every refusal is `{error: {type, message}}`
//! with a fitting status (docs/api.md), the extractors' rejections included, so
//! no handler answers in a shape of its own.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::protocol::{ErrorBody, ErrorDetail};

/// An API error.
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    /// 507: the audit log cannot take the line that must precede the action, so
    /// the action does not happen.
    pub(super) fn log_failing(message: impl Into<String>) -> ApiError {
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

    /// 404 for the `what` named `id`.
    pub(crate) fn not_found(what: &str, id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no {what} {id:?}"),
        )
    }

    /// 400 `invalid_request`.
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
}

impl ApiError {
    /// The status it answers with.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// What it says, for a page that shows it in its own shape.
    pub(crate) fn message(&self) -> &str {
        &self.message
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
