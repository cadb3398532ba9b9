//! What every owner of servers shares: the launcher, the audit log, the pins, and
//! the daemon's `shared` servers. A task gets its own [`TaskServers`]; dropping it
//! stops the task's servers.

use std::collections::HashMap;
use std::sync::Arc;

use super::McpError;
use super::launch::Launch;
use super::pins::PinStore;
use super::session::Server;
use super::spec::ServerSpec;
use crate::config::Loaded;
use crate::events::{Event, EventLog};
use crate::protocol::mcp::{Drift, PinFile, ToolDefinition};

/// The shared part; cheap to clone.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    launch: Arc<dyn Launch>,
    /// `None` for a hub that only lists (`mcp list` without a daemon): it records
    /// nothing, so it starts no task's server and pins nothing.
    events: Option<EventLog>,
    pins: PinStore,
    /// `shared: true` servers, by name, with the spec they were started with (a
    /// changed spec starts a new one; the old one stops when its last user drops it).
    shared: std::sync::Mutex<HashMap<String, Arc<Server>>>,
    /// Processes running per server name.
    running: std::sync::Mutex<HashMap<String, usize>>,
}

/// Counts one running process of a server while it lives.
pub(super) struct Running {
    hub: Hub,
    name: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self
            .hub
            .inner
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = running.get_mut(&self.name) {
            *n = n.saturating_sub(1);
        }
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub starting servers with `launch`, recording to `events`, pinning in
    /// `lock_file` (`policies/mcp.lock.json` of the root). Without `events` it can
    /// only list ([`Hub::list_now`], [`Hub::view`]).
    pub fn new(
        launch: Arc<dyn Launch>,
        events: Option<EventLog>,
        lock_file: std::path::PathBuf,
    ) -> Hub {
        Hub {
            inner: Arc::new(Inner {
                launch,
                events,
                pins: PinStore::new(lock_file),
                shared: std::sync::Mutex::new(HashMap::new()),
                running: std::sync::Mutex::new(HashMap::new()),
            }),
        }
    }

    pub(super) fn launcher(&self) -> &dyn Launch {
        &*self.inner.launch
    }

    /// The audit log; a hub without one refuses whatever it would record.
    pub(super) fn events(&self) -> Result<EventLog, McpError> {
        self.inner
            .events
            .clone()
            .ok_or_else(|| McpError::Internal("this MCP hub has no audit log to record to".into()))
    }

    /// Counts a process of `name` as running until the guard is dropped.
    pub(super) fn count_running(&self, name: &str) -> Running {
        let mut running = self.inner.running.lock().unwrap_or_else(|p| p.into_inner());
        *running.entry(name.to_string()).or_default() += 1;
        Running {
            hub: self.clone(),
            name: name.to_string(),
        }
    }

    /// How many processes of server `name` run now.
    pub fn running(&self, name: &str) -> usize {
        let running = self.inner.running.lock().unwrap_or_else(|p| p.into_inner());
        running.get(name).copied().unwrap_or(0)
    }

    /// The pins as the lock file holds them now.
    pub fn pins(&self) -> Arc<PinFile> {
        self.inner.pins.current()
    }

