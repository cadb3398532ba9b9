//! `/console/tasks/{id}`: one task's transcript as a conversation. Each tool call
//! shows what the audit log says became of it (decision, rule, profile, approver,
//! exit, duration) and links to its kept output; the tasks it delegated to are
//! listed with links; a running task has a cancel button. Live: the conversation
//! is rendered again when one of the task's events arrives.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde_json::Value;

use super::Viewer;
use super::layout::{self, Nav, csrf_field};
use super::shown::{follow_url, json, line, text, url_part, usd};
use crate::agent::{TaskStatus, Transcript};
use crate::config::ConfigSource as _;
use crate::control::task_view::{self, Call, TaskView};
use crate::daemon::api::AppState;
use crate::llm::Role;

/// Characters of a tool result shown inline; the kept output has the rest.
const RESULT_CHARS: usize = 4000;

/// The task `id`'s transcript and view, or the page that says why not.
async fn load(s: &AppState, viewer: &Viewer, id: &str) -> Result<(Transcript, TaskView), Response> {
    let not_found = |what: String| layout::error(viewer, StatusCode::NOT_FOUND, &what, "/console/");
    if !crate::protocol::tree::is_task_id(id) || s.scheduler.registry.get(id).is_none() {
        return Err(not_found(format!("no task {:?}", line(id))));
    }
    let paths = s.config.current().paths.clone();
    let path = Transcript::path(&paths.transcripts, id);
    let t = match Transcript::read_async(path).await {
        Ok(t) if t.task_id == id => t,
        Ok(_) => {
            return Err(not_found(format!(
                "the transcript of {id} names another task"
            )));
        }
        Err(e) => {
            return Err(not_found(format!(
                "cannot read the transcript of {id}: {e}"
            )));
        }
    };
    let events = paths.events.clone();
    let built = tokio::task::spawn_blocking(move || {
        let view = task_view::build(&t, &events);
        (t, view)
    })
    .await;
    match built {
        Ok((t, Ok(view))) => Ok((t, view)),
        Ok((_, Err(e))) => Err(layout::error(
            viewer,
            StatusCode::INTERNAL_SERVER_ERROR,
            &e.to_string(),
            "/console/",
        )),
        Err(e) => Err(layout::error(
            viewer,
            StatusCode::INTERNAL_SERVER_ERROR,
            &e.to_string(),
            "/console/",
        )),
    }
}

/// `GET /console/tasks/{id}`.
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
) -> Response {
    let (t, view) = match load(&s, &viewer, &id).await {
        Ok(v) => v,
        Err(page) => return page,
    };
    // The registry knows the status now; the transcript, as of its last save.
    let live = s.scheduler.registry.get(&id);
    let status = live.as_ref().map_or(t.status, |l| l.status);
    let active = matches!(
        status,
        TaskStatus::Queued | TaskStatus::Running | TaskStatus::AwaitingApproval
    );
    let follow = follow_url(&format!("&task={}", url_part(&id)));
    let main = html! {
        h1 { "Task " code { (line(&id)) } }
        section id="task" data-live="task" data-follow=(follow) aria-live="polite" {
            (summary(&view, live.as_ref(), status))
            @if active {
                form method="post" action={"/console/tasks/" (url_part(&id)) "/cancel"} {
                    (csrf_field(&viewer))
                    button type="submit" class="danger" { "Cancel task" }
                }
            }
            @if !view.warnings.is_empty() {
                ul class="warnings" {
                    @for w in &view.warnings { li { (text(w)) } }
                }
            }
            h2 { "Conversation" }
            (conversation(&t, &view))
            @if let Some(a) = view.answer.as_deref().filter(|a| !a.is_empty()) {
                h2 { "Answer" }
                pre class="answer" { (text(a)) }
            }
            (children(&view))
        }
    };
    layout::page(&viewer, Nav::Tasks, &format!("Task {}", line(&id)), main).into_response()
}

/// The task's facts.
fn summary(v: &TaskView, live: Option<&crate::protocol::Task>, status: TaskStatus) -> Markup {
    let stop = live.and_then(|l| l.stop_reason.map(|r| r.as_str().to_string()));
    let stop = stop.or_else(|| v.stop_reason.clone());
    let (usage, cost) = live.map_or((v.usage, v.usd), |l| (l.usage, l.usd));
    html! {
        dl class="facts" {
            dt { "Status" } dd { span class={"state state-" (status.as_str())} { (status.as_str()) } @if let Some(r) = &stop { " (" (line(r)) ")" } }
            dt { "Model" } dd { (line(&v.model)) }
            dt { "Cost" } dd { (usd(cost)) }
            dt { "Tokens" } dd {
                (usage.input_tokens) " in, " (usage.output_tokens) " out, "
                (usage.cache_creation_input_tokens) " cache write, "
                (usage.cache_read_input_tokens) " cache read"
            }
            dt { "Created" } dd { (line(&v.created)) }
            @if let Some(d) = v.duration_ms { dt { "Duration" } dd { (d) " ms" } }
            @if let Some(by) = &v.submitted_by { dt { "Submitted by" } dd { (line(by)) } }
            @if let Some(p) = &v.parent_task_id {
                dt { "Parent" } dd { a href={"/console/tasks/" (url_part(p))} { (line(p)) } }
            }
            @if let Some(e) = &v.error { dt { "Error" } dd { pre class="error" { (text(e)) } } }
        }
    }
}

