//! A model answer that stalls after its headers times out after
//! `api.timeout_secs` under `api.stream` too, when the body is not an event
//! stream (an error status, or a server ignoring `stream`).

use crate::common::{TestRoot, stderr};
use crate::forged_log_files::ends_within;

/// A server that answers every request with `head` (status line, headers, the
/// start of a body) and then goes silent, the connection left open.
fn stalling_api(head: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 65536];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(head.as_bytes());
            open.push(conn);
        }
    });
    url
}

/// With `api.stream` on, only the headers and each event were timed: an answer
/// that is not an event stream (an error status, or a server ignoring `stream`)
/// was read with no timeout at all, so a body that stalls after its headers
/// hung the task forever instead of timing out after `api.timeout_secs`.
#[test]
fn a_plain_body_that_stalls_under_streaming_times_out() {
    for head in [
        "HTTP/1.1 529 Overloaded\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"type\"",
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"id\"",
    ] {
        let url = stalling_api(head);
        let root = TestRoot::new(&url);
        root.set_config("api", "timeout_secs", "1");
        root.set_config("api", "max_retries", "0");
        // Not a speed figure: a bound far above the 1 s timeout, so that only a
        // hang fails it.
        let out = ends_within(&root, &["run", "hello"], 60);
        assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    }
}
