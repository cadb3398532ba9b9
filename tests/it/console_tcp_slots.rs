//! `daemon.listen` has no peer uid: anyone who can connect to it — any local user,
//! a tool when `sandbox.network` is on, anyone at all with `listen_public` — could
//! hold every slot with heads sent a byte at a time (each lasts the 10 s head
//! timeout, then a fresh one takes its place) and keep the operators' console and
//! Prometheus out for as long as it likes. On this listener only a request of a
//! console session keeps its slot; any other connection gives way to a new one.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::TestRoot;
use crate::common::console::{browse, listen_on_free_port, login};
use crate::common::daemon::Daemon;

#[test]
fn connections_without_a_session_cannot_keep_the_listener_full() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "max_connections", "4");
    let addr = listen_on_free_port(&root);
    let _d = Daemon::start(&root);
    let s = login(&root, addr, "alice");
    // Four connections in the middle of a head, each heard by the daemon: a whole
    // request answered first proves it (a sleep cannot, on a loaded machine).
    let holders: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())
                .unwrap();
            let mut buf = [0u8; 512];
            let n = c.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "no answer");
            c.write_all(b"GET /metrics HTTP/1.1\r\nho").unwrap();
            c
        })
        .collect();
    let a = browse(addr, "GET", "/healthz", &[], "");
    assert_eq!(a.status, 200, "the listener was kept full: {}", a.head);
    let a = browse(addr, "GET", "/v1/tasks", &[&s.cookie], "");
    assert_eq!(a.status, 200, "the listener was kept full: {}", a.head);
    drop(holders);
}

#[test]
fn a_sessions_stream_keeps_its_slot() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.set_config("daemon", "max_connections", "2");
    let addr = listen_on_free_port(&root);
    let _d = Daemon::start(&root);
    let s = login(&root, addr, "alice");
    let streams: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(
                format!(
                    "GET /v1/events?follow=1 HTTP/1.1\r\nhost: {addr}\r\n{}\r\n\r\n",
                    s.cookie
                )
                .as_bytes(),
            )
            .unwrap();
            let mut buf = [0u8; 512];
            let n = c.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "no stream");
            c
        })
        .collect();
    // A newcomer without a session is turned away; the streams stay.
    let mut late = TcpStream::connect(addr).unwrap();
    late.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = late.write_all(format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes());
    let mut buf = [0u8; 64];
    assert!(
        matches!(late.read(&mut buf), Ok(0) | Err(_)),
        "a third connection was served while two sessions streamed"
    );
    for mut c in streams {
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        match c.read(&mut buf) {
            Ok(0) => panic!("a session's stream was closed to make room"),
            Ok(_) => {}
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "{e}"
            ),
        }
    }
}
