//! Long-running confined servers (an MCP server over stdio): started through the
//! same helper and confinement as a tool, but with a live stdin and stdout for as
//! long as the caller keeps the [`ServerProcess`], no CPU-time limit and no
//! wall-clock timeout.
//!
//! The helper comes from the spawner thread like every other (its parent-death
//! signal fires when the thread that started it exits; that thread never does), so
//! the server dies with the daemon even when the daemon is killed. It is a session
//! and process group leader supervising the PID namespace the server is PID 1 of:
//! killing the helper takes the whole tree. It joins a cgroup of its own, held
//! until the server is gone.
//!
//! Its exit is observed without reaping it (`waitid` with `WNOWAIT`), so the pid
//! and process group it names cannot be reused while a kill may still be sent;
//! the reap and the kill exclude each other.
//!
//! Its stderr becomes the daemon's log (target `mcp`), escaped line by line and
//! bounded per line and per second: a hostile server can neither forge log lines
//! nor flood the log.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::watch;

use super::{Executor, cgroup, kill_tree};
use crate::sandbox::{Confinement, HelperRequest, Job, SERVER_READY};

/// Longest stderr line logged, in bytes of the server's output; the rest of the
/// line is dropped and the log line says so.
pub const STDERR_LINE_BYTES: usize = 4096;

/// Stderr lines logged per second; more are counted and reported as dropped.
pub const STDERR_LINES_PER_SEC: u32 = 50;

/// How long the sandbox may take to confine a server before it is given up.
const START_LIMIT: Duration = Duration::from_secs(20);

/// Bytes of the helper's refusal kept for the error.
const REFUSAL_BYTES: usize = 4096;

/// One server to start.
#[derive(Debug)]
pub struct ServerRequest<'a> {
    /// The server's name, for the log.
    pub name: &'a str,
    /// Program (found on `PATH` inside the sandbox) and arguments.
    pub argv: &'a [String],
    /// Variables added to the tools' environment; the values travel in the job,
    /// never on a command line.
    pub env: &'a [(String, String)],
    /// Working directory (its `HOME` is its private `/tmp`, not this).
    pub workspace: &'a Path,
    /// How to confine it, normally [`Confinement::for_server`].
    pub confine: &'a Confinement,
}

/// How a server ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerExit {
    /// Exit code, when it exited. A server killed by signal N inside the sandbox
    /// is relayed by the helper that supervises it as code 128 + N.
    pub code: Option<i32>,
    /// Signal, when the helper itself was killed ([`ServerProcess::stop`], or
    /// something outside).
    pub signal: Option<i32>,
}

impl std::fmt::Display for ServerExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(sig)) => write!(f, "killed by signal {sig}"),
            (None, None) => write!(f, "an unknown end"),
        }
    }
}

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The helper could not be started or sent its job.
    #[error("cannot start the sandbox helper: {0}")]
    Spawn(#[from] std::io::Error),
    /// The sandbox refused: a layer `sandbox.require` demands could not be had,
    /// or the program is not found or not readable inside the sandbox.
    #[error("the sandbox refused to start the server: {message}")]
    Refused {
        /// The helper's exit code (125 for confinement, 127 for the program).
        code: Option<i32>,
        /// What the helper said, escaped.
        message: String,
    },
    /// Confinement did not finish in time; the helper was killed.
    #[error("the sandbox did not start the server within {} s", START_LIMIT.as_secs())]
    Timeout,
}

/// A running confined server. Dropping it (or [`ServerProcess::stop`]) kills the
/// whole process tree; its cgroup is released once the helper is reaped.
#[derive(Debug)]
pub struct ServerProcess {
    pid: u32,
    stdio: Option<(ChildStdout, ChildStdin)>,
    /// Whether the helper has been reaped: until then its pid (and process group)
    /// is ours to signal.
    reaped: Arc<Mutex<bool>>,
    exit: watch::Receiver<Option<ServerExit>>,
}

