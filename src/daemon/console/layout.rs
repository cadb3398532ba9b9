//! The frame of every page: the head (the CSRF token for the script, the one
//! stylesheet and script), a skip link, the navigation with the current page
//! marked, who is signed in, and the logout button.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::Viewer;

/// The pages in the navigation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Nav {
    Tasks,
    Approvals,
    Events,
    Policy,
    Audit,
}

const NAV: &[(Nav, &str, &str)] = &[
    (Nav::Tasks, "/console/", "Tasks"),
    (Nav::Approvals, "/console/approvals", "Approvals"),
    (Nav::Events, "/console/events", "Events"),
    (Nav::Policy, "/console/policy", "Policy"),
    (Nav::Audit, "/console/audit", "Audit"),
];

/// The hidden field that carries the session's CSRF token in a form.
pub(super) fn csrf_field(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(viewer.csrf); }
}

/// A whole page: `title` (already plain text), the section `current` of the
/// navigation, and `main`'s content.
pub(super) fn page(viewer: &Viewer, current: Nav, title: &str, main: Markup) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="csrf-token" content=(viewer.csrf);
                title { (title) " · harnessd" }
                link rel="stylesheet" href="/console/static/console.css";
                script src="/console/static/console.js" defer {}
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header {
                    nav aria-label="Console" {
                        span class="brand" { "harnessd" }
                        ul {
                            @for (nav, href, label) in NAV {
                                li {
                                    @if *nav == current {
                                        a href=(href) aria-current="page" { (label) }
                                    } @else {
                                        a href=(href) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    form class="logout" method="post" action="/console/logout" {
                        (csrf_field(viewer))
                        span { "Signed in as " strong { (super::shown::line(&viewer.name)) } }
                        " "
                        button type="submit" { "Log out" }
                    }
                }
                main id="main" tabindex="-1" { (main) }
            }
        }
    };
    Html(markup.into_string())
}

/// A page saying what went wrong, with `status`.
pub(super) fn error(viewer: &Viewer, status: StatusCode, message: &str, back: &str) -> Response {
    let main = html! {
        h1 { "Error " (status.as_u16()) }
        p class="error" role="alert" { (super::shown::text(message)) }
        p { a href=(back) { "Back" } }
    };
    (status, page(viewer, Nav::Tasks, "Error", main)).into_response()
}

/// A 303 to `to`: after a form's POST, the browser GETs the page again.
pub(super) fn see_other(to: &str) -> Response {
    axum::response::Redirect::to(to).into_response()
}
