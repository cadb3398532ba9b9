//! The request body, read whole before any handler runs: within [`MAX_BODY`] and
//! [`BODY_TIMEOUT`], so no peer can hold a request (and its connection's slot)
//! open by promising more than it sends.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use super::ApiError;

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

/// Reads the whole body before any handler runs, within [`MAX_BODY`] and
/// [`BODY_TIMEOUT`]: a declared length over the limit is refused (413) — past
/// [`DRAIN_LIMIT`] before a byte of it is read — and a body that stops arriving is
/// dropped (408), so no peer can hold a request open by promising more than it
/// sends.
pub(super) async fn bounded_body(req: Request, next: Next) -> Response {
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
            ApiError::bad_request(format!("cannot read the request body: {e}")).into_response(),
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
