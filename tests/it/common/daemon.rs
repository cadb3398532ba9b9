//! A running `harnessd serve` on a test root, and raw HTTP over its socket: the
//! real binary ([`Daemon`]) or the library function in this test's runtime
//! ([`InProcess`]).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{SECRET_KEY, TestRoot};

/// The daemon process; killed on drop if still running.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    pub fn start(root: &TestRoot) -> Daemon {
        Daemon::start_with(root, |_| {})
    }

    /// Starts the daemon with extra environment variables (test-only switches).
    pub fn start_with_env(root: &TestRoot, vars: &[(&str, &str)]) -> Daemon {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Daemon::start_with(root, move |cmd| {
            cmd.envs(vars);
        })
    }

    /// Like [`Daemon::start`], with `adjust` applied to the `serve` command first
    /// (e.g. to run the daemon as another uid).
    pub fn start_with(root: &TestRoot, adjust: impl FnOnce(&mut Command)) -> Daemon {
        let log = root.dir.join("daemon.log");
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = root.command(&["serve"]);
        cmd.stdout(Stdio::null()).stderr(Stdio::from(file));
        adjust(&mut cmd);
        let child = cmd.spawn().unwrap();
        let d = Daemon {
            child,
            socket: root.dir.join("run/harnessd.sock"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while d.try_request("GET", "/healthz", None).is_err() {
            assert!(
                Instant::now() < deadline,
                "the daemon did not come up: {}",
                std::fs::read_to_string(&d.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Stops the daemon as systemd does (SIGTERM) and waits for it; whether it
    /// exited 0.
    pub fn terminate(&mut self) -> bool {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        self.child.wait().unwrap().success()
    }

    fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        let mut s = UnixStream::connect(&self.socket)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let body = body.unwrap_or("");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        Ok(parse_response(&raw))
    }

    /// One request; the body parsed as JSON (Null if it is not).
    pub fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, text) = self.try_request(method, path, body).unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// One request; the raw body.
    pub fn request_text(&self, method: &str, path: &str) -> (u16, String) {
        self.try_request(method, path, None).unwrap()
    }

    /// Polls a task until it is finished; returns it.
    pub fn wait_finished(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, t) = self.request("GET", &format!("/v1/tasks/{id}"), None);
            if t["status"] == "finished" {
                return t;
            }
            assert!(Instant::now() < deadline, "task {id} never finished: {t}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn submit(&self, prompt: &str) -> String {
        let (status, v) = self.request(
            "POST",
            "/v1/tasks",
            Some(&serde_json::json!({"prompt": prompt}).to_string()),
        );
        assert_eq!(status, 202, "{v}");
        v["task_id"].as_str().unwrap().to_string()
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `serve` run in-process, in the test's own runtime, on a test root: the test owns
/// the shutdown trigger and, with a current-thread runtime, the clock
/// (`tokio::time::pause`).
pub struct InProcess {
    pub socket: PathBuf,
    /// Sending is the daemon's SIGTERM; the string is recorded in `daemon_stopping`.
    pub shutdown: Option<tokio::sync::oneshot::Sender<String>>,
    /// The daemon; its output is what `serve` returns.
    pub handle: tokio::task::JoinHandle<Result<(), harnessd::daemon::serve::ServeError>>,
}

impl InProcess {
    /// Starts the daemon on `root` (the key comes from the test, not the process
    /// environment) and waits, in real time, until it answers `/healthz`.
    pub async fn start(root: &TestRoot) -> InProcess {
        use harnessd::daemon::serve::{PreparedSocket, ServeOptions, serve};
        let env = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| SECRET_KEY.to_string());
        let prepared = harnessd::services::Prepared::load(&root.dir, env).unwrap();
        let socket = PreparedSocket::prepare(&prepared.loaded).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        let opts = ServeOptions {
            helper: PathBuf::from(super::bin()),
            // No SIGHUP in these tests: reload is left to the file watcher.
            hangups: Box::pin(futures::stream::pending()),
        };
        let shutdown = async move { rx.await.unwrap_or_else(|_| "dropped".into()) };
        let handle = tokio::spawn(serve(prepared, socket, opts, shutdown));
        let d = InProcess {
            socket: root.dir.join("run/harnessd.sock"),
            shutdown: Some(tx),
            handle,
        };
        d.until("the daemon to come up", async || {
            d.try_request("GET", "/healthz", None).await.is_ok()
        })
        .await;
        d
    }

    /// Polls `f` every 10 ms of tokio time until it holds; fails after 20 s of
    /// real time, naming `what`.
    pub async fn until(&self, what: &str, mut f: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !f().await {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::UnixStream::connect(&self.socket).await?;
        let body = body.unwrap_or("");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        Ok(parse_response(&raw))
    }

    /// One request; the body parsed as JSON (Null if it is not).
    pub async fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, text) = self.try_request(method, path, body).await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn submit(&self, prompt: &str) -> String {
        let body = serde_json::json!({"prompt": prompt}).to_string();
        let (status, v) = self.request("POST", "/v1/tasks", Some(&body)).await;
        assert_eq!(status, 202, "{v}");
        v["task_id"].as_str().unwrap().to_string()
    }

    /// Polls a task until it is finished; returns it.
    pub async fn wait_finished(&self, id: &str) -> Value {
        let path = format!("/v1/tasks/{id}");
        let mut task = Value::Null;
        self.until(&format!("task {id} to finish"), async || {
            task = self.request("GET", &path, None).await.1;
            task["status"] == "finished"
        })
        .await;
        task
    }

    /// Sends the shutdown trigger and waits for `serve` to return.
    pub async fn stop(mut self, reason: &str) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(reason.to_string());
        }
        (&mut self.handle).await.unwrap().unwrap();
    }
}

/// Status and body (de-chunked) of a raw HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = if head.to_lowercase().contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}