impl ServerProcess {
    /// The server's stdout and stdin (newline-delimited JSON-RPC), once.
    pub fn take_stdio(&mut self) -> Option<(ChildStdout, ChildStdin)> {
        self.stdio.take()
    }

    /// The helper's pid: the process group and supervisor of the server's PID
    /// namespace (the server is its child).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits until the server has ended, and says how.
    pub async fn exited(&self) -> ServerExit {
        let mut rx = self.exit.clone();
        let ended = rx.wait_for(Option::is_some).await.map(|e| *e);
        // The watcher thread publishes before it ends; a closed channel without
        // a value means it could not watch (then nothing is known of the exit).
        ended.ok().flatten().unwrap_or(ServerExit {
            code: None,
            signal: None,
        })
    }

    /// The exit, as a channel: `None` while the server runs.
    pub fn exit_watch(&self) -> watch::Receiver<Option<ServerExit>> {
        self.exit.clone()
    }

    /// Kills the server and everything it started.
    pub fn stop(self) {
        drop(self);
    }

    fn kill(&self) {
        let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner());
        if !*reaped {
            kill_tree(Pid::from_raw(self.pid as i32));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Executor {
    /// Starts a confined server and returns once the sandbox is in place and the
    /// server's program is about to run, or with the sandbox's refusal.
    ///
    /// Call it from async code inside a Tokio runtime (its pipes are registered
    /// with it); no `spawn_blocking` is needed. It blocks the calling thread only
    /// briefly — taking a spare helper, creating a cgroup, writing the job, a few
    /// milliseconds — and awaits the confinement (tens of milliseconds) on the
    /// blocking pool, bounded in real time, so a paused test clock does not
    /// time it out.
    pub async fn start_server(
        &self,
        req: &ServerRequest<'_>,
    ) -> Result<ServerProcess, ServerError> {
        let limits = &req.confine.limits;
        let cgroup = cgroup::CallCgroup::create(limits.memory_mb, limits.max_processes);
        let request = HelperRequest {
            job: Job::McpServer {
                argv: req.argv.to_vec(),
                env: req.env.to_vec(),
            },
            confine: req.confine.clone(),
        };
        let mut child = match self.start_helper(&request, req.workspace, cgroup.as_ref(), true) {
            Ok(child) => child,
            Err(e) => {
                if let Some(cg) = cgroup {
                    cg.release();
                }
                return Err(ServerError::Spawn(e));
            }
        };
        let pipes = (child.stdout.take(), child.stdin.take(), child.stderr.take());
        let pid = child.id();
        // Not killed or reaped on drop: the watcher thread reaps it.
        drop(child);
        let reaped = Arc::new(Mutex::new(false));
        let (exit_tx, exit) = watch::channel(None);
        let mut process = ServerProcess {
            pid,
            stdio: None,
            reaped: reaped.clone(),
            exit,
        };
        watch_exit(pid, reaped, exit_tx, cgroup)?;
        let (Some(stdout), Some(stdin), Some(stderr)) = pipes else {
            return Err(ServerError::Spawn(std::io::Error::other(
                "the helper has no standard streams",
            )));
        };
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let name = req.name.to_string();
        std::thread::Builder::new()
            .name(format!("mcp-stderr-{pid}"))
            .spawn(move || pump_stderr(&name, stderr, ready_tx))?;
        process.stdio = Some((ChildStdout::from_std(stdout)?, ChildStdin::from_std(stdin)?));
        // Real time, not a Tokio timer: a test runtime's paused clock would jump
        // over it while the helper confines itself.
        let ready = tokio::task::spawn_blocking(move || ready.recv_timeout(START_LIMIT)).await;
        match ready {
            Ok(Ok(Ok(()))) => Ok(process),
            Ok(Ok(Err(message))) => {
                let code = process.exited().await.code;
                Err(ServerError::Refused { code, message })
            }
            Ok(Err(RecvTimeoutError::Timeout)) => Err(ServerError::Timeout),
            Ok(Err(RecvTimeoutError::Disconnected)) | Err(_) => Err(ServerError::Refused {
                code: process.exited().await.code,
                message: "the helper ended without a word".into(),
            }),
        }
    }
}

/// Starts the thread that learns how the helper `pid` ended: it observes the exit
/// without reaping, then reaps under `reaped`'s lock (so no kill can reach a
/// reused pid), publishes the exit and releases the cgroup.
fn watch_exit(
    pid: u32,
    reaped: Arc<Mutex<bool>>,
    exit_tx: watch::Sender<Option<ServerExit>>,
    cgroup: Option<cgroup::CallCgroup>,
) -> std::io::Result<()> {
    let helper = Pid::from_raw(pid as i32);
    let unwatched = reaped.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("mcp-wait-{pid}"))
        .spawn(move || {
            let status = loop {
                match waitid(Id::Pid(helper), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    other => break other,
                }
            };
            {
                let mut reaped = reaped.lock().unwrap_or_else(|p| p.into_inner());
                let _ = waitpid(helper, None);
                *reaped = true;
            }
            let exit = match status {
                Ok(WaitStatus::Exited(_, code)) => ServerExit {
                    code: Some(code),
                    signal: None,
                },
                Ok(WaitStatus::Signaled(_, sig, _)) => ServerExit {
                    code: None,
                    signal: Some(sig as i32),
                },
                _ => ServerExit {
                    code: None,
                    signal: None,
                },
            };
            let _ = exit_tx.send(Some(exit));
            if let Some(cg) = cgroup {
                cg.release();
            }
        });
    match spawned {
        Ok(_) => Ok(()),
        Err(e) => {
            // Nobody would reap it or learn its end: it must not run.
            let mut reaped = unwatched.lock().unwrap_or_else(|p| p.into_inner());
            kill_tree(helper);
            let _ = waitpid(helper, None);
            *reaped = true;
            Err(e)
        }
    }
}

/// Reads the helper's stderr: what comes before [`SERVER_READY`] is the sandbox's
/// refusal, sent on `ready` as `Err`; after it, each of the server's lines is
/// logged (target `mcp`) through [`StderrLog`].
fn pump_stderr(name: &str, stderr: impl Read, ready: Sender<Result<(), String>>) {
    let mut input = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut refusal = String::new();
    loop {
        match read_line_bounded(&mut input, REFUSAL_BYTES, &mut line) {
            Ok(Some(_)) if line == SERVER_READY.as_bytes() => break,
            Ok(Some(_)) => {
                if !refusal.is_empty() {
                    refusal.push(' ');
                }
                let said = line.strip_prefix(b"harnessd sandbox: ").unwrap_or(&line);
                refusal.push_str(&escape_bytes(said));
                // Cut on a character boundary: the escaped text may hold any
                // character of a path the settings named.
                let mut end = refusal.len().min(REFUSAL_BYTES);
                while !refusal.is_char_boundary(end) {
                    end -= 1;
                }
                refusal.truncate(end);
            }
            Ok(None) | Err(_) => {
                let _ = ready.send(Err(refusal));
                return;
            }
        }
    }
    let _ = ready.send(Ok(()));
    let mut log = StderrLog::new();
    let mut emit = |text: String| tracing::info!(target: "mcp", server = %name, "{text}");
    while let Ok(Some(cut)) = read_line_bounded(&mut input, STDERR_LINE_BYTES, &mut line) {
        log.line(&line, cut, Instant::now(), &mut emit);
    }
    log.finish(&mut emit);
}

/// Reads one line (without its newline) into `line`, keeping at most `max`
/// bytes and skipping the rest of a longer one. `Some(cut)` says whether bytes
/// were skipped; `None` at the end of the stream.
fn read_line_bounded(
    input: &mut impl BufRead,
    max: usize,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    line.clear();
    let (mut cut, mut any) = (false, false);
    loop {
        let buf = match input.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any.then_some(cut));
        }
        any = true;
        let (chunk, used, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        let room = max.saturating_sub(line.len());
        cut |= chunk.len() > room;
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        input.consume(used);
        if end {
            return Ok(Some(cut));
        }
    }
}

