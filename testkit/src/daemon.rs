//! A `harnessd serve` started for a benchmark, and raw HTTP over its socket.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One request over the control socket; the body parsed as JSON, `None` when
/// the daemon is not there or the body is not JSON.
pub fn http(socket: &Path, method: &str, path: &str, body: &str) -> Option<Value> {
    let mut s = UnixStream::connect(socket).ok()?;
    write!(s, "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    serde_json::from_str(raw.split_once("\r\n\r\n")?.1).ok()
}

/// Starts `serve` on `root`; returns it once `/healthz` answers.
pub fn serve(bin: &str, root: &Path) -> std::process::Child {
    let child = Command::new(bin)
        .arg("--root")
        .arg(root)
        .arg("serve")
        .env("ANTHROPIC_API_KEY", "bench-key")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = root.join("run/harnessd.sock");
    let start = Instant::now();
    // A root with a large log (the audit bench's) takes a while to come up.
    while http(&socket, "GET", "/healthz", "").is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// Submits a task; its id.
pub fn submit(socket: &Path, prompt: &str) -> String {
    let body = json!({ "prompt": prompt }).to_string();
    http(socket, "POST", "/v1/tasks", &body).unwrap()["task_id"]
        .as_str()
        .unwrap()
        .to_string()
}

