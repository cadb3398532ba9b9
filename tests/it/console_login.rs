//! The TCP listener and console logins, as a browser and a scraper meet them:
//! `/metrics` and `/healthz` open, everything else behind a one-time link's
//! session, CSRF on every change, foreign hosts and origins refused on both
//! listeners, expiry and logout recorded.

use std::net::SocketAddr;
use std::time::Duration;

use harnessd_testkit::{FakeApi, Reply};
use serde_json::json;

use crate::common::console::{Session, To, browse, console_url, listen_on_free_port, login, send};
use crate::common::daemon::Daemon;
use crate::common::{TestRoot, stderr, stdout, wait_until};

fn serving() -> (TestRoot, Daemon, SocketAddr) {
    let root = TestRoot::new("http://127.0.0.1:9");
    let addr = listen_on_free_port(&root);
    let d = Daemon::start(&root);
    (root, d, addr)
}

fn with(session: &Session, extra: &[&'static str]) -> Vec<String> {
    let mut h = vec![session.cookie.clone()];
    h.extend(extra.iter().map(|s| s.to_string()));
    h
}

fn refs(h: &[String]) -> Vec<&str> {
    h.iter().map(String::as_str).collect()
}

#[test]
fn metrics_and_healthz_are_open_and_everything_else_needs_a_login() {
    let (root, _d, addr) = serving();
    let m = browse(addr, "GET", "/metrics", &[], "");
    assert_eq!(m.status, 200, "{}", m.body);
    assert!(m.body.contains("harnessd_tasks"), "{}", m.body);
    assert_eq!(browse(addr, "GET", "/healthz", &[], "").status, 200);
    for (method, path) in [
        ("GET", "/v1/tasks"),
        ("GET", "/v1/approvals"),
        ("GET", "/v1/events"),
        ("GET", "/v1/console/session"),
        ("POST", "/v1/console/links"),
        ("GET", "/console/"),
        ("GET", "/console/static/console.css"),
        ("GET", "/console/login"),
        ("GET", "/console/login?token=00"),
        ("POST", "/console/logout"),
        ("GET", "/no/such/page"),
    ] {
        let a = browse(addr, method, path, &[], "");
        assert_eq!(a.status, 401, "{method} {path}: {}", a.body);
    }
    let body = json!({"prompt": "hi"}).to_string();
    let a = browse(
        addr,
        "POST",
        "/v1/tasks",
        &["content-type: application/json"],
        &body,
    );
    assert_eq!(a.status, 401, "{}", a.body);
    assert_eq!(a.json()["error"]["type"], "unauthorized", "{}", a.body);
    let page = browse(addr, "GET", "/console/", &[], "");
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert!(page.body.contains("harnessd console-url"), "{}", page.body);
    assert!(root.events_of("task_queued").is_empty());
}

#[test]
fn metrics_over_tcp_parse_as_prometheus_text() {
    let (_root, _d, addr) = serving();
    let text = browse(addr, "GET", "/metrics", &[], "").body;
    let python = crate::common::console::browser_python();
    let script = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families\n\
                  fams = list(text_string_to_metric_families(sys.stdin.read()))\n\
                  print(len(fams), sum(len(f.samples) for f in fams))\n";
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{python}: {e} (run tests/fixtures/browser/install.sh)"));
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}\n{text}", stderr(&out));
    let counts: Vec<usize> = stdout(&out)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(
        counts[0] >= 5 && counts[1] >= counts[0],
        "{counts:?}\n{text}"
    );
}

