//! `/console/events`: the audit log's last lines matching the filters (the same
//! query as `GET /v1/events` and `harnessd events`), each escaped as JSON text,
//! and with `follow` the section rendered again as new lines are written.

use std::collections::VecDeque;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::Viewer;
use super::layout::{self, Nav};
use super::shown::{follow_url, line, url_part};
use crate::config::ConfigSource as _;
use crate::daemon::api::AppState;
use crate::events::query::{self, Found, QueryParams};

/// Lines shown: the last ones that match.
const SHOWN: usize = 200;

/// The filters, as text (an empty field is no filter).
#[derive(Deserialize, Default)]
pub(super) struct Params {
    #[serde(rename = "type")]
    kind: Option<String>,
    task: Option<String>,
    since: Option<String>,
    grep: Option<String>,
    follow: Option<String>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// One line as found: parsed, or why it could not be.
enum Shown {
    Line(Value, String),
    Unreadable(String),
}

/// `GET /console/events`.
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Query(p): Query<Params>,
) -> Response {
    let params = QueryParams {
        task: given(&p.task),
        kind: given(&p.kind),
        since: given(&p.since),
        grep: given(&p.grep),
        ..QueryParams::default()
    };
    let q = match query::Query::new(params) {
        Ok(q) => q,
        Err(e) => {
            return layout::error(
                &viewer,
                StatusCode::BAD_REQUEST,
                &e.to_string(),
                "/console/events",
            );
        }
    };
    let live = s.config.current().paths.events.clone();
    let found = tokio::task::spawn_blocking(move || last_lines(&live, q)).await;
    let lines = match found {
        Ok(Ok(lines)) => lines,
        Ok(Err(e)) => {
            return layout::error(
                &viewer,
                StatusCode::INTERNAL_SERVER_ERROR,
                &e.to_string(),
                "/console/events",
            );
        }
        Err(e) => {
            return layout::error(
                &viewer,
                StatusCode::INTERNAL_SERVER_ERROR,
                &e.to_string(),
                "/console/events",
            );
        }
    };
    let follow = p.follow.as_deref().is_some_and(|f| f == "1" || f == "on");
    let mut extra = String::new();
    for (k, v) in [("task", given(&p.task)), ("type", given(&p.kind))] {
        if let Some(v) = v {
            extra.push_str(&format!("&{k}={}", url_part(&v)));
        }
    }
    let stream = follow_url(&extra);
    let main = html! {
        h1 { "Events" }
        (filters(&p, follow))
        @if follow {
            section id="events" data-live="events" data-follow=(stream) aria-live="polite" { (table(&lines)) }
        } @else {
            section id="events" { (table(&lines)) }
        }
    };
    layout::page(&viewer, Nav::Events, "Events", main).into_response()
}

/// The filter form (a GET: the filters are in the URL, so a view can be shared).
fn filters(p: &Params, follow: bool) -> Markup {
    let types = crate::events::event_types();
    let kind = given(&p.kind);
    html! {
        form class="filters" method="get" action="/console/events" {
            span class="field" {
                label for="f-type" { "Type" }
                select id="f-type" name="type" {
                    option value="" { "any" }
                    @for t in &types { option value=(t) selected[kind.as_deref() == Some(t.as_str())] { (t) } }
                }
            }
            span class="field" {
                label for="f-task" { "Task" }
                input id="f-task" name="task" value=(p.task.as_deref().unwrap_or_default());
            }
            span class="field" {
                label for="f-since" { "Since" }
                input id="f-since" name="since" placeholder="1h, 2026-01-31 or RFC 3339" value=(p.since.as_deref().unwrap_or_default());
            }
            span class="field" {
                label for="f-grep" { "Matching" }
                input id="f-grep" name="grep" placeholder="regular expression" value=(p.grep.as_deref().unwrap_or_default());
            }
            label class="check" { input type="checkbox" name="follow" value="1" checked[follow]; " Follow" }
            button type="submit" { "Show" }
        }
    }
}

/// The last [`SHOWN`] lines matching `q`, streamed: memory holds those only.
fn last_lines(live: &std::path::Path, q: query::Query) -> std::io::Result<VecDeque<Shown>> {
    let mut last = VecDeque::with_capacity(SHOWN);
    for f in query::run(live, q)? {
        let item = match f {
            Found::Line(bytes, ev) => Shown::Line(ev, String::from_utf8_lossy(&bytes).into_owned()),
            Found::Unreadable { path, line, error } => {
                Shown::Unreadable(format!("{}:{line}: {error}", path.display()))
            }
        };
        if last.len() == SHOWN {
            last.pop_front();
        }
        last.push_back(item);
    }
    Ok(last)
}

fn table(lines: &VecDeque<Shown>) -> Markup {
    if lines.is_empty() {
        return html! { p { "No matching events." } };
    }
    html! {
        p { "The last " (lines.len()) " matching lines, oldest first." }
        ol class="events" {
            @for l in lines {
                @match l {
                    Shown::Line(ev, text) => {
                        @let f = |k: &str| ev.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                        li {
                            span class="seq" { (ev.get("seq").and_then(Value::as_u64).unwrap_or(0)) } " "
                            time { (line(&f("ts"))) } " "
                            strong { (line(&f("type"))) } " "
                            @let task = f("task_id");
                            @if !task.is_empty() {
                                a href={"/console/tasks/" (url_part(&task))} { (line(&task)) }
                            }
                            pre { (crate::text::escape_json(text)) }
                        }
                    }
                    Shown::Unreadable(what) => li class="error" { "Unreadable line: " (line(what)) }
                }
            }
        }
    }
}
