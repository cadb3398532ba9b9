//! A warm spare helper: the next call's `harnessd __sandbox-helper` is started
//! while the current call runs, and waits, blocked on its stdin, for its job. The
//! exec and start-up of the helper (about a millisecond and a half here) leave the
//! call's critical path. Nothing is confined yet while it waits: confinement
//! happens after the job is read, exactly as for a helper started on demand.
//!
//! Every helper is started by one long-lived thread, because the helper's
//! parent-death signal fires when the *thread* that started it exits.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};

use super::tool_environment;
use crate::sandbox::HELPER_ARG;

/// Starts a process on the spawner thread.
pub(crate) type Starter = Box<dyn FnOnce() -> std::io::Result<Child> + Send>;

/// What the spawner thread is asked to start.
enum Spawn {
    /// A helper in `workspace`.
    Helper {
        workspace: PathBuf,
        /// Receives the child when the caller waits for it; `None` fills the
        /// spare slot.
        reply: Option<mpsc::Sender<std::io::Result<Child>>>,
    },
    /// Whatever `start` starts (a spawn server).
    Other {
        start: Starter,
        reply: mpsc::Sender<std::io::Result<Child>>,
    },
}

/// The spawner thread and the spare it keeps.
#[derive(Debug)]
pub(crate) struct Spares {
    /// Sent to by callers, received by the spawner thread.
    tx: Mutex<mpsc::Sender<Spawn>>,
    /// A started helper waiting for its job, and the workspace it runs in.
    slot: Arc<Mutex<Option<(PathBuf, Child)>>>,
}

impl std::fmt::Debug for Spawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spawn::Helper { workspace, .. } => write!(f, "Spawn({})", workspace.display()),
            Spawn::Other { .. } => write!(f, "Spawn(other)"),
        }
    }
}

/// Starts a helper in `workspace` with a cleared, allow-listed environment and
/// every standard stream a pipe: it never inherits one of harnessd's (which may
/// be the operator's terminal).
pub(crate) fn start(helper: &Path, workspace: &Path) -> std::io::Result<Child> {
    Command::new(helper)
        .arg(HELPER_ARG)
        .env_clear()
        .envs(tool_environment(workspace))
        .current_dir(workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

impl Spares {
    /// Starts the spawner thread for `helper`.
    pub(crate) fn new(helper: PathBuf) -> Spares {
        let (tx, rx) = mpsc::channel::<Spawn>();
        let slot: Arc<Mutex<Option<(PathBuf, Child)>>> = Arc::default();
        let filled = slot.clone();
        let spawned = std::thread::Builder::new()
            .name("helper-spawner".into())
            .spawn(move || {
                while let Ok(req) = rx.recv() {
                    let (workspace, reply) = match req {
                        Spawn::Other { start, reply } => {
                            let _ = reply.send(start());
                            continue;
                        }
                        Spawn::Helper { workspace, reply } => (workspace, reply),
                    };
                    let child = start(&helper, &workspace);
                    match reply {
                        Some(reply) => {
                            let _ = reply.send(child);
                        }
                        None => {
                            if let (Ok(child), Ok(mut slot)) = (child, filled.lock()) {
                                // An unused older spare gets EOF on stdin and exits.
                                *slot = Some((workspace, child));
                            }
                        }
                    }
                }
                // Never exit: helpers already started would get their parent-death
                // signal. The process ending takes this thread with it.
                loop {
                    std::thread::park();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the helper spawner thread: {e}");
        }
        Spares {
            tx: Mutex::new(tx),
            slot,
        }
    }

    /// A helper running in `workspace`, waiting for its job; asks for the next
    /// spare to be started.
    pub(crate) fn take(&self, workspace: &Path) -> std::io::Result<Child> {
        let spare = self.slot.lock().ok().and_then(|mut s| s.take());
        let ready = match spare {
            Some((w, mut child)) if w == workspace => {
                // A spare that died while waiting (OOM, a stray signal) is replaced.
                matches!(child.try_wait(), Ok(None)).then_some(child)
            }
            _ => None,
        };
        let tx = self
            .tx
            .lock()
            .map_err(|_| std::io::Error::other("helper spawner lock poisoned"))?
            .clone();
        let child = match ready {
            Some(child) => child,
            None => {
                let (reply, answer) = mpsc::channel();
                tx.send(Spawn::Helper {
                    workspace: workspace.to_path_buf(),
                    reply: Some(reply),
                })
                .map_err(|_| std::io::Error::other("the helper spawner thread is gone"))?;
                answer
                    .recv()
                    .map_err(|_| std::io::Error::other("the helper spawner thread is gone"))??
            }
        };
        let _ = tx.send(Spawn::Helper {
            workspace: workspace.to_path_buf(),
            reply: None,
        });
        Ok(child)
    }

    /// Runs `start` on the spawner thread and returns what it started: a process
    /// whose parent-death signal is to fire only when the daemon ends.
    pub(crate) fn on_spawner_thread(&self, start: Starter) -> std::io::Result<Child> {
        let (reply, answer) = mpsc::channel();
        self.tx
            .lock()
            .map_err(|_| std::io::Error::other("helper spawner lock poisoned"))?
            .send(Spawn::Other { start, reply })
            .map_err(|_| std::io::Error::other("the helper spawner thread is gone"))?;
        answer
            .recv()
            .map_err(|_| std::io::Error::other("the helper spawner thread is gone"))?
    }
}
