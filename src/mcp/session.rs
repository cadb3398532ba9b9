//! One server's life for its owner (a task, or the daemon for a `shared` server):
//! started at first use, its tools listed and held against the pins, a death
//! recorded and the next start held back (backoff), stopped with its owner.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;

use super::McpError;
use super::client::{self, ClientError, Connection, Note};
use super::hub::Hub;
use super::launch::{ExitStatus, Launched};
use super::spec::{ServerSpec, Transport};
use crate::config::Loaded;
use crate::events::Event;
use crate::protocol::mcp::{Drift, ToolDefinition};

/// The delay before start number `failures + 1` after `failures` deaths in a row:
/// none after the first, then 1 s doubling to a minute.
pub fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs((1u64 << (n - 2).min(6)).min(60)),
    }
}

/// A running server.
struct Live {
    conn: Arc<Connection>,
    /// What it listed at its start (or at its last list change).
    listed: Arc<Vec<ToolDefinition>>,
    /// Its end, once known.
    exit: watch::Receiver<Option<ExitStatus>>,
    /// Set before a deliberate stop, so the end is not recorded as a death.
    stopping: Arc<AtomicBool>,
    /// Set when the server says its tool list changed.
    relist: Arc<AtomicBool>,
    /// Dropping it kills the process tree.
    _keep: Box<dyn Send + Sync>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    /// Deaths since the last successful call.
    failures: u32,
    /// No start before this.
    not_before: Option<Instant>,
}

/// One server of one owner.
pub struct Server {
    spec: ServerSpec,
    /// The task it belongs to (`None`: shared by the daemon).
    task_id: Option<String>,
    hub: Hub,
    state: Mutex<State>,
    /// What it listed last, readable without waiting for a call in progress: the
    /// tools a turn offers leave out what drifted.
    last_listed: std::sync::Mutex<Option<Arc<Vec<ToolDefinition>>>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("spec", &self.spec)
            .field("task_id", &self.task_id)
            .finish_non_exhaustive()
    }
}

impl Server {
    pub(super) fn new(spec: ServerSpec, task_id: Option<String>, hub: Hub) -> Server {
        Server {
            spec,
            task_id,
            hub,
            state: Mutex::new(State::default()),
            last_listed: std::sync::Mutex::new(None),
        }
    }

    /// What it is started as.
    pub fn spec(&self) -> &ServerSpec {
        &self.spec
    }

