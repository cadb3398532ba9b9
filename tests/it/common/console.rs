//! Talking to the console as a browser would: raw HTTP/1.1 over `daemon.listen`
//! or the socket, with the headers a test chooses, and logging in through a link
//! from `harnessd console-url`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::Value;

use super::TestRoot;
use super::daemon::{Daemon, parse_response};

/// An answer: status, head (lower-cased names), body.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    /// The value of the first header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim().eq_ignore_ascii_case(name)).then(|| v.trim().to_string())
        })
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Sets `daemon.listen` to a free loopback port; returns it.
pub fn listen_on_free_port(root: &TestRoot) -> SocketAddr {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    root.set_config("daemon", "listen", &format!("\"{addr}\""));
    addr
}

/// Where a request goes.
pub enum To<'a> {
    Tcp(SocketAddr),
    Socket(&'a Daemon),
}

/// One request with `headers` (each `name: value`) besides `host`, and `body`.
pub fn send(to: &To, method: &str, path: &str, host: &str, headers: &[&str], body: &str) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    let mut raw = Vec::new();
    match to {
        To::Tcp(addr) => {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(head.as_bytes()).unwrap();
            let _ = s.read_to_end(&mut raw);
        }
        To::Socket(d) => {
            let mut s = UnixStream::connect(&d.socket).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(head.as_bytes()).unwrap();
            let _ = s.read_to_end(&mut raw);
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let head_text = text
        .split_once("\r\n\r\n")
        .map_or(&*text, |(h, _)| h)
        .to_string();
    let (status, body) = parse_response(&raw);
    Answer {
        status,
        head: head_text,
        body,
    }
}

/// A request as a browser on `addr` sends it: its own origin's `Host`.
pub fn browse(addr: SocketAddr, method: &str, path: &str, headers: &[&str], body: &str) -> Answer {
    send(
        &To::Tcp(addr),
        method,
        path,
        &addr.to_string(),
        headers,
        body,
    )
}

/// The link `harnessd console-url --name NAME` prints.
pub fn console_url(root: &TestRoot, name: &str) -> String {
    let out = root.run(&["console-url", "--name", name]);
    assert!(out.status.success(), "{}", super::stderr(&out));
    super::stdout(&out).trim().to_string()
}

/// A session: its cookie header and its CSRF token.
pub struct Session {
    pub cookie: String,
    pub csrf: String,
}

/// Logs in on `addr` through a fresh link for `name`.
pub fn login(root: &TestRoot, addr: SocketAddr, name: &str) -> Session {
    let url = console_url(root, name);
    let path = url
        .strip_prefix(&format!("http://{addr}"))
        .unwrap_or_else(|| panic!("{url} is not on {addr}"));
    let a = browse(addr, "GET", path, &["sec-fetch-site: none"], "");
    assert_eq!(a.status, 303, "{}\n{}", a.head, a.body);
    let set = a.header("set-cookie").expect("a cookie");
    let cookie = format!("cookie: {}", set.split(';').next().unwrap());
    let s = browse(addr, "GET", "/v1/console/session", &[&cookie], "");
    assert_eq!(s.status, 200, "{}", s.body);
    Session {
        cookie,
        csrf: s.json()["csrf"].as_str().unwrap().to_string(),
    }
}

/// The python of the browser tests' venv (Playwright, prometheus_client), as
/// tests/fixtures/browser/install.sh makes it.
pub fn browser_python() -> String {
    let dir = std::env::var("HARNESSD_TEST_BROWSER")
        .unwrap_or_else(|_| "/opt/harnessd-test/browser".to_string());
    format!("{dir}/venv/bin/python")
}
