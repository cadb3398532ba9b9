//! Console logins (docs/console.md): one-time links made by `harnessd console-url`,
//! exchanged once for a session cookie, and the session's CSRF token.
//!
//! Only hashes of the secrets are kept: a link's token and a session's cookie are
//! looked up by their sha256, so a dump of the daemon's memory or a log line never
//! holds one that works. Everything lives in the daemon's memory: a restart logs
//! every console out (and voids the links not yet used).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use thiserror::Error;

use super::api::{ApiError, AppState, Caller, MAX_BODY};
use super::console::Viewer;
use crate::config::ConfigSource;
use crate::events::{Event, EventError, EventLog};
use crate::protocol::hash::sha256_hex;
use crate::protocol::{LinkRequest, LinkResponse};

/// How long a link from `console-url` may wait for its first use, at most.
pub const LINK_LIFETIME: Duration = Duration::from_secs(10 * 60);

/// Links made and not yet used, at most: past it, the oldest is dropped, so a
/// script calling `console-url` in a loop cannot grow the daemon.
const MAX_LINKS: usize = 64;

/// Sessions open at once, at most: past it, a login is refused until one ends.
const MAX_SESSIONS: usize = 1024;

/// The name of the session cookie.
pub const COOKIE: &str = "harnessd_session";

/// Where a link from `console-url` points.
pub const LOGIN_PATH: &str = "/console/login";

/// Where the console's logout form posts.
pub const LOGOUT_PATH: &str = "/console/logout";

/// The header a script sends the CSRF token in; a form sends it as the field
/// `csrf`.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The longest name `console-url --name` takes.
const MAX_NAME: usize = 64;

/// Why a login or a logout did not happen.
#[derive(Debug, Error)]
pub enum LoginError {
    /// The link's token is unknown, used, or past its lifetime.
    #[error(
        "this login link is unknown, was used already, or expired (links last {} minutes \
         and work once); run `harnessd console-url` on the host for a new one",
        LINK_LIFETIME.as_secs() / 60
    )]
    BadLink,
    /// Every session slot is taken.
    #[error(
        "{MAX_SESSIONS} console sessions are open, the most the daemon keeps; log out of \
         one (or wait for one to expire) and try again"
    )]
    Full,
    /// The record that must precede the login could not be written.
    #[error("cannot record the login in the audit log: {0}")]
    Log(#[from] EventError),
    /// The system's random source failed.
    #[error("cannot make a session secret: {0}")]
    Random(String),
}

/// A link made and not yet used.
struct Link {
    name: String,
    expires: SystemTime,
}

/// An open session.
struct Session {
    name: String,
    csrf: String,
    expires: SystemTime,
}

/// What a cookie names.
pub enum Lookup {
    /// A session in force.
    Valid(Viewer),
    /// A session past its end: it is closed now (`console_logout` recorded).
    Expired,
    /// No session: never made, logged out, or from before a restart.
    Unknown,
}

/// A session just made: the cookie to set and how long it lasts.
pub struct Opened {
    /// The cookie's value (the only copy of the secret).
    pub cookie: String,
    /// Seconds until it expires.
    pub max_age: u64,
}

#[derive(Default)]
struct Store {
    /// By sha256 of the token.
    links: HashMap<String, Link>,
    /// By sha256 of the cookie.
    sessions: HashMap<String, Session>,
}

/// The daemon's console logins; cheap to clone.
#[derive(Clone)]
pub struct Logins {
    store: Arc<Mutex<Store>>,
    events: EventLog,
}

