//! A remote MCP server over streamable HTTP (the python SDK's, from PyPI, on
//! 127.0.0.1), reached by the daemon: its tools pinned and called under the tiers,
//! its headers read from the daemon's environment or from a credential file.

use std::process::{Child, Command, Stdio};

use serde_json::json;

use crate::common::mcp::{add_server, installed, text};
use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, wait_until};

/// The fixture server on a free loopback port; killed on drop.
struct HttpServer {
    child: Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_server() -> HttpServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/http_server.py");
    let child = Command::new(installed().join("venv/bin/python"))
        .arg(script)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the HTTP server", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    HttpServer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

#[test]
fn a_remote_server_is_called_with_its_headers_from_the_environment_and_a_file() {
    let server = http_server();
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("a", "mcp__remote__add", json!({"a": 40, "b": 2})),
            ("e", "mcp__remote__auth", json!({})),
            ("f", "mcp__filed__auth", json!({})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let credential = root.dir.join("remote-credential");
    std::fs::write(&credential, "Bearer from-a-file\n").unwrap();
    add_server(
        &root,
        "remote",
        json!({"url": server.url, "headers_env": {"Authorization": "REMOTE_MCP_AUTH"}}),
    );
    add_server(
        &root,
        "filed",
        json!({"url": server.url, "headers_file": {"Authorization": credential.display().to_string()}}),
    );
    root.edit_settings(|s| s["tools"]["allow"] = json!(["mcp__remote", "mcp__filed"]));
    let out = root
        .command(&["run", "x"])
        .env("REMOTE_MCP_AUTH", "Bearer from-the-environment")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = last_results(&api.requests()[1].body);
    assert_eq!(text(&r[0]), "42");
    assert_eq!(text(&r[1]), "Bearer from-the-environment");
    assert_eq!(text(&r[2]), "Bearer from-a-file");
    let started = root.events_of("mcp_server_started");
    assert!(started.iter().all(|e| e["pid"] == 0), "{started:?}");
    let finished = root.events_of("tool_finished");
    assert_eq!(finished[0]["server"], "remote");
}