    /// The servers of one task (none started yet).
    pub fn for_task(&self) -> TaskServers {
        TaskServers {
            hub: self.clone(),
            servers: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// A server started only to list its tools (`mcp list`, `mcp pin`), stopped when
    /// dropped.
    pub fn one_off(&self, spec: ServerSpec) -> Server {
        Server::new(spec, None, self.clone())
    }

    /// The daemon's server `name`, started with `spec`.
    fn shared(&self, name: &str, spec: ServerSpec) -> Arc<Server> {
        let mut shared = self.inner.shared.lock().unwrap_or_else(|p| p.into_inner());
        match shared.get(name) {
            Some(s) if *s.spec() == spec => s.clone(),
            _ => {
                let s = Arc::new(Server::new(spec, None, self.clone()));
                shared.insert(name.to_string(), s.clone());
                s
            }
        }
    }

    /// Lets go of every shared server `loaded` no longer has as it was started
    /// (removed, changed, or no longer `shared`), after a reload: one no task uses
    /// stops now, one a task still uses when that task ends.
    pub fn retain_shared(&self, loaded: &Loaded) {
        let gone: Vec<Arc<Server>> = {
            let mut shared = self.inner.shared.lock().unwrap_or_else(|p| p.into_inner());
            let names: Vec<String> = shared
                .iter()
                .filter(|(name, s)| {
                    super::spec::server_spec(loaded, name)
                        .is_none_or(|(spec, is_shared)| !is_shared || spec != *s.spec())
                })
                .map(|(name, _)| name.clone())
                .collect();
            names.iter().filter_map(|n| shared.remove(n)).collect()
        };
        // Dropped outside the lock: a stop kills a process tree.
        drop(gone);
    }

    /// Stops every shared server (the daemon's end).
    pub fn stop_shared(&self) {
        self.inner
            .shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Holds what a server lists against its pins: a server never pinned is pinned
    /// now (`first_use`); otherwise any difference is recorded (at each start, and
    /// after a list change).
    pub(super) async fn held_against_pins(
        &self,
        task_id: Option<&str>,
        server: &str,
        listed: &[ToolDefinition],
    ) -> Result<(), McpError> {
        let pins = self.pins();
        if !pins.servers.contains_key(server) {
            self.pin(task_id, server, listed, "first_use").await?;
            return Ok(());
        }
        let drift = Drift::between(pins.servers.get(server), listed);
        if !drift.is_empty() {
            self.events()?
                .record(
                    task_id,
                    Event::McpToolsChanged {
                        server: server.to_string(),
                        added: drift.added,
                        removed: drift.removed,
                        changed: drift.changed,
                    },
                )
                .await?;
        }
        Ok(())
    }

    /// Accepts `listed` as `server`'s definitions: `mcp_tools_pinned` is recorded,
    /// then the lock file rewritten; a record that fails leaves the file as it was.
    pub async fn pin(
        &self,
        task_id: Option<&str>,
        server: &str,
        listed: &[ToolDefinition],
        by: &str,
    ) -> Result<Vec<String>, McpError> {
        let events = self.events()?;
        let record = |tools: Vec<String>| async move {
            let event = Event::McpToolsPinned {
                server: server.to_string(),
                tools,
                by: by.to_string(),
            };
            events
                .record(task_id, event)
                .await
                .map(|_| ())
                .map_err(McpError::Log)
        };
        self.inner.pins.pin(server, listed, record).await
    }
}

/// The servers one task has used; dropping it stops its own (not the shared ones).
pub struct TaskServers {
    hub: Hub,
    servers: std::sync::Mutex<HashMap<String, Arc<Server>>>,
}

impl std::fmt::Debug for TaskServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskServers").finish_non_exhaustive()
    }
}

impl TaskServers {
    /// The hub it draws on.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// Server `name` for task `task_id` under `loaded`'s settings: the one the task
    /// already runs (a task keeps its servers across reloads), else a new one (or
    /// the daemon's, for `shared`). `None`: no such server in the settings.
    pub fn server(&self, loaded: &Loaded, name: &str, task_id: &str) -> Option<Arc<Server>> {
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = servers.get(name) {
            return Some(s.clone());
        }
        let (spec, shared) = super::spec::server_spec(loaded, name)?;
        let server = if shared {
            self.hub.shared(name, spec)
        } else {
            Arc::new(Server::new(
                spec,
                Some(task_id.to_string()),
                self.hub.clone(),
            ))
        };
        servers.insert(name.to_string(), server.clone());
        Some(server)
    }

    /// Whether this task has used server `name` (started it, or tried to).
    pub fn has(&self, name: &str) -> bool {
        self.servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(name)
    }

    /// What server `name` listed last for this task (its own, or the daemon's
    /// shared one); `None` when it has not been started.
    pub fn last_listed(&self, name: &str) -> Option<Arc<Vec<ToolDefinition>>> {
        let own = self
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        let server = own.or_else(|| {
            let shared = self
                .hub
                .inner
                .shared
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            shared.get(name).cloned()
        })?;
        server.last_listed()
    }

    /// Stops the task's own servers now.
    pub fn stop(&self) {
        self.servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}