/// A new secret: 32 bytes from the system's random source, as hex.
fn secret() -> Result<String, LoginError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| LoginError::Random(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// How a session is named in the log: the start of its cookie's hash, enough to
/// tell sessions apart, useless for making a cookie.
fn session_label(hash: &str) -> String {
    hash[..16].to_string()
}

/// Whether `a` and `b` are equal, in time that does not depend on where they
/// differ (a CSRF token is compared with what the request sent).
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Logins {
    /// No links, no sessions; logins and logouts are recorded in `events`.
    pub fn new(events: EventLog) -> Logins {
        Logins {
            store: Arc::default(),
            events,
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A one-time link's token for `name`, valid for [`LINK_LIFETIME`] or the
    /// session length `session`, whichever is shorter.
    pub fn link(&self, name: &str, session: Duration) -> Result<(String, SystemTime), LoginError> {
        let token = secret()?;
        let expires = SystemTime::now() + LINK_LIFETIME.min(session);
        let mut store = self.store();
        let now = SystemTime::now();
        store.links.retain(|_, l| l.expires > now);
        if store.links.len() >= MAX_LINKS
            && let Some(oldest) = store
                .links
                .iter()
                .min_by_key(|(_, l)| l.expires)
                .map(|(h, _)| h.clone())
        {
            store.links.remove(&oldest);
        }
        store.links.insert(
            sha256_hex(token.as_bytes()),
            Link {
                name: name.to_string(),
                expires,
            },
        );
        Ok((token, expires))
    }

    /// Exchanges a link's token for a session of `hours`: the link is used up
    /// whatever happens next; `console_login` is recorded before the session
    /// exists.
    pub async fn redeem(&self, token: &str, session: Duration) -> Result<Opened, LoginError> {
        let link = {
            let mut store = self.store();
            store.links.remove(&sha256_hex(token.as_bytes()))
        };
        let link = link
            .filter(|l| l.expires > SystemTime::now())
            .ok_or(LoginError::BadLink)?;
        if self.store().sessions.len() >= MAX_SESSIONS {
            self.sweep().await;
            if self.store().sessions.len() >= MAX_SESSIONS {
                return Err(LoginError::Full);
            }
        }
        let cookie = secret()?;
        let csrf = secret()?;
        let hash = sha256_hex(cookie.as_bytes());
        let max_age = session.as_secs().max(1);
        self.events
            .record(
                None,
                Event::ConsoleLogin {
                    name: link.name.clone(),
                    session: session_label(&hash),
                    by: format!("console:{}", link.name),
                },
            )
            .await?;
        self.store().sessions.insert(
            hash,
            Session {
                name: link.name,
                csrf,
                expires: SystemTime::now() + session,
            },
        );
        Ok(Opened { cookie, max_age })
    }

    /// The session `cookie` names; one found past its end is closed and
    /// recorded as expired.
    pub async fn lookup(&self, cookie: &str) -> Lookup {
        let hash = sha256_hex(cookie.as_bytes());
        let expired = {
            let mut store = self.store();
            match store.sessions.get(&hash) {
                None => return Lookup::Unknown,
                Some(s) if s.expires > SystemTime::now() => {
                    return Lookup::Valid(Viewer {
                        name: s.name.clone(),
                        csrf: s.csrf.clone(),
                    });
                }
                Some(_) => store.sessions.remove(&hash),
            }
        };
        if let Some(s) = expired {
            self.record_logout(&hash, s.name, "expired").await;
        }
        Lookup::Expired
    }

    /// The first session in force among `cookies`; [`Lookup::Expired`] when none
    /// is but one was found past its end.
    pub async fn lookup_any(&self, cookies: &[String]) -> Lookup {
        let mut expired = false;
        for cookie in cookies {
            match self.lookup(cookie).await {
                Lookup::Valid(viewer) => return Lookup::Valid(viewer),
                Lookup::Expired => expired = true,
                Lookup::Unknown => {}
            }
        }
        if expired {
            Lookup::Expired
        } else {
            Lookup::Unknown
        }
    }

    /// Ends the session `cookie` names (`console_logout` with reason `logout`);
    /// whether there was one.
    pub async fn logout(&self, cookie: &str) -> bool {
        let hash = sha256_hex(cookie.as_bytes());
        let Some(s) = self.store().sessions.remove(&hash) else {
            return false;
        };
        self.record_logout(&hash, s.name, "logout").await;
        true
    }

    /// Closes every session past its end, recording each.
    pub async fn sweep(&self) {
        let now = SystemTime::now();
        let ended: Vec<(String, Session)> = {
            let mut store = self.store();
            store.links.retain(|_, l| l.expires > now);
            let hashes: Vec<String> = store
                .sessions
                .iter()
                .filter(|(_, s)| s.expires <= now)
                .map(|(h, _)| h.clone())
                .collect();
            hashes
                .into_iter()
                .filter_map(|h| store.sessions.remove(&h).map(|s| (h, s)))
                .collect()
        };
        for (hash, s) in ended {
            self.record_logout(&hash, s.name, "expired").await;
        }
    }

    /// Records a session's end. The session is gone whether or not the line is
    /// written: failing to record a logout must not keep a login open.
    async fn record_logout(&self, hash: &str, name: String, reason: &str) {
        let event = Event::ConsoleLogout {
            session: session_label(hash),
            by: format!("console:{name}"),
            name,
            reason: reason.to_string(),
        };
        if let Err(e) = self.events.record(None, event).await {
            tracing::error!(
                "console: a session ended but its console_logout was not recorded: {e}"
            );
        }
    }

    /// Closes expired sessions every minute until `stop` is cancelled, so an
    /// expiry is on the record even when nobody comes back.
    pub async fn sweep_every_minute(self, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = tick.tick() => self.sweep().await,
                () = stop.cancelled() => return,
            }
        }
    }
}

/// A name `console-url --name` may give: it goes into every `by` of the session.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > MAX_NAME {
        return Err(format!("a console name is 1 to {MAX_NAME} characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@')))
    {
        return Err(format!(
            "a console name is made of letters, digits and . _ - @; {:?} is not one",
            crate::text::escape_line(&c.to_string())
        ));
    }
    Ok(())
}

/// Makes a one-time login link. Only a command-line client on the socket may: a
/// console session cannot mint more of itself.
pub(super) async fn make_link(
    State(s): State<AppState>,
    caller: axum::Extension<Caller>,
    body: Result<Json<LinkRequest>, JsonRejection>,
) -> Result<Json<LinkResponse>, ApiError> {
    if let Caller::Console(_) = caller.0 {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "console links are made on the host, with `harnessd console-url`",
        ));
    }
    let Json(body) = body?;
    check_name(&body.name).map_err(ApiError::bad_request)?;
    let (token, expires) = s
        .logins
        .link(&body.name, session_length(&s))
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    let path = format!("{LOGIN_PATH}?token={token}");
    let url = s
        .config
        .current()
        .config
        .daemon
        .console_base()
        .map(|base| format!("{base}{path}"));
    Ok(Json(LinkResponse {
        path,
        url,
        expires_at: chrono::DateTime::<chrono::Utc>::from(expires)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }))
}

