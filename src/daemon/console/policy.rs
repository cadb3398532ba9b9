//! `/console/policy`: the policy in force (settings.json as the daemon compiled
//! it, both files' digests), the last reload and the last rejection the log
//! records, and a `policy test` form: what policy would decide for a call, by the
//! same code as `harnessd policy test` (nothing runs).

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::Viewer;
use super::layout::{self, Nav};
use super::shown::{json, line, text};
use crate::config::{ConfigSource as _, Loaded};
use crate::daemon::api::AppState;
use crate::events::query::{self, Found, QueryParams};
use crate::tools::explain::{evaluate, input_from_arg};

/// The `policy test` form's fields.
#[derive(Deserialize)]
pub(super) struct Params {
    tool: Option<String>,
    input: Option<String>,
}

/// `GET /console/policy`.
pub(super) async fn page(
    State(s): State<AppState>,
    Extension(viewer): Extension<Viewer>,
    Query(p): Query<Params>,
) -> Response {
    let loaded = s.config.current();
    let live = loaded.paths.events.clone();
    let reloads = tokio::task::spawn_blocking(move || {
        ["config_loaded", "config_rejected"].map(|kind| last_of(&live, kind))
    })
    .await
    .unwrap_or([None, None]);
    let tool = p.tool.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let input = p.input.clone().unwrap_or_default();
    let tested = tool.map(|tool| evaluate(&loaded, tool, &input_from_arg(tool, &input)));
    let settings = serde_json::to_string_pretty(&loaded.policy.settings).unwrap_or_default();
    let main = html! {
        h1 { "Policy" }
        h2 { "Test a call" }
        form class="policy-test" method="get" action="/console/policy" {
            label for="p-tool" { "Tool" }
            input id="p-tool" name="tool" required placeholder="run_bash" value=(tool.unwrap_or_default());
            label for="p-input" { "Input (a JSON object, or the tool's main argument)" }
            textarea id="p-input" name="input" rows="3" { (input) }
            button type="submit" { "Test" }
        }
        @if let Some(r) = &tested { (decision(r)) }
        h2 { "Last reload" }
        (reload_records(&reloads))
        h2 { "Files in force" }
        (files(&loaded))
        h2 { "Settings in force" }
        pre class="settings" tabindex="0" { (text(&settings)) }
    };
    layout::page(&viewer, Nav::Policy, "Policy", main).into_response()
}

/// The last line of type `kind` in the log, parsed.
fn last_of(live: &std::path::Path, kind: &str) -> Option<Value> {
    let q = query::Query::new(QueryParams {
        kind: Some(kind.to_string()),
        ..QueryParams::default()
    })
    .ok()?;
    query::run(live, q)
        .ok()?
        .filter_map(|f| match f {
            Found::Line(_, ev) => Some(ev),
            Found::Unreadable { .. } => None,
        })
        .last()
}

/// What policy would decide, field by field.
fn decision(r: &Result<Value, String>) -> Markup {
    match r {
        Err(e) => html! { p class="error" role="alert" { (text(e)) } },
        Ok(v) => html! {
            section class="decision" aria-label="Decision" {
                dl class="facts" {
                    @for (k, v) in v.as_object().into_iter().flatten() {
                        dt { (line(k)) }
                        dd { @match v { Value::String(s) => (line(s)), other => (json(other)) } }
                    }
                }
            }
        },
    }
}

/// The last `config_loaded` and `config_rejected` lines, newest first.
fn reload_records(r: &[Option<Value>; 2]) -> Markup {
    let seq = |v: &Option<Value>| v.as_ref().and_then(|v| v["seq"].as_u64()).unwrap_or(0);
    let rejected_last = seq(&r[1]) > seq(&r[0]);
    html! {
        @if r[0].is_none() && r[1].is_none() { p { "The log records no load." } }
        @if rejected_last {
            p class="error" role="alert" { "The last change was rejected; the policy before it stays in force." }
        }
        @for (label, v) in [("Loaded", &r[0]), ("Rejected", &r[1])] {
            @if let Some(v) = v {
                h3 { (label) }
                dl class="facts" {
                    @for k in ["ts", "file", "trigger", "sha256", "by", "error", "changes", "restart_needed"] {
                        @if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
                            dt { (k) }
                            dd { @match x {
                                Value::String(s) => pre { (text(s)) },
                                Value::Array(items) if items.is_empty() => "none",
                                Value::Array(items) => ul { @for i in items { li { @match i { Value::String(s) => (line(s)), o => (json(o)) } } } },
                                other => (json(other)),
                            } }
                        }
                    }
                }
            }
        }
    }
}

/// Both files, by path and digest.
fn files(loaded: &Loaded) -> Markup {
    html! {
        dl class="facts" {
            dt { (line(&loaded.paths.display(&loaded.paths.config))) }
            dd { "sha256 " code { (line(&loaded.config_sha256)) } }
            dt { (line(&loaded.paths.display(&loaded.paths.settings))) }
            dd { "sha256 " code { (line(&loaded.settings_sha256)) } }
        }
    }
}