/// `bytes` escaped for one log line: text through [`crate::text::escape_line`],
/// bytes that are not UTF-8 as `\xHH`.
pub(super) fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(&crate::text::escape_line(chunk.valid()));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The rate bound on a server's log lines: at most [`STDERR_LINES_PER_SEC`] in
/// each one-second window; the lines dropped are counted and reported by one
/// line at the next window's first line, or at the end.
#[derive(Debug)]
struct StderrLog {
    window: Option<Instant>,
    in_window: u32,
    dropped: u64,
}

impl StderrLog {
    fn new() -> StderrLog {
        StderrLog {
            window: None,
            in_window: 0,
            dropped: 0,
        }
    }

    /// One raw line (`cut` when its end was dropped) arriving at `now`; `emit`
    /// receives what is to be logged.
    fn line(&mut self, raw: &[u8], cut: bool, now: Instant, emit: &mut impl FnMut(String)) {
        let fresh = self
            .window
            .is_none_or(|w| now.saturating_duration_since(w) >= Duration::from_secs(1));
        if fresh {
            self.finish(emit);
            self.window = Some(now);
            self.in_window = 0;
        }
        if self.in_window >= STDERR_LINES_PER_SEC {
            self.dropped += 1;
            return;
        }
        self.in_window += 1;
        let mut text = escape_bytes(raw);
        if cut {
            text.push_str(&format!(" … (line cut at {STDERR_LINE_BYTES} bytes)"));
        }
        emit(text);
    }