/// `GET /v1/console/session`: the session's name and CSRF token, for a script of
/// the console's own pages (a page of another origin is refused before this, and
/// could not read the answer).
pub(super) async fn session(
    caller: axum::Extension<Caller>,
) -> Result<Json<SessionView>, ApiError> {
    match caller.0 {
        Caller::Console(viewer) => Ok(Json(SessionView {
            name: viewer.name,
            csrf: viewer.csrf,
        })),
        Caller::Peer(_) => Err(ApiError::not_found("console session of", "this client")),
    }
}

/// `GET /v1/console/session`'s answer.
#[derive(Debug, serde::Serialize)]
pub struct SessionView {
    /// The name given to `console-url --name`.
    pub name: String,
    /// The token every state-changing request sends back.
    pub csrf: String,
}

/// `GET /console/login`'s query.
#[derive(Debug, Deserialize)]
pub(super) struct LoginQuery {
    token: Option<String>,
}

/// Exchanges a link's token for a session: the cookie is set and the browser sent
/// on to the console (303, so a reload does not use the link again).
pub(super) async fn login(
    State(s): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<LoginQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let token = query.ok().and_then(|Query(q)| q.token).unwrap_or_default();
    let opened = match s.logins.redeem(&token, session_length(&s)).await {
        Ok(opened) => opened,
        Err(e @ LoginError::BadLink) => return unauthorized(LOGIN_PATH, &e.to_string()),
        Err(e @ LoginError::Full) => {
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Too many sessions",
                &e.to_string(),
            );
        }
        Err(e) => {
            return page(
                StatusCode::INSUFFICIENT_STORAGE,
                "Login failed",
                &e.to_string(),
            );
        }
    };
    let secure = secure_cookie(&s, &headers);
    let cookie = format!(
        "{COOKIE}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
        opened.cookie,
        opened.max_age,
        if secure { "; Secure" } else { "" }
    );
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/console/")]).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    no_store(&mut response);
    response
}