#[test]
fn a_link_logs_in_once_and_what_the_session_does_is_attributed_to_its_name() {
    let api = FakeApi::start(vec![
        Reply::tool(
            "w",
            "write_file",
            json!({"path": "asked.txt", "content": "x"}),
        ),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let addr = listen_on_free_port(&root);
    let d = Daemon::start(&root);
    let url = console_url(&root, "alice");
    let path = url
        .strip_prefix(&format!("http://{addr}"))
        .unwrap()
        .to_string();
    assert!(path.starts_with("/console/login?token="), "{url}");
    let a = browse(addr, "GET", &path, &["sec-fetch-site: none"], "");
    assert_eq!(a.status, 303, "{}", a.body);
    assert_eq!(a.header("location").as_deref(), Some("/console/"));
    let cookie = a.header("set-cookie").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(cookie.contains(attr), "{attr} missing: {cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain http on loopback: {cookie}"
    );
    let secret = cookie.split(';').next().unwrap().split_once('=').unwrap().1;
    // The link works once.
    let again = browse(addr, "GET", &path, &["sec-fetch-site: none"], "");
    assert_eq!(again.status, 401, "{}", again.body);
    let logins = root.events_of("console_login");
    assert_eq!(logins.len(), 1, "{logins:?}");
    assert_eq!(logins[0]["name"], "alice");
    assert_eq!(logins[0]["by"], "console:alice");
    assert_eq!(logins[0]["session"].as_str().unwrap().len(), 16);
    // Neither the cookie nor the token is ever on the record.
    let log = std::fs::read_to_string(root.dir.join("transcripts/events.jsonl")).unwrap();
    let token = path.rsplit('=').next().unwrap();
    assert!(!log.contains(secret) && !log.contains(token));

    let session = Session {
        cookie: format!("cookie: harnessd_session={secret}"),
        csrf: browse(
            addr,
            "GET",
            "/v1/console/session",
            &[&format!("cookie: harnessd_session={secret}")],
            "",
        )
        .json()["csrf"]
            .as_str()
            .unwrap()
            .to_string(),
    };
    let body = json!({"prompt": "write it"}).to_string();
    let csrf = format!("x-csrf-token: {}", session.csrf);
    let h = with(&session, &["content-type: application/json"]);
    let mut h = h;
    h.push(csrf.clone());
    let a = browse(addr, "POST", "/v1/tasks", &refs(&h), &body);
    assert_eq!(a.status, 202, "{}", a.body);
    let id = a.json()["task_id"].as_str().unwrap().to_string();
    let approval = loop {
        let list = browse(addr, "GET", "/v1/approvals", &[&session.cookie], "").json();
        if let Some(a) = list["approvals"].as_array().and_then(|a| a.first()) {
            break a["approval_id"].as_str().unwrap().to_string();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let answer = json!({"decision": "approve"}).to_string();
    let a = browse(
        addr,
        "POST",
        &format!("/v1/approvals/{approval}"),
        &refs(&h),
        &answer,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    d.wait_finished(&id);
    let resolved = &root.events_of("approval_resolved")[0];
    assert_eq!(resolved["by"], "console:alice", "{resolved}");
    assert!(root.workspace().join("asked.txt").exists());
    // A session cannot mint more links.
    let a = browse(
        addr,
        "POST",
        "/v1/console/links",
        &refs(&h),
        &json!({"name": "eve"}).to_string(),
    );
    assert_eq!(a.status, 403, "{}", a.body);
}

#[test]
fn a_change_without_the_csrf_token_is_refused_and_changes_nothing() {
    let (root, _d, addr) = serving();
    let s = login(&root, addr, "alice");
    let body = json!({"prompt": "hi"}).to_string();
    let json_type = "content-type: application/json";
    let cases: Vec<(Vec<String>, String)> = vec![
        (with(&s, &[json_type]), body.clone()),
        (
            {
                let mut h = with(&s, &[json_type]);
                // One character off: the last changed (to another digit than
                // it was, or the token would be the right one).
                let last = if s.csrf.ends_with('0') { '1' } else { '0' };
                h.push(format!("x-csrf-token: {}{last}", &s.csrf[..63]));
                h
            },
            body.clone(),
        ),
        (
            with(&s, &["content-type: application/x-www-form-urlencoded"]),
            "prompt=hi&csrf=nope".to_string(),
        ),
        (
            with(&s, &["content-type: application/x-www-form-urlencoded"]),
            format!("csrf={}&csrf=other", s.csrf),
        ),
    ];
    for (headers, body) in cases {
        let a = browse(addr, "POST", "/v1/tasks", &refs(&headers), &body);
        assert_eq!(a.status, 403, "{headers:?}: {}", a.body);
        assert_eq!(a.json()["error"]["type"], "csrf", "{}", a.body);
    }
    // Logging out without it does not log out.
    let a = browse(addr, "POST", "/console/logout", &[&s.cookie], "");
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(
        browse(addr, "GET", "/v1/tasks", &[&s.cookie], "").status,
        200
    );
    assert!(root.events_of("task_queued").is_empty());
    assert!(root.events_of("console_logout").is_empty());
    // The form field is read where a form sends it.
    let form = format!("csrf={}", s.csrf);
    let headers = with(&s, &["content-type: application/x-www-form-urlencoded"]);
    let a = browse(addr, "POST", "/console/logout", &refs(&headers), &form);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.header("set-cookie").unwrap().contains("Max-Age=0"));
    let out = &root.events_of("console_logout")[0];
    assert_eq!(
        (&out["name"], &out["reason"]),
        (&json!("alice"), &json!("logout"))
    );
    assert_eq!(
        browse(addr, "GET", "/v1/tasks", &[&s.cookie], "").status,
        401
    );
}

#[test]
fn foreign_hosts_and_origins_are_refused_on_both_listeners() {
    let (root, d, addr) = serving();
    let s = login(&root, addr, "alice");
    let tcp = To::Tcp(addr);
    for host in ["evil.example", "evil.example:80", "localhost.evil.example"] {
        for to in [&tcp, &To::Socket(&d)] {
            let a = send(to, "GET", "/v1/tasks", host, &[&s.cookie], "");
            assert_eq!(a.status, 403, "{host}: {}", a.body);
        }
    }
    let body = json!({"prompt": "hi"}).to_string();
    for origin in [
        "origin: http://evil.example",
        "origin: http://127.0.0.1:1",
        "origin: null",
    ] {
        let h = [
            s.cookie.as_str(),
            origin,
            "content-type: application/json",
            &format!("x-csrf-token: {}", s.csrf),
        ];
        let a = browse(addr, "POST", "/v1/tasks", &h, &body);
        assert_eq!(a.status, 403, "{origin}: {}", a.body);
    }
    for site in ["sec-fetch-site: cross-site", "sec-fetch-site: same-site"] {
        let a = browse(addr, "GET", "/v1/tasks", &[&s.cookie, site], "");
        assert_eq!(a.status, 403, "{site}: {}", a.body);
    }
    assert!(root.events_of("task_queued").is_empty());
    // Its own origin passes.
    let own = format!("origin: http://{addr}");
    let a = browse(
        addr,
        "GET",
        "/v1/tasks",
        &[&s.cookie, &own, "sec-fetch-site: same-origin"],
        "",
    );
    assert_eq!(a.status, 200, "{}", a.body);
}

#[test]
fn a_browser_on_the_socket_needs_a_session_and_the_cli_keeps_its_uid() {
    let (root, d, _addr) = serving();
    let socket = To::Socket(&d);
    for browserish in [
        "accept: text/html,application/xhtml+xml",
        "cookie: harnessd_session=forged",
        "origin: http://localhost:8080",
        "sec-fetch-mode: navigate",
    ] {
        let a = send(
            &socket,
            "GET",
            "/v1/tasks",
            "localhost:8080",
            &[browserish],
            "",
        );
        assert_eq!(a.status, 401, "{browserish}: {}", a.body);
    }
    assert_eq!(
        send(&socket, "GET", "/console/", "localhost", &[], "").status,
        401
    );
    // A session from the TCP listener's link works through a forwarded socket.
    let url = console_url(&root, "bob");
    let path = &url[url.find("/console/login").unwrap()..];
    let a = send(
        &socket,
        "GET",
        path,
        "localhost:8080",
        &["sec-fetch-site: none"],
        "",
    );
    assert_eq!(a.status, 303, "{}", a.body);
    let cookie = format!(
        "cookie: {}",
        a.header("set-cookie").unwrap().split(';').next().unwrap()
    );
    assert_eq!(
        send(
            &socket,
            "GET",
            "/v1/tasks",
            "localhost:8080",
            &[&cookie],
            ""
        )
        .status,
        200
    );
    // The command-line client is not a browser.
    let out = root.run(&["tasks"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        send(&socket, "GET", "/v1/tasks", "harnessd", &[], "").status,
        200
    );
}

#[test]
fn an_expired_link_or_session_is_refused_and_the_expiry_recorded() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let addr = listen_on_free_port(&root);
    // 3.6 s: links last no longer than a session.
    root.set_config("daemon", "console_session_hours", "0.001");
    let _d = Daemon::start(&root);
    let stale = console_url(&root, "carol");
    let s = login(&root, addr, "carol");
    assert_eq!(
        browse(addr, "GET", "/v1/tasks", &[&s.cookie], "").status,
        200
    );
    std::thread::sleep(Duration::from_millis(3800));
    let path = &stale[stale.find("/console/login").unwrap()..];
    let a = browse(addr, "GET", path, &["sec-fetch-site: none"], "");
    assert_eq!(a.status, 401, "{}", a.body);
    let a = browse(addr, "GET", "/v1/tasks", &[&s.cookie], "");
    assert_eq!(a.status, 401, "{}", a.body);
    assert!(a.body.contains("expired"), "{}", a.body);
    wait_until("the expiry on the record", || {
        !root.events_of("console_logout").is_empty()
    });
    let out = root.events_of("console_logout");
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (&out[0]["name"], &out[0]["reason"]),
        (&json!("carol"), &json!("expired"))
    );
    assert_eq!(
        out[0]["session"],
        root.events_of("console_login")[0]["session"]
    );
}

#[test]
fn console_url_without_a_listener_prints_the_path_to_forward() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let _d = Daemon::start(&root);
    let out = root.run(&["console-url", "--name", "dave"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("/console/login?token="),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("ssh -L"), "{}", stderr(&out));
    let out = root.run(&["console-url", "--name", "a b<"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("console name"), "{}", stderr(&out));
}

#[test]
fn a_listener_off_loopback_needs_listen_public_and_check_warns_about_tls() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "listen", "\"0.0.0.0:18080\"");
    let out = root.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let err = stderr(&out) + &stdout(&out);
    assert!(
        err.contains("config/config.toml:")
            && err.contains("daemon.listen")
            && err.contains("listen_public"),
        "{err}"
    );
    root.set_config("daemon", "listen", "\"localhost:8080\"");
    let err = {
        let o = root.run(&["check"]);
        stderr(&o) + &stdout(&o)
    };
    assert!(err.contains("not an IP address and port"), "{err}");
    root.set_config("daemon", "listen", "\"0.0.0.0:18080\"");
    root.set_config("daemon", "listen_public", "true");
    let out = root.run(&["check"]);
    let all = stderr(&out) + &stdout(&out);
    assert!(all.contains("TLS"), "{all}");
}

#[test]
fn behind_a_tls_proxy_the_consoles_origin_is_its_name_and_the_cookie_secure() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let addr = listen_on_free_port(&root);
    root.set_config("daemon", "console_origin", "\"https://hd.example.com\"");
    let _d = Daemon::start(&root);
    let url = console_url(&root, "erin");
    let path = url
        .strip_prefix("https://hd.example.com")
        .expect(&url)
        .to_string();
    let tcp = To::Tcp(addr);
    // The proxy passes the name the browser used.
    let a = send(
        &tcp,
        "GET",
        &path,
        "hd.example.com",
        &["sec-fetch-site: none"],
        "",
    );
    assert_eq!(a.status, 303, "{}", a.body);
    let cookie = a.header("set-cookie").unwrap();
    assert!(cookie.contains("Secure"), "{cookie}");
    let cookie = format!("cookie: {}", cookie.split(';').next().unwrap());
    let h = [cookie.as_str(), "origin: https://hd.example.com"];
    assert_eq!(
        send(&tcp, "GET", "/v1/tasks", "hd.example.com", &h, "").status,
        200
    );
    // Another name, or the same name over plain http, is still another origin.
    let h = [cookie.as_str(), "origin: http://hd.example.com"];
    assert_eq!(
        send(&tcp, "GET", "/v1/tasks", "hd.example.com", &h, "").status,
        403
    );
    assert_eq!(
        send(
            &tcp,
            "GET",
            "/v1/tasks",
            "other.example.com",
            &[&cookie],
            ""
        )
        .status,
        403
    );
    root.set_config(
        "daemon",
        "console_origin",
        "\"https://hd.example.com/console\"",
    );
    let o = root.run(&["check"]);
    let err = stderr(&o) + &stdout(&o);
    assert!(
        err.contains("daemon.console_origin") && err.contains("no path"),
        "{err}"
    );
}