    /// Reports the lines dropped since the last report.
    fn finish(&mut self, emit: &mut impl FnMut(String)) {
        if self.dropped > 0 {
            emit(format!("… {} lines of stderr dropped", self.dropped));
            self.dropped = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logged(input: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        let mut log = StderrLog::new();
        let mut reader = BufReader::new(input);
        let mut line = Vec::new();
        let now = Instant::now();
        while let Some(cut) = read_line_bounded(&mut reader, STDERR_LINE_BYTES, &mut line).unwrap()
        {
            log.line(&line, cut, now, &mut |t| out.push(t));
        }
        log.finish(&mut |t| out.push(t));
        out
    }

    #[test]
    fn stderr_lines_are_escaped_so_no_escape_sequence_or_forged_line_reaches_the_log() {
        let out = logged(b"\x1b[31mred\x1b[0m\n\x1b]0;title\x07 a\rforged\nbad \xff\n");
        assert_eq!(
            out,
            [
                "\\x1b[31mred\\x1b[0m",
                "\\x1b]0;title\\x07 a\\x0dforged",
                "bad \\xff"
            ]
        );
    }

    #[test]
    fn a_long_line_is_cut_and_says_so() {
        let mut input = vec![b'a'; STDERR_LINE_BYTES * 3];
        input.extend_from_slice(b"\nnext");
        let out = logged(&input);
        assert_eq!(out.len(), 2);
        assert!(out[0].starts_with(&"a".repeat(STDERR_LINE_BYTES)));
        assert!(out[0].ends_with("(line cut at 4096 bytes)"), "{}", out[0]);
        assert_eq!(out[1], "next", "a last line without a newline is kept");
    }

    #[test]
    fn a_flood_is_bounded_per_second_and_the_dropped_lines_counted() {
        let mut out = Vec::new();
        let mut log = StderrLog::new();
        let start = Instant::now();
        for _ in 0..1000 {
            log.line(b"spam", false, start, &mut |t| out.push(t));
        }
        assert_eq!(out.len(), STDERR_LINES_PER_SEC as usize);
        log.line(b"later", false, start + Duration::from_secs(1), &mut |t| {
            out.push(t)
        });
        let n = STDERR_LINES_PER_SEC as usize;
        assert_eq!(
            out[n],
            format!("… {} lines of stderr dropped", 1000 - n),
            "the count comes before the next window's first line"
        );
        assert_eq!(out[n + 1], "later");
    }
}
