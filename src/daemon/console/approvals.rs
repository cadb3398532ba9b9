//! `/console/approvals`: every pending call with its whole input (every character,
//! escaped as the terminal's `approvals` shows it), and the forms that answer it:
//! approve, approve and remember, deny with a reason for the model. An answer goes
//! through the same code as `POST /v1/approvals/{id}`, as `console:<name>`.

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use maud::{Markup, html};
use serde::Deserialize;

use super::Viewer;
use super::layout::{self, Nav, csrf_field};
use super::shown::{follow_url, line, url_part};
use crate::daemon::api::AppState;
use crate::protocol::{Approval, DecisionRequest};

/// What the page says after an answer.
#[derive(Deserialize)]
pub(super) struct Params {
    answered: Option<String>,
    decision: Option<String>,
}

/// `GET /console/approvals`.
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Query(p): Query<Params>,
) -> Response {
    let pending = s.approvals.list();
    let main = html! {
        h1 { "Approvals" }
        @if let (Some(id), Some(d)) = (&p.answered, &p.decision) {
            p class="notice" role="status" { "Approval " code { (line(id)) } ": " (line(d)) "." }
        }
        section id="approvals" data-live="approvals" data-follow=(follow_url("")) aria-live="polite" {
            @if pending.is_empty() {
                p { "No call is waiting for approval." }
            }
            @for a in &pending { (approval(&viewer, a)) }
        }
    };
    layout::page(&viewer, Nav::Approvals, "Approvals", main).into_response()
}

/// One pending call and its forms.
pub(super) fn approval(viewer: &Viewer, a: &Approval) -> Markup {
    let r = &a.request;
    let action = format!("/console/approvals/{}", url_part(&r.approval_id));
    let reason_id = format!("reason-{}", url_part(&r.approval_id));
    html! {
        article class="approval" id={"approval-" (url_part(&r.approval_id))} {
            h2 { code { (line(&r.tool)) } " in task "
                a href={"/console/tasks/" (url_part(&r.task_id))} { (line(&r.task_id)) } }
            dl class="facts" {
                dt { "Approval" } dd { (line(&r.approval_id)) }
                dt { "Call" } dd { (line(&r.tool_use_id)) }
                dt { "Rule" } dd { (line(&r.rule)) }
                dt { "Asked at" } dd { (line(&a.requested_at)) }
                @if let Some(p) = &r.parent_task_id {
                    dt { "Parent task" } dd { a href={"/console/tasks/" (url_part(p))} { (line(p)) } }
                }
            }
            h3 { "Input" }
            pre class="input" tabindex="0" { (crate::text::render_input(&r.input, crate::text::DEFAULT_WIDTH)) }
            div class="answers" {
                form method="post" action=(action) {
                    (csrf_field(viewer))
                    input type="hidden" name="decision" value="approve";
                    button type="submit" class="approve" { "Approve" }
                    " "
                    button type="submit" name="remember" value="true" { "Approve and remember" }
                }
                form method="post" action=(action) {
                    (csrf_field(viewer))
                    input type="hidden" name="decision" value="deny";
                    label for=(reason_id) { "Reason (sent to the model)" }
                    textarea id=(reason_id) name="reason" rows="2" {}
                    button type="submit" class="danger" { "Deny" }
                }
            }
        }
    }
}

/// The fields of an answer's form (`csrf` is checked before this runs).
#[derive(Deserialize)]
pub(super) struct AnswerForm {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    remember: Option<String>,
}

/// `POST /console/approvals/{id}`: answers as `console:<name>`, then back to the
/// list.
pub(super) async fn answer(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    form: Result<Form<AnswerForm>, FormRejection>,
) -> Response {
    let back = "/console/approvals";
    let Form(f) = match form {
        Ok(f) => f,
        Err(e) => return layout::error(&viewer, StatusCode::BAD_REQUEST, &e.body_text(), back),
    };
    let body = DecisionRequest {
        decision: f.decision,
        reason: f.reason.filter(|r| !r.trim().is_empty()),
        remember: f
            .remember
            .is_some_and(|r| r == "true" || r == "1" || r == "on"),
    };
    match crate::daemon::api::approvals::answer(&s, id, body, viewer.by()).await {
        Ok(done) => {
            let word = if done.decision == DecisionRequest::APPROVE {
                "approved"
            } else {
                "denied"
            };
            let decision = match &done.remembered {
                Some(rules) if !rules.is_empty() => {
                    format!("{word}, remembered {}", rules.join(", "))
                }
                _ => word.to_string(),
            };
            layout::see_other(&format!(
                "{back}?answered={}&decision={}",
                url_part(&done.approval_id),
                url_part(&decision)
            ))
        }
        Err(e) => layout::error(&viewer, e.status(), e.message(), back),
    }
}