    /// What it listed at its last start or list change; `None` before its first start.
    pub fn last_listed(&self) -> Option<Arc<Vec<ToolDefinition>>> {
        self.last_listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_listed(&self, listed: &Arc<Vec<ToolDefinition>>) {
        *self.last_listed.lock().unwrap_or_else(|p| p.into_inner()) = Some(listed.clone());
    }

    /// The tools it lists now, starting it if it is not running; a start (or
    /// re-list) `cancel` interrupts is given up, the process killed.
    pub async fn listed(
        &self,
        loaded: &Loaded,
        cancel: &CancellationToken,
    ) -> Result<Arc<Vec<ToolDefinition>>, McpError> {
        Ok(self.connection(loaded, cancel).await?.1)
    }

    /// Calls `tool`. A server that dies during the call is recorded and its next
    /// start held back; the error says so.
    pub async fn call(
        &self,
        loaded: &Loaded,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Value, McpError> {
        let (conn, _, exit) = self.connection(loaded, cancel).await?;
        match conn.call(tool, arguments, self.spec.timeout, cancel).await {
            Ok(answer) => {
                self.state.lock().await.failures = 0;
                Ok(answer)
            }
            Err(ClientError::Closed) => Err(self.died(&conn, exit).await),
            Err(e) => Err(McpError::Client(self.name().to_string(), e)),
        }
    }

    fn name(&self) -> &str {
        &self.spec.name
    }

    /// The server's end after `conn` closed: waits briefly for the exit status,
    /// drops the live process, holds the next start back. A shared server another
    /// call already started again is left running.
    async fn died(
        &self,
        conn: &Arc<Connection>,
        mut exit: watch::Receiver<Option<ExitStatus>>,
    ) -> McpError {
        let status = tokio::time::timeout(Duration::from_secs(2), exit.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|s| *s));
        let mut state = self.state.lock().await;
        let same = state
            .live
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(&l.conn, conn));
        if same {
            state.live = None;
            state.failures += 1;
            let wait = backoff(state.failures);
            state.not_before = Some(Instant::now() + wait);
        }
        let wait = state.not_before.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        });
        McpError::Died {
            server: self.name().to_string(),
            status: status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "closed its output".into()),
            retry_in: wait,
        }
    }

    /// The live connection, started (or re-listed) as needed.
    async fn connection(
        &self,
        loaded: &Loaded,
        cancel: &CancellationToken,
    ) -> Result<
        (
            Arc<Connection>,
            Arc<Vec<ToolDefinition>>,
            watch::Receiver<Option<ExitStatus>>,
        ),
        McpError,
    > {
        let mut state = self.state.lock().await;
        if let Some(live) = &state.live
            && (live.exit.borrow().is_some() || !live.conn.is_open())
        {
            // Died while idle: its death was recorded by the watcher.
            state.live = None;
            state.failures += 1;
            state.not_before = Some(Instant::now() + backoff(state.failures));
        }
        if state.live.is_none() {
            if let Some(t) = state.not_before
                && t > Instant::now()
            {
                return Err(McpError::HeldBack {
                    server: self.name().to_string(),
                    retry_in: t - Instant::now(),
                });
            }
            match self.start(loaded, cancel).await {
                Ok(live) => state.live = Some(live),
                // Not the server's failure: the next user starts it at once.
                Err(e @ McpError::Client(_, ClientError::Cancelled)) => return Err(e),
                Err(e) => {
                    // A server that cannot start is held back like one that died.
                    state.failures += 1;
                    state.not_before = Some(Instant::now() + backoff(state.failures));
                    return Err(e);
                }
            }
        }
        let Some(live) = state.live.as_mut() else {
            return Err(McpError::Internal("no live server after a start".into()));
        };
        if live.relist.swap(false, Ordering::SeqCst) {
            let listed = self
                .unless_cancelled(cancel, live.conn.list_tools(self.spec.timeout))
                .await?;
            let listed = listed.map_err(|e| McpError::Client(self.name().to_string(), e))?;
            self.hub
                .held_against_pins(self.task_id.as_deref(), self.name(), &listed)
                .await?;
            live.listed = Arc::new(listed);
            self.set_listed(&live.listed);
        }
        Ok((live.conn.clone(), live.listed.clone(), live.exit.clone()))
    }

    /// `work`, unless `cancel` fires first: then it is dropped (a process it
    /// started is killed) and the error says the task was cancelled.
    async fn unless_cancelled<T>(
        &self,
        cancel: &CancellationToken,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, McpError> {
        tokio::select! {
            done = work => Ok(done),
            () = cancel.cancelled() => {
                Err(McpError::Client(self.name().to_string(), ClientError::Cancelled))
            }
        }
    }

    /// Starts the process (or reaches the remote server), connects, lists its tools
    /// and holds them against the pins. `cancel` interrupts the start, the
    /// handshake and the listing (never the pinning, which writes the lock file
    /// and its record together).
    async fn start(&self, loaded: &Loaded, cancel: &CancellationToken) -> Result<Live, McpError> {
        let name = self.name().to_string();
        let events = self.hub.events()?;
        let (tx, exit) = watch::channel(None);
        let stopping = Arc::new(AtomicBool::new(false));
        let (conn, notes, pid, keep) = match &self.spec.transport {
            Transport::Stdio(command) => {
                let launched: Launched = self
                    .unless_cancelled(cancel, self.hub.launcher().launch(loaded, command))
                    .await?
                    .map_err(|why| McpError::Start(name.clone(), why))?;
                self.watch_exit(launched.exited, tx, stopping.clone(), events.clone());
                let (conn, notes) = self
                    .unless_cancelled(cancel, client::connect(launched.read, launched.write))
                    .await
                    .inspect_err(|_| stop_asked(&stopping))?
                    .map_err(|e| McpError::Client(name.clone(), e))?;
                (conn, notes, launched.pid, launched.keep)
            }
            Transport::Http(target) => {
                let (conn, notes) = self
                    .unless_cancelled(cancel, super::http::connect(target))
                    .await?
                    .map_err(|e| McpError::Client(name.clone(), e))?;
                // No process: nothing ends but the connection.
                let keep: Box<dyn Send + Sync> = Box::new(tx);
                (conn, notes, 0, keep)
            }
        };
        events
            .record(
                self.task_id.as_deref(),
                Event::McpServerStarted {
                    server: name.clone(),
                    protocol: conn.handshake.protocol.clone(),
                    server_info: conn.handshake.server_info.clone(),
                    pid,
                },
            )
            .await?;
        let relist = Arc::new(AtomicBool::new(false));
        self.forward_notes(notes, relist.clone(), events);
        let listed = self
            .unless_cancelled(cancel, conn.list_tools(self.spec.timeout))
            .await
            .inspect_err(|_| stop_asked(&stopping))?
            .map_err(|e| McpError::Client(name.clone(), e))?;
        self.hub
            .held_against_pins(self.task_id.as_deref(), &name, &listed)
            .await?;
        let listed = Arc::new(listed);
        self.set_listed(&listed);
        Ok(Live {
            conn: Arc::new(conn),
            listed,
            exit,
            stopping,
            relist,
            _keep: keep,
        })
    }

    /// Records the server's end unless it was asked to stop.
    fn watch_exit(
        &self,
        exited: futures::future::BoxFuture<'static, ExitStatus>,
        tx: watch::Sender<Option<ExitStatus>>,
        stopping: Arc<AtomicBool>,
        events: crate::events::EventLog,
    ) {
        let task_id = self.task_id.clone();
        let server = self.name().to_string();
        let counted = self.hub.count_running(&server);
        tokio::spawn(async move {
            let status = exited.await;
            drop(counted);
            // Recorded before the status is published: a call that learns of the
            // death from the status finds it on the record already.
            if !stopping.load(Ordering::SeqCst) {
                let event = Event::McpServerExited {
                    server,
                    code: status.code,
                    signal: status.signal,
                };
                if let Err(e) = events.record(task_id.as_deref(), event).await {
                    tracing::error!("cannot record an MCP server's exit: {e}");
                }
            }
            let _ = tx.send(Some(status));
        });
    }

    /// Records each refused request; flags a list change for the next use.
    fn forward_notes(
        &self,
        mut notes: tokio::sync::mpsc::Receiver<Note>,
        relist: Arc<AtomicBool>,
        events: crate::events::EventLog,
    ) {
        let task_id = self.task_id.clone();
        let server = self.name().to_string();
        tokio::spawn(async move {
            while let Some(note) = notes.recv().await {
                match note {
                    Note::ToolsChanged => relist.store(true, Ordering::SeqCst),
                    Note::Refused(method) => {
                        let event = Event::McpRequestRefused {
                            server: server.clone(),
                            method,
                        };
                        if let Err(e) = events.record(task_id.as_deref(), event).await {
                            tracing::error!("cannot record a refused MCP request: {e}");
                        }
                    }
                }
            }
        });
    }
}

/// Marks a process about to be killed because its start was cancelled: a stop
/// asked for, not a death.
fn stop_asked(stopping: &AtomicBool) {
    stopping.store(true, Ordering::SeqCst);
}

/// Whether `listed` holds `tool` exactly as pinned: the call's `current` for policy.
pub fn is_current(listed: &[ToolDefinition], pinned: Option<&ToolDefinition>) -> bool {
    let Some(pinned) = pinned else {
        return false;
    };
    listed
        .iter()
        .find(|d| d.name == pinned.name)
        .is_some_and(|d| d.sha256() == pinned.sha256())
}

/// What differs, for the record.
pub fn drift_of(
    pins: &crate::protocol::mcp::PinFile,
    server: &str,
    listed: &[ToolDefinition],
) -> Drift {
    Drift::between(pins.servers.get(server), listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_a_minute() {
        let secs: Vec<u64> = (0..10).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [0, 0, 1, 2, 4, 8, 16, 32, 60, 60]);
    }
}
