//! `/console/`: the tasks, newest first, a page at a time from the registry's
//! index (never from the transcripts: the daemon may hold tens of thousands), each
//! child nested under its parent when both are on the page. Live: the list is
//! rendered again when an event arrives.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::Viewer;
use super::layout::{self, Nav};
use super::shown::{follow_url, line, url_part, usd};
use crate::agent::TaskStatus;
use crate::daemon::api::AppState;
use crate::daemon::registry::{Cursor, ListQuery};
use crate::protocol::Task;

/// Tasks on one page.
const PAGE: usize = 50;

/// The query: an older page, one status.
#[derive(Deserialize)]
pub(super) struct Params {
    before: Option<String>,
    status: Option<String>,
}

/// The statuses a listing can be narrowed to.
const STATUSES: &[&str] = &[
    "queued",
    "running",
    "awaiting_approval",
    "finished",
    "interrupted",
];

/// `GET /console/`.
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Query(p): Query<Params>,
) -> Response {
    let status = match p.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(st) => match serde_json::from_value::<TaskStatus>(st.into()) {
            Ok(st) => Some(st),
            Err(_) => {
                let msg = format!("status: unknown status {:?}", line(st));
                return layout::error(&viewer, StatusCode::BAD_REQUEST, &msg, "/console/");
            }
        },
    };
    let query = ListQuery {
        status,
        limit: PAGE,
        before: p.before.clone().filter(|b| !b.is_empty()).map(cursor),
    };
    let page = match s.scheduler.registry.page(&query) {
        Ok(page) => page,
        Err(e) => {
            return layout::error(
                &viewer,
                StatusCode::BAD_REQUEST,
                &e.to_string(),
                "/console/",
            );
        }
    };
    let waiting = s.approvals.list().len();
    let status_q = p.status.as_deref().filter(|s| !s.is_empty());
    let next = page.next.as_deref().map(|n| {
        let mut href = format!("/console/?before={}", url_part(n));
        if let Some(st) = status_q {
            href.push_str(&format!("&status={}", url_part(st)));
        }
        href
    });
    let main = html! {
        h1 { "Tasks" }
        form class="filters" method="get" action="/console/" {
            label for="status" { "Status" }
            select id="status" name="status" {
                option value="" { "any" }
                @for st in STATUSES {
                    option value=(st) selected[status_q == Some(*st)] { (st) }
                }
            }
            button type="submit" { "Show" }
        }
        section id="tasks" data-live="tasks" data-follow=(follow_url("")) aria-live="polite" {
            @if waiting > 0 {
                p class="notice" {
                    a href="/console/approvals" {
                        (waiting) @if waiting == 1 { " call is" } @else { " calls are" } " waiting for approval"
                    }
                }
            }
            (list(&page.tasks))
            nav class="pages" aria-label="Pages" {
                @if p.before.as_deref().is_some_and(|b| !b.is_empty()) {
                    a href="/console/" { "Newest" }
                    " "
                }
                @if let Some(href) = &next {
                    a href=(href) rel="next" { "Older tasks" }
                }
            }
        }
    };
    layout::page(&viewer, Nav::Tasks, "Tasks", main).into_response()
}

/// A `before` value: an RFC 3339 time in the registry's own form, else a task id
/// (as `GET /v1/tasks` reads it).
fn cursor(b: String) -> Cursor {
    match chrono::DateTime::parse_from_rfc3339(&b) {
        Ok(t) => Cursor::Time(
            t.to_utc()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ),
        Err(_) => Cursor::Task(b),
    }
}

/// The page's tasks: those whose parent is not on the page at the top, each
/// task's children (oldest first) nested in it.
pub(super) fn list(tasks: &[Task]) -> Markup {
    if tasks.is_empty() {
        return html! { p { "No tasks." } };
    }
    let on_page: HashMap<&str, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.task_id.as_str(), i))
        .collect();
    let mut children: HashMap<&str, Vec<&Task>> = HashMap::new();
    let mut top = Vec::new();
    for t in tasks {
        match t
            .parent_task_id
            .as_deref()
            .filter(|p| on_page.contains_key(p))
        {
            Some(parent) => children.entry(parent).or_default().push(t),
            None => top.push(t),
        }
    }
    for kids in children.values_mut() {
        kids.reverse();
    }
    html! {
        ol class="tasks" {
            @for t in top { (item(t, &children)) }
        }
    }
}

/// One task and, nested, its children on the page.
fn item(t: &Task, children: &HashMap<&str, Vec<&Task>>) -> Markup {
    let href = format!("/console/tasks/{}", url_part(&t.task_id));
    let state = match t.stop_reason {
        Some(r) => format!("{} ({})", t.status.as_str(), r.as_str()),
        None => t.status.as_str().to_string(),
    };
    html! {
        li class="task" {
            div class="task-head" {
                a class="task-id" href=(href) { (line(&t.task_id)) }
                " "
                span class={"state state-" (t.status.as_str())} { (state) }
                " "
                span class="cost" { (usd(t.usd)) ", " (t.usage.total()) " tokens" }
                " "
                time datetime=(t.created) { (line(&t.created)) }
            }
            p class="prompt" { (line(t.prompt.as_deref().unwrap_or("(prompt not known)"))) }
            @if let Some(parent) = &t.parent_task_id {
                @if !children.values().any(|k| k.iter().any(|c| c.task_id == t.task_id)) {
                    p class="parent" {
                        "Child of "
                        a href={"/console/tasks/" (url_part(parent))} { (line(parent)) }
                    }
                }
            }
            @if let Some(kids) = children.get(t.task_id.as_str()) {
                ol class="tasks children" aria-label="Delegated tasks" {
                    @for c in kids { (item(c, children)) }
                }
            }
        }
    }
}