/// The messages in order: text, each tool call with its record, each result.
fn conversation(t: &Transcript, v: &TaskView) -> Markup {
    let calls: HashMap<&str, &Call> = v
        .calls
        .iter()
        .map(|c| (c.tool_use_id.as_str(), c))
        .collect();
    html! {
        ol class="conversation" {
            @for (n, m) in t.messages.iter().enumerate() {
                @let who = if m.role == Role::Assistant { "model" } else if n == 0 { "prompt" } else { "harnessd" };
                li class={"message from-" (who)} {
                    p class="who" { (who) }
                    @for b in &m.content { (block(&t.task_id, &b.0, &calls)) }
                }
            }
        }
    }
}

/// One content block.
pub(super) fn block(task: &str, b: &Value, calls: &HashMap<&str, &Call>) -> Markup {
    let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or_default();
    match s("type") {
        "text" => html! { pre class="text" { (text(s("text"))) } },
        "thinking" => html! {
            details class="thinking" { summary { "Thinking" } pre { (text(s("thinking"))) } }
        },
        "redacted_thinking" => html! { p class="note" { "(redacted thinking)" } },
        "tool_use" => {
            let id = s("id");
            let input = b.get("input").cloned().unwrap_or(Value::Null);
            call(task, id, s("name"), &input, calls.get(id).copied())
        }
        "tool_result" => result(task, s("tool_use_id"), b),
        other => html! { p class="note" { "A " (line(other)) " block: " code { (json(b)) } } },
    }
}

/// A tool call, with what the log says of it.
pub(super) fn call(task: &str, id: &str, tool: &str, input: &Value, rec: Option<&Call>) -> Markup {
    let dash = |v: Option<&String>| v.map_or_else(|| "-".to_string(), |s| line(s).into_owned());
    html! {
        article class="call" {
            h3 { "Tool call " code { (line(tool)) } " " span class="call-id" { (line(id)) } }
            pre class="input" { (crate::text::render_input(input, crate::text::DEFAULT_WIDTH)) }
            @if let Some(c) = rec {
                dl class="facts" {
                    dt { "Decision" } dd { (dash(c.tier.as_ref())) }
                    dt { "Rule" } dd { (dash(c.rule.as_ref())) }
                    dt { "Profile" } dd { (dash(c.profile.as_ref())) }
                    @if c.approval.is_some() {
                        dt { "Approval" } dd { (dash(c.approval.as_ref())) " by " (dash(c.approved_by.as_ref())) }
                    }
                    dt { "Exit" } dd {
                        @match &c.exit_code { Some(Value::Null) => "none", Some(v) => (json(v)), None => "-" }
                        @if c.is_error == Some(true) { " (error)" }
                        @if let Some(d) = c.duration_ms { ", " (d) " ms" }
                    }
                    @if c.output_file.is_some() {
                        dt { "Output" } dd {
                            a href={"/console/tasks/" (url_part(task)) "/output?call=" (url_part(id))} { "Full output" }
                        }
                    }
                    @if let Some(child) = &c.child {
                        dt { "Child task" } dd { a href={"/console/tasks/" (url_part(child))} { (line(child)) } }
                    }
                }
            }
        }
    }
}

/// A tool result as the model got it, cut past [`RESULT_CHARS`].
fn result(task: &str, id: &str, b: &Value) -> Markup {
    let content = match b.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                p.get("text")
                    .and_then(Value::as_str)
                    .map_or_else(|| p.to_string(), str::to_string)
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let shown: String = content.chars().take(RESULT_CHARS).collect();
    let cut = shown.len() < content.len();
    let error = b.get("is_error").and_then(Value::as_bool) == Some(true);
    html! {
        div class={"result" @if error { " is-error" }} {
            p class="who" { "Result of " span class="call-id" { (line(id)) } @if error { " (error)" } }
            pre { (text(&shown)) }
            @if cut {
                p { "Cut at " (RESULT_CHARS) " characters. "
                    a href={"/console/tasks/" (url_part(task)) "/output?call=" (url_part(id))} { "Full output" } }
            }
        }
    }
}

/// The tasks it delegated to, and theirs.
fn children(v: &TaskView) -> Markup {
    if v.children.is_empty() {
        return html! {};
    }
    html! {
        h2 { "Delegated tasks" }
        ul class="descendants" {
            @for c in &v.children {
                li class={"depth-" (c.depth.min(6))} {
                    a href={"/console/tasks/" (url_part(&c.task_id))} { (line(&c.task_id)) }
                    " " (c.status) @if let Some(r) = &c.stop_reason { " (" (line(r)) ")" }
                    ", " (c.tokens) " tokens, " (usd(c.usd))
                    " — " (line(c.prompt.as_deref().unwrap_or("-")))
                }
            }
        }
    }
}

/// `POST /console/tasks/{id}/cancel`: cancels as `console:<name>`, then back to
/// the task.
pub(super) async fn cancel(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
) -> Response {
    let back = format!("/console/tasks/{}", url_part(&id));
    match crate::daemon::api::tasks::cancel(&s, &id, viewer.by()).await {
        Ok(_) => layout::see_other(&back),
        Err(e) => layout::error(&viewer, e.status(), e.message(), &back),
    }
}
