//! Who may call the control API (docs/api.md): the daemon's own user, root, and members
//! of `daemon.operators_group`; the uid tools run as (`sandbox.user`) never, even
//! when it is in the group or the socket's mode would let it connect. File
//! permissions on the socket are the first fence; this is the one that does not
//! depend on them.
//!
//! Checked on every request, in one middleware ([`authorize`]), from the peer's
//! SO_PEERCRED ([`Peer`]). A browser is not the peer uid (a forwarded socket, a
//! page on another site): it needs a console session, on both listeners. Accounts are looked up per request, so removing someone
//! from the group takes effect at once; the daemon's user and root need no lookup.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use nix::unistd::{Group, Uid, User};

use super::api::{ApiError, AppState, Caller, Peer, Via};
use super::login::Lookup;
use crate::config::{ConfigSource, LiveConfig};

/// The count of console sessions' requests being answered on a connection of the
/// TCP listener: while it is above zero the connection keeps its slot. Put on each
/// request by the listener.
#[derive(Clone)]
pub struct SessionsOnSlot(pub Arc<AtomicUsize>);

impl SessionsOnSlot {
    /// Counts the request from now (its body and handler, which eviction would
    /// cut short) until its response's body is sent or dropped (a `/v1/events`
    /// stream counts as long as it lasts).
    async fn serve(self, req: Request, next: Next) -> Response {
        struct Held(Arc<AtomicUsize>);
        impl Held {
            /// Used in the body's closure, which must own the count to keep it.
            fn keep(&self) {}
        }
        impl Drop for Held {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.0.fetch_add(1, Ordering::AcqRel);
        let held = Held(self.0);
        next.run(req).await.map(|body| {
            Body::new(body.map_frame(move |frame| {
                held.keep();
                frame
            }))
        })
    }
}

/// Why a peer is refused, or `Ok` when it may call. Pure: `is_operator` is asked
/// only when the answer depends on it.
pub(crate) fn decide(
    peer: u32,
    daemon_uid: u32,
    tool_uids: &[u32],
    is_operator: impl FnOnce() -> bool,
) -> Result<(), String> {
    if peer == 0 || peer == daemon_uid {
        return Ok(());
    }
    if tool_uids.contains(&peer) {
        return Err(format!(
            "uid {peer} is the uid tools run as (sandbox.user); tools may not use the control API"
        ));
    }
    if is_operator() {
        return Ok(());
    }
    Err(format!(
        "uid {peer} may not use the control API: only the daemon's user (uid {daemon_uid}), root \
         and members of daemon.operators_group may"
    ))
}

/// The uids tools run as under this `sandbox.user`, as the helper's privilege drop
/// decides: the user's uid, or 65534 when harnessd is root and the user is unknown
/// or is root itself.
pub(crate) fn tool_uids(user: &str, daemon_is_root: bool) -> Vec<u32> {
    let mut uids = Vec::new();
    if let Ok((uid, _)) = crate::sandbox::resolve_user(user) {
        uids.push(uid.as_raw());
    }
    if daemon_is_root && uids.iter().all(|&u| u == 0) {
        uids.push(65534);
    }
    uids
}

/// Whether `peer` is in `group`: listed among its members, or the group is its
/// primary group.
fn is_member(group: &str, peer: u32) -> bool {
    let (Ok(Some(group)), Ok(Some(user))) =
        (Group::from_name(group), User::from_uid(Uid::from_raw(peer)))
    else {
        return false;
    };
    user.gid == group.gid || group.mem.contains(&user.name)
}

/// The middleware, outermost, so it runs before any handler or body parsing: a
/// request naming a foreign `Host` or `Origin` is refused (403); on the TCP
/// listener `/metrics` and `/healthz` need nothing more; on the socket the peer's
/// uid must be allowed ([`verdict`]); a request from a browser, and on the TCP
/// listener every other one, needs a console session (401 without one) and
/// carries its [`Viewer`]. Every request that passes carries its [`Caller`].
pub async fn authorize(State(s): State<AppState>, mut req: Request, next: Next) -> Response {
    let Some(peer) = req
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|ConnectInfo(p)| p.clone())
    else {
        return forbidden("the listener did not say who is calling".into());
    };
    let public = s.config.current().config.daemon.console_origin.clone();
    if let Err(why) = super::origin::check(req.headers(), peer.via, public.as_deref()) {
        if super::origin::is_link_followed(&req, peer.via, public.as_deref()) {
            return super::login::bounce(&req);
        }
        tracing::info!("control API: refused a request: {why}");
        return forbidden(why);
    }
    let path = req.uri().path();
    let open = matches!(path, "/healthz" | "/metrics");
    match peer.via {
        Via::Tcp if open => return next.run(req).await,
        Via::Tcp => {}
        Via::Socket => {
            let Some(uid) = peer.uid else {
                return forbidden("the kernel did not report the caller's credentials".into());
            };
            if let Err(why) = verdict(&s.config, uid).await {
                tracing::info!("control API: refused a request: {why}");
                return forbidden(why);
            }
            if open || !super::origin::from_browser(&req) {
                req.extensions_mut().insert(Caller::Peer(peer));
                return next.run(req).await;
            }
        }
    }
    if path == super::login::LOGIN_PATH {
        // The link's token is the credential; its handler checks it.
        return next.run(req).await;
    }
    let cookies = super::login::session_cookies(req.headers());
    if cookies.is_empty() {
        return super::login::unauthorized(
            path,
            "this needs a console login: run `harnessd console-url` on the host and open \
             the link it prints",
        );
    }
    match s.logins.lookup_any(&cookies).await {
        Lookup::Valid(viewer) => {
            let slot = req.extensions().get::<SessionsOnSlot>().cloned();
            req.extensions_mut().insert(viewer.clone());
            req.extensions_mut().insert(Caller::Console(viewer));
            match slot {
                Some(slot) => slot.serve(req, next).await,
                None => next.run(req).await,
            }
        }
        Lookup::Expired => super::login::unauthorized(
            path,
            "your console session expired; run `harnessd console-url` on the host for a new \
             link",
        ),
        Lookup::Unknown => super::login::unauthorized(
            path,
            "no such console session (logged out, or the daemon restarted); run \
             `harnessd console-url` on the host for a new link",
        ),
    }
}