/// Ends the session; the cookie is cleared either way.
pub(super) async fn logout(State(s): State<AppState>, headers: HeaderMap) -> Response {
    for cookie in session_cookies(&headers) {
        s.logins.logout(&cookie).await;
    }
    let mut response = page(
        StatusCode::OK,
        "Logged out",
        "You are logged out. Run `harnessd console-url` on the host to log in again.",
    );
    let clear = format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
    if let Ok(v) = HeaderValue::from_str(&clear) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

/// `daemon.console_session_hours`, validated finite and positive at load.
fn session_length(s: &AppState) -> Duration {
    let hours = s.config.current().config.daemon.console_session_hours;
    Duration::try_from_secs_f64(hours * 3600.0).unwrap_or(Duration::from_secs(12 * 3600))
}

/// Whether the cookie must be `Secure`: the daemon is behind TLS, as a public
/// listener must be, or the proxy in front says the browser used https.
fn secure_cookie(s: &AppState, headers: &HeaderMap) -> bool {
    let daemon = &s.config.current().config.daemon;
    daemon.listen_public
        || daemon
            .console_origin
            .as_deref()
            .is_some_and(|o| o.starts_with("https://"))
        || headers
            .get("x-forwarded-proto")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

/// Session cookies looked at in one request, at most: each is hashed.
const MAX_COOKIES: usize = 16;

/// The session cookies a request carries, in its order. There may be more than
/// one: cookies are not kept apart by port, so a page on another port of the
/// same host can set one (with a longer `Path`, which the browser sends first);
/// taking only the first would let it lock the operator out.
pub fn session_cookies(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
        .take(MAX_COOKIES)
        .collect()
}

/// Refuses a state-changing request of a console session (403) unless it sends
/// the session's CSRF token, in the `x-csrf-token` header or a form's `csrf`
/// field. Runs before every handler, so a refused request changes nothing;
/// command-line clients (no session) are not asked.
pub(super) async fn csrf(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let Some(viewer) = req.extensions().get::<Viewer>().cloned() else {
        return next.run(req).await;
    };
    if let Some(sent) = req.headers().get(CSRF_HEADER) {
        return if sent.to_str().is_ok_and(|t| same_secret(t, &viewer.csrf)) {
            next.run(req).await
        } else {
            csrf_refused()
        };
    }
    let form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return csrf_refused();
    }
    let (parts, body) = req.into_parts();
    // Already whole and bounded (the body layer runs first).
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return csrf_refused();
    };
    let sent = form_urlencoded::parse(&bytes)
        .filter(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned())
        .collect::<Vec<_>>();
    match sent.as_slice() {
        [one] if same_secret(one, &viewer.csrf) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        _ => csrf_refused(),
    }
}

fn csrf_refused() -> Response {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "csrf",
        "this request changes state and does not carry the session's CSRF token; send \
         it from the console's own page (reload the page if it is old)",
    )
    .into_response()
}

/// 401: for the console's pages a page that says how to log in, for the API the
/// usual error body.
pub fn unauthorized(path: &str, why: &str) -> Response {
    if path == "/console" || path.starts_with("/console/") {
        return page(StatusCode::UNAUTHORIZED, "Log in", why);
    }
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why).into_response()
}

/// The answer to a link followed from another site: a page that loads the same
/// path and query again from this origin (a meta refresh, which a strict CSP
/// allows, and a link for the keyboard). The address is the request's own,
/// escaped for the attribute; only a console page's path reaches here.
pub fn bounce(req: &Request) -> Response {
    let target = req
        .uri()
        .path_and_query()
        .map_or("/console/", |p| p.as_str());
    let t = html_escape(target);
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0; url={t}\">\
         <title>harnessd · opening the console</title></head><body><main>\
         <p><a href=\"{t}\">Open the console page</a></p></main></body></html>"
    );
    let mut response = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
            ),
        ],
        html,
    )
        .into_response();
    no_store(&mut response);
    response
}

/// A page of a title and a sentence, for answers given before a session exists;
/// the sentence is fixed text of ours, escaped all the same.
fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>harnessd · {t}</title></head><body><main><h1>{t}</h1><p>{x}</p></main>\
         </body></html>",
        t = html_escape(title),
        x = html_escape(text)
    );
    let mut response = (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
            ),
        ],
        html,
    )
        .into_response();
    no_store(&mut response);
    response
}

/// `t` safe inside HTML text and quoted attributes (these pages are written
/// before a session exists, without the console's templates).
fn html_escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A login's answers are never cached, nor their address sent on as a referrer.
fn no_store(response: &mut Response) {
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("", "a"));
    }

    #[test]
    fn names_are_plain() {
        assert!(check_name("alice").is_ok());
        assert!(check_name("ops@host-1.example").is_ok());
        for bad in ["", "a b", "a\u{202e}b", "<x>", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; harnessd_session=abc; b=2".parse().unwrap(),
        );
        assert_eq!(session_cookies(&h), ["abc"]);
        assert!(session_cookies(&HeaderMap::new()).is_empty());
        h.append(header::COOKIE, "harnessd_session=def".parse().unwrap());
        assert_eq!(session_cookies(&h), ["abc", "def"]);
    }

    #[test]
    fn secrets_are_fresh_hex() {
        let (a, b) = (secret().unwrap(), secret().unwrap());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
