//! Whether a request is meant for this daemon and whether a browser sent it
//! (docs/console.md). A web page the operator has open can make the browser send
//! requests to a forwarded port or to `daemon.listen`: through a name it rebinds
//! to 127.0.0.1 (its `Host` is then that name), or as a form post or fetch from its
//! own origin (its `Origin` or `Sec-Fetch-Site` says so). Both are refused before
//! anything else runs, on both listeners.

use std::net::IpAddr;

use axum::extract::Request;
use axum::http::{HeaderMap, header};

use super::api::Via;

/// The `Host` the command-line client sends on the socket.
pub const CLIENT_HOST: &str = "harnessd";

/// The host of an authority (`name`, `name:port`, `[v6]:port`), without its port.
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split_once(']').map_or(authority, |(h, _)| h);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Whether `authority` may name this daemon: `localhost`, an IP address (a page
/// that reaches us by address has that address as its origin, so it is no
/// rebinding), or on the socket the client's own name. A name that resolves
/// here is not enough: that is what DNS rebinding makes.
fn host_allowed(authority: &str, via: Via, public: Option<&str>) -> bool {
    let host = host_of(authority);
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok()
        || (via == Via::Socket && authority == CLIENT_HOST)
        || public.is_some_and(|p| authority.eq_ignore_ascii_case(p))
}

/// Whether a request naming the daemon [`CLIENT_HOST`] cannot be the
/// command-line client. `harnessd` is a name like any other to a browser: a page
/// on it (through a search domain, LLMNR, mDNS) rebound to a forwarded socket
/// fetches same-origin with none of the headers [`from_browser`] looks for (no
/// `Origin` on a GET, no `Sec-Fetch-*` to an http name off loopback, no
/// `Referer` when its script asks for none). Its `Host` carries the forwarded
/// port unless that port is 80, and every browser adds `Accept-Encoding`, which
/// no script can remove; the client sends neither.
fn posing_as_client(authority: &str, headers: &HeaderMap) -> bool {
    host_of(authority) == CLIENT_HOST
        && (authority != CLIENT_HOST || headers.contains_key(header::ACCEPT_ENCODING))
}

/// `Ok` when the request names this daemon and no other origin sent it; `Err`
/// says why not. `public` is `daemon.console_origin`, the origin a proxy serves the
/// console at.
pub fn check(headers: &HeaderMap, via: Via, public: Option<&str>) -> Result<(), String> {
    let public_authority = public
        .and_then(|o| crate::config::origin_parts(o).ok())
        .map(|(_, a)| a);
    // A proxy in front may route by another of them than the one checked here.
    if headers.get_all(header::HOST).iter().nth(1).is_some() {
        return Err("the request has more than one Host header".into());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or("the request has no Host header (or one that is not text)")?;
    if !host_allowed(host, via, public_authority)
        || (via == Via::Socket && posing_as_client(host, headers))
    {
        return Err(format!(
            "Host {:?} does not name this daemon: use localhost or its address (a page \
             on another name cannot reach it)",
            crate::text::escape_line(host)
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let ours = [format!("http://{host}"), format!("https://{host}")];
        let from_proxy = public.is_some_and(|p| p.eq_ignore_ascii_case(origin));
        // Under the proxy's name only its exact origin is ours (not its http twin).
        let direct =
            host_allowed(host, via, None) && ours.iter().any(|o| o.eq_ignore_ascii_case(origin));
        if !from_proxy && !direct {
            return Err(format!(
                "a request from the origin {:?} is refused: only the console's own pages \
                 may send requests",
                crate::text::escape_line(origin)
            ));
        }
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        // `same-site` is another port of the same host: another origin.
        if !matches!(site.to_str(), Ok("same-origin" | "none")) {
            return Err(format!(
                "a request the browser marks as {:?} is refused: only the console's own \
                 pages may send requests",
                crate::text::escape_line(site.to_str().unwrap_or("?"))
            ));
        }
    }
    Ok(())
}

/// Whether the request is a browser following a link from another site (a chat's
/// approval link) to a console page: a top-level GET navigation whose only fault
/// is its `Sec-Fetch-Site`. Its answer is a page that reloads the same address from
/// the daemon's own origin ([`super::login::bounce`]), nothing else: no state
/// changes, nothing is shown, and the `SameSite=Strict` cookie (which a cross-site
/// navigation does not carry) goes with the reload.
pub fn is_link_followed(req: &Request, via: Via, public: Option<&str>) -> bool {
    let h = req.headers();
    let header_is = |name: &str, want: &[&str]| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| want.contains(&v))
    };
    let path = req.uri().path();
    req.method() == axum::http::Method::GET
        && (path == "/console" || path.starts_with("/console/"))
        && header_is("sec-fetch-mode", &["navigate"])
        && header_is("sec-fetch-dest", &["document"])
        && header_is("sec-fetch-site", &["cross-site", "same-site"])
        && !h.contains_key(header::ORIGIN)
        && {
            let mut rest = h.clone();
            rest.remove("sec-fetch-site");
            check(&rest, via, public).is_ok()
        }
}

/// Whether a browser sent the request: it carries a header a browser adds and the
/// command-line client never does, or it asks for the console. Such a request
/// needs a console session even on the socket, whose peer uid is then whoever
/// forwards it.
pub fn from_browser(req: &Request) -> bool {
    let h = req.headers();
    h.contains_key(header::ORIGIN)
        || h.contains_key("sec-fetch-site")
        || h.contains_key("sec-fetch-mode")
        || h.contains_key(header::COOKIE)
        || h.contains_key(header::REFERER)
        || h.contains_key(header::UPGRADE_INSECURE_REQUESTS)
        || h.get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"))
        || req.uri().path() == "/console"
        || req.uri().path().starts_with("/console/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn hosts_that_name_us_and_those_that_do_not() {
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:9",
            "10.0.0.5",
        ] {
            assert!(
                check(&headers(&[("host", ok)]), Via::Tcp, None).is_ok(),
                "{ok}"
            );
        }
        assert!(check(&headers(&[("host", "harnessd")]), Via::Socket, None).is_ok());
        // A browser on a page named `harnessd`: the forwarded port, or its encodings.
        let browser = headers(&[("host", "harnessd"), ("accept-encoding", "gzip")]);
        assert!(check(&browser, Via::Socket, None).is_err());
        assert!(check(&headers(&[("host", "harnessd:8080")]), Via::Socket, None).is_err());
        for bad in [
            "harnessd",
            "evil.example",
            "evil.example:8080",
            "localhost.evil",
        ] {
            assert!(
                check(&headers(&[("host", bad)]), Via::Tcp, None).is_err(),
                "{bad}"
            );
        }
        assert!(check(&HeaderMap::new(), Via::Socket, None).is_err());
        let mut two = headers(&[("host", "localhost")]);
        two.append("host", "localhost".parse().unwrap());
        assert!(check(&two, Via::Tcp, None).is_err());
    }

    #[test]
    fn only_our_own_origin_and_same_origin_fetches_pass() {
        let h = |o: &str| headers(&[("host", "127.0.0.1:8080"), ("origin", o)]);
        assert!(check(&h("http://127.0.0.1:8080"), Via::Tcp, None).is_ok());
        assert!(check(&h("https://127.0.0.1:8080"), Via::Tcp, None).is_ok());
        for bad in ["http://127.0.0.1:3000", "null", "http://evil.example", ""] {
            assert!(check(&h(bad), Via::Tcp, None).is_err(), "{bad}");
        }
        let site = |s: &str| headers(&[("host", "localhost:8080"), ("sec-fetch-site", s)]);
        assert!(check(&site("same-origin"), Via::Tcp, None).is_ok());
        assert!(check(&site("none"), Via::Tcp, None).is_ok());
        assert!(check(&site("same-site"), Via::Tcp, None).is_err());
        assert!(check(&site("cross-site"), Via::Tcp, None).is_err());
    }

    #[test]
    fn a_proxys_origin_is_ours_only_when_configured() {
        let public = Some("https://hd.example.com");
        let h = headers(&[
            ("host", "hd.example.com"),
            ("origin", "https://hd.example.com"),
        ]);
        assert!(check(&h, Via::Tcp, public).is_ok());
        assert!(check(&h, Via::Tcp, None).is_err());
        let proxied = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://hd.example.com"),
        ]);
        assert!(check(&proxied, Via::Tcp, public).is_ok());
        let other = headers(&[
            ("host", "hd.example.com"),
            ("origin", "http://hd.example.com"),
        ]);
        assert!(check(&other, Via::Tcp, public).is_err());
    }
}