/// Whether `peer` may call, under the config in force: `Err` says why not. Root
/// and the daemon's own user are answered at once; anyone else is looked up off
/// the async workers (accounts may go through NSS: LDAP, sssd). Asked for every
/// request, and at accept, so that a refused peer's connections cannot take the
/// slots operators need (`daemon.max_connections`).
pub(crate) async fn verdict(config: &LiveConfig, peer: u32) -> Result<(), String> {
    let me = Uid::effective();
    if peer == 0 || peer == me.as_raw() {
        return Ok(());
    }
    let loaded = config.current();
    let user = loaded.tool_user.user.clone();
    let group = loaded.config.daemon.operators_group.clone();
    tokio::task::spawn_blocking(move || {
        decide(peer, me.as_raw(), &tool_uids(&user, me.is_root()), || {
            group.as_deref().is_some_and(|g| is_member(g, peer))
        })
    })
    .await
    .unwrap_or_else(|e| Err(format!("cannot check the caller: {e}")))
}

fn forbidden(message: String) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_the_daemon_need_no_lookup() {
        let never = || panic!("no membership lookup for root or the daemon's user");
        assert!(decide(0, 1000, &[65534], never).is_ok());
        assert!(decide(1000, 1000, &[65534], never).is_ok());
    }

    #[test]
    fn the_tool_uid_is_refused_even_as_an_operator() {
        let e = decide(65534, 0, &[65534], || true).unwrap_err();
        assert!(e.contains("sandbox.user"), "{e}");
    }

    #[test]
    fn operators_in_strangers_out() {
        assert!(decide(1001, 0, &[65534], || true).is_ok());
        let e = decide(1002, 0, &[65534], || false).unwrap_err();
        assert!(
            e.contains("uid 1002") && e.contains("operators_group"),
            "{e}"
        );
    }

    #[test]
    fn tools_of_a_root_daemon_never_count_as_root() {
        assert_eq!(tool_uids("root", true), [0, 65534]);
        assert_eq!(tool_uids("no-such-user-hd", true), [65534]);
        assert_eq!(tool_uids("no-such-user-hd", false), Vec::<u32>::new());
        assert_eq!(tool_uids("4242", false), [4242]);
    }
}
