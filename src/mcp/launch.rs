//! Starting a stdio server's process: the seam between a session and whatever runs
//! the program. In the product that is the sandbox ([`Sandboxed`], through `exec`,
//! the only place a process is spawned); the benchmark brings a launcher of its own
//! to compare against the same server run without confinement.

use std::path::PathBuf;
use std::pin::Pin;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::Loaded;

/// What a stdio server is started as: resolved from settings by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCommand {
    /// The server's name in `mcp.servers`.
    pub name: String,
    /// Program and arguments (the program is looked up on the sandbox's PATH).
    pub argv: Vec<String>,
    /// The server's own variables: name in the server → value (read from the
    /// daemon's environment by the caller).
    pub env: Vec<(String, String)>,
    /// Readable trees beyond the policy's read set, absolute.
    pub read: Vec<PathBuf>,
    /// Writable trees (none by default), absolute.
    pub write: Vec<PathBuf>,
    /// Whether it may use the network.
    pub network: bool,
}

/// How a server process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitStatus {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (_, Some(s)) => write!(f, "killed by signal {s}"),
            (Some(c), None) => write!(f, "exit code {c}"),
            (None, None) => f.write_str("ended"),
        }
    }
}

/// A started server: its stdio, the future of its end, and what keeps it alive.
pub struct Launched {
    /// The server's stdout.
    pub read: Pin<Box<dyn AsyncRead + Send>>,
    /// The server's stdin.
    pub write: Pin<Box<dyn AsyncWrite + Send>>,
    /// Resolves when the process has ended.
    pub exited: BoxFuture<'static, ExitStatus>,
    /// Its pid, for the record.
    pub pid: u32,
    /// Dropping it kills the server's whole process tree.
    pub keep: Box<dyn Send + Sync>,
}

/// Starts server processes.
pub trait Launch: Send + Sync {
    /// Starts `command` under the policy of `loaded`; the error is written for the
    /// model and the operator (what refused, and why).
    fn launch<'a>(
        &'a self,
        loaded: &'a Loaded,
        command: &'a ServerCommand,
    ) -> BoxFuture<'a, Result<Launched, String>>;
}

/// Starts servers in the sandbox, through the executor: the product's launcher.
#[derive(Debug, Clone)]
pub struct Sandboxed {
    /// Starts the confined helper.
    pub executor: crate::exec::Executor,
}

impl Launch for Sandboxed {
    fn launch<'a>(
        &'a self,
        loaded: &'a Loaded,
        command: &'a ServerCommand,
    ) -> BoxFuture<'a, Result<Launched, String>> {
        Box::pin(async move {
            let confine = crate::sandbox::Confinement::for_server(
                loaded,
                &command.read,
                &command.write,
                command.network,
            );
            let mut process = self
                .executor
                .start_server(&crate::exec::ServerRequest {
                    name: &command.name,
                    argv: &command.argv,
                    env: &command.env,
                    // The root, not the workspace: what a server finds relative to
                    // its working directory (`python -m` imports from there first)
                    // must not be something tools write.
                    workspace: &loaded.paths.root,
                    confine: &confine,
                })
                .await
                .map_err(|e| e.to_string())?;
            let (stdout, stdin) = process
                .take_stdio()
                .ok_or_else(|| "the server's pipes are missing".to_string())?;
            let mut exit = process.exit_watch();
            let exited = Box::pin(async move {
                let ended = exit.wait_for(Option::is_some).await.map(|e| *e);
                ended
                    .ok()
                    .flatten()
                    .map(|e| ExitStatus {
                        code: e.code,
                        signal: e.signal,
                    })
                    .unwrap_or_default()
            });
            Ok(Launched {
                read: Box::pin(stdout),
                write: Box::pin(stdin),
                exited,
                pid: process.pid(),
                keep: Box::new(process),
            })
        })
    }
}
