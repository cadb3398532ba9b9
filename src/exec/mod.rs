//! The parent side of tool execution, and the only place harnessd spawns processes.
//!
//! [`Executor::run`] starts the helper (`harnessd __sandbox-helper`, see
//! [`crate::sandbox`]) with a cleared, allow-listed environment in its own process
//! group, hands it the [`Job`] on stdin, reads stdout and stderr with a bound
//! ([`capture`]), enforces the wall-clock timeout, and kills the whole process group
//! when the job ends, times out, floods its output or is cancelled. A job's output
//! is always read through pipes, even when it is relayed to harnessd's own
//! stdout and stderr (`relay`): a job never holds a descriptor of the operator's
//! terminal. [`Executor::start_server`] starts a long-running server through the
//! same helper, with a live stdin and stdout (`server`). It decides no policy:
//! what it is given has already been allowed.

mod acl;
pub mod budget;
pub mod capture;
pub mod cgroup;
mod cgroup_moves;
mod confinement;
mod hook;
mod readers;
mod relay;
mod server;
mod spare;
mod spawn_server;
pub mod verdict;
mod workspace;

pub use hook::{HOOK_STDOUT_BYTES, HookRequest, HookRun};
pub use server::{ServerError, ServerExit, ServerProcess, ServerRequest};
pub use workspace::{PLANTED_PREFIX, WorkspaceChanges, WorkspaceError, prepare_workspace};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;
use wait_timeout::ChildExt;

pub use budget::{CutReason, SpoolBudget};
pub use capture::Captured;
use capture::Sink;
/// Removes the idle pooled call cgroups; for a clean exit.
pub use cgroup::remove_pooled as remove_pooled_cgroups;
/// `serve`'s own cgroup, limited to `daemon.memory_mb`.
pub use cgroup::{confine_daemon, daemon_confinement, leave_daemon_cgroup};
/// Whether joining a call cgroup waits for an RCU grace period here, and `check`'s
/// warning when it may.
pub use cgroup_moves::{favours_moves, slow_join_warning};

use crate::sandbox::{Confinement, HelperRequest, Job, Report, Require};

/// Bytes of one stream written to disk before the process tree is killed.
pub const FLOOD_CAP_BYTES: u64 = 64 * 1024 * 1024;

/// Temporary directory of tools, inside the workspace (`/tmp` is not allowed).
pub const TMP_DIR: &str = ".tmp";

/// How long to wait for output pipes to close after the process group was killed
/// (a descendant that left the group may still hold them).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The helper (or the program it became) exited with this code.
    Exited(i32),
    /// It was killed by this signal (not by us).
    Signaled(i32),
    /// The timeout passed; the tree was killed.
    TimedOut,
    /// Output passed [`FLOOD_CAP_BYTES`]; the tree was killed.
    Flooded,
    /// The task was cancelled; the tree was killed.
    Cancelled,
    /// The helper could not be started.
    SpawnFailed(String),
}

/// What one job produced.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    /// How it ended.
    pub ending: Ending,
    /// Its standard output.
    pub stdout: Captured,
    /// Its standard error.
    pub stderr: Captured,
    /// Wall-clock time from spawn to the end.
    pub duration: Duration,
    /// Problems keeping the full output (e.g. a spool file that could not be written).
    pub notes: Vec<String>,
}

/// One job to run.
#[derive(Debug)]
pub struct ExecRequest<'a> {
    /// What to do.
    pub job: &'a Job,
    /// Working directory (and HOME) of the process.
    pub workspace: &'a Path,
    /// The confinement the helper applies before the job.
    pub confine: &'a Confinement,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Where to spool full output: `<prefix>.stdout.part` and `<prefix>.stderr.part`.
    pub spool_prefix: Option<PathBuf>,
    /// What of the output may be spooled: the task's budget and the disk floor.
    pub spool_budget: SpoolBudget,
    /// Bytes of head and of tail kept in memory per stream.
    pub keep_bytes: usize,
    /// Copy the job's stdout and stderr to harnessd's own as they arrive
    /// (`harnessd sandbox -- CMD`), escaped where those are a terminal, with no
    /// flood cap (nothing is kept). The job still writes into pipes: it never gets
    /// the operator's terminal.
    pub relay_output: bool,
    /// Cancels the job: the tree is killed within about 50 ms.
    pub cancel: &'a CancellationToken,
}

/// Spawns helpers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Executor {
    helper: PathBuf,
    /// Layers the sandbox lacks when `sandbox.require` is `best_effort` (from a
    /// probe at start), stated in every `tool_finished`.
    weakened: Option<String>,
    /// Starts helpers ahead of need; shared by every clone.
    spares: Arc<spare::Spares>,
    /// The spawn servers tool calls run in; shared by every clone. `None` runs
    /// every call through a helper of its own.
    servers: Option<Arc<spawn_server::SpawnServers>>,
}

impl Executor {
    /// An executor that re-executes `helper` (normally `/proc/self/exe`).
    pub fn new(helper: PathBuf) -> Executor {
        Executor {
            spares: Arc::new(spare::Spares::new(helper.clone())),
            servers: Some(Arc::new(spawn_server::SpawnServers::new(helper.clone()))),
            helper,
            weakened: None,
        }
    }

    /// Runs every call through a helper of its own instead of a spawn server
    /// (the benchmark compares the two).
    pub fn without_spawn_servers(mut self) -> Executor {
        self.servers = None;
        self
    }

    /// The pids of the live spawn servers.
    pub fn spawn_server_pids(&self) -> Vec<u32> {
        self.servers.as_ref().map(|s| s.pids()).unwrap_or_default()
    }

    /// How many spawn servers are live.
    pub fn spawn_servers(&self) -> usize {
        self.servers.as_ref().map_or(0, |s| s.count())
    }

    /// Records what a probe found missing, for [`Executor::weakened`].
    pub fn set_weakened(&mut self, missing: Option<String>) {
        self.weakened = missing;
    }

    /// What the sandbox lacks, when it runs weakened (`best_effort`).
    pub fn weakened(&self) -> Option<&str> {
        self.weakened.as_deref()
    }

    /// Runs a probe job: confines a helper exactly as a tool would be (but never
    /// refusing, so every layer is reported) and returns its report.
    pub fn probe(&self, confine: &Confinement, workspace: &Path) -> Result<Report, String> {
        let mut confine = confine.clone();
        confine.limits.require = Require::BestEffort;
        let never = CancellationToken::new();
        let outcome = self.run(&ExecRequest {
            job: &Job::Probe,
            workspace,
            confine: &confine,
            timeout: Duration::from_secs(10),
            spool_prefix: None,
            spool_budget: SpoolBudget::unlimited(),
            keep_bytes: 64 * 1024,
            cancel: &never,
            relay_output: false,
        });
        if outcome.ending != Ending::Exited(0) {
            return Err(format!(
                "the sandbox probe failed ({:?}): {}",
                outcome.ending,
                outcome.stderr.text().trim()
            ));
        }
        let mut report: Report = serde_json::from_slice(&outcome.stdout.bytes())
            .map_err(|e| format!("the sandbox probe printed no report: {e}"))?;
        // Not required (a `full` sandbox runs without it): the rlimits still hold
        // per process and per uid.
        match cgroup::available() {
            Some(kind) => report.push_optional("cgroup", true, format!("{kind}: memory {} MiB and {} processes for the whole call", confine.limits.memory_mb, confine.limits.max_processes)),
            None => report.push_optional("cgroup", false, "no writable cgroup with memory and pids controllers (run under systemd with Delegate=yes): limits are per process and per uid only"),
        }
        Ok(report)
    }

    /// Runs one job to its end. Blocking: call it from a blocking thread.
    pub fn run(&self, req: &ExecRequest<'_>) -> ExecOutcome {
        self.run_fed(req, None)
    }

    /// [`Executor::run`], with `input` written after the job on the helper's
    /// stdin, for a job that keeps it ([`Job::Hook`]): written by a thread of its
    /// own, so a program that never reads it cannot stall the timeout.
    fn run_fed(&self, req: &ExecRequest<'_>, input: Option<Vec<u8>>) -> ExecOutcome {
        let started = Instant::now();
        let sinks = sinks(req);
        // Created before the spawn so the helper joins it before it reads its job,
        // that is before it can start anything.
        let cgroup = cgroup::CallCgroup::create(
            req.confine.limits.memory_mb,
            req.confine.limits.max_processes,
        );
        // A fed job (a hook) keeps its stdin and a probe reports layers: those
        // take a helper of their own. `harnessd sandbox -- CMD` takes the same
        // path as a tool call, so what it shows of the sandbox is what tools get.
        if let Some(servers) = &self.servers
            && input.is_none()
            && !matches!(
                req.job,
                Job::Probe | Job::McpServer { .. } | Job::Hook { .. }
            )
        {
            let request = HelperRequest {
                job: req.job.clone(),
                confine: req.confine.clone(),
            };
            let start = spawn_server::Start {
                request: &request,
                workspace: req.workspace,
                cgroup: cgroup.as_ref(),
                limit: req.timeout,
            };
            match servers.start(&self.spares, &start) {
                Ok(call) => return finish_server_call(call, req, sinks, cgroup, started),
                Err(spawn_server::StartError::Failed(e)) => {
                    if let Some(cg) = cgroup {
                        cg.release();
                    }
                    return ExecOutcome {
                        ending: Ending::SpawnFailed(e),
                        stdout: Captured::default(),
                        stderr: Captured::default(),
                        duration: started.elapsed(),
                        notes: Vec::new(),
                    };
                }
                // Nothing ran: the call takes a helper of its own, confined the
                // same way.
                Err(spawn_server::StartError::NotSent(e)) => {
                    tracing::warn!("spawn server unavailable, starting a helper instead: {e}");
                }
            }
        }
        let mut child = match self.spawn(req, cgroup.as_ref(), input) {
            Ok(child) => child,
            Err(e) => {
                if let Some(cg) = cgroup {
                    cg.release();
                }
                return self.spawn_failed(&e, started);
            }
        };
        // The helper makes itself a session (and process group) leader, so its pid
        // names the group; killing it also kills the PID namespace it supervises.
        let pgid = Pid::from_raw(child.id() as i32);
        let flooded = Arc::new(AtomicBool::new(false));
        let pipes = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ];
        let readers = Readers::spawn(pipes, req, &sinks, Killer::Group(pgid), &flooded);
        let ending = wait(|limit| wait_child(&mut child, limit), req, &flooded);
        // Whatever the ending, nothing the job started may outlive it: background
        // jobs left behind would also hold our pipes open.
        kill_tree(pgid);
        let _ = child.wait();
        outcome(ending, readers, sinks, cgroup, started)
    }

    /// The outcome of a job whose helper could not be started.
    fn spawn_failed(&self, e: &std::io::Error, started: Instant) -> ExecOutcome {
        ExecOutcome {
            ending: Ending::SpawnFailed(format!("cannot start {}: {e}", self.helper.display())),
            stdout: Captured::default(),
            stderr: Captured::default(),
            duration: started.elapsed(),
            notes: Vec::new(),
        }
    }

    fn spawn(
        &self,
        req: &ExecRequest<'_>,
        cgroup: Option<&cgroup::CallCgroup>,
        input: Option<Vec<u8>>,
    ) -> std::io::Result<Child> {
        let request = HelperRequest {
            job: req.job.clone(),
            confine: req.confine.clone(),
        };
        // A relayed job is a one-off (`harnessd sandbox`): no spare to leave behind.
        // A fed one (a hook) runs from the root, not the workspace: taking the spare
        // would swap the tools' warm helper for one in the hook's directory.
        let spare = !req.relay_output && input.is_none();
        let mut child = self.start_helper(&request, req.workspace, cgroup, spare)?;
        let stdin = child.stdin.take();
        match (stdin, input) {
            (Some(mut stdin), Some(input)) => {
                // A write error is the program's end (it closed its stdin or
                // exited): what it did then is its answer.
                std::thread::Builder::new()
                    .name("exec-stdin".into())
                    .spawn(move || {
                        let _ = stdin.write_all(&input);
                    })?;
            }
            // End of stdin: the helper has replaced its own by /dev/null anyway.
            (stdin, _) => drop(stdin),
        }
        Ok(child)
    }

    /// A helper in `workspace` (a spare when `spare`, else one started for this
    /// job alone), in `cgroup`, that has been sent `request`; its stdin is still
    /// open.
    fn start_helper(
        &self,
        request: &HelperRequest,
        workspace: &Path,
        cgroup: Option<&cgroup::CallCgroup>,
        spare: bool,
    ) -> std::io::Result<Child> {
        let job = crate::sandbox::frame(request).map_err(std::io::Error::other)?;
        let mut child = if spare {
            self.spares.take(workspace)?
        } else {
            spare::start(&self.helper, workspace)?
        };
        let abandon = |child: &mut Child| {
            kill_tree(Pid::from_raw(child.id() as i32));
            let _ = child.wait();
        };
        if let Some(cg) = cgroup
            && let Err(e) = cg.add(child.id())
        {
            abandon(&mut child);
            return Err(std::io::Error::other(format!(
                "cannot join the call's cgroup: {e}"
            )));
        }
        if let Some(stdin) = child.stdin.as_mut() {
            // The helper reads the whole job before it prints anything, so this
            // cannot deadlock against a full stdout pipe.
            if let Err(e) = stdin.write_all(&job) {
                abandon(&mut child);
                return Err(e);
            }
        }
        Ok(child)
    }
}

/// The stdout and stderr sinks of a job, spooling to `<spool_prefix>.stdout.part`
/// and `.stderr.part` when the caller keeps the full output.
fn sinks(req: &ExecRequest<'_>) -> [Arc<Mutex<Sink>>; 2] {
    let spool = |suffix: &str| {
        req.spool_prefix.as_ref().map(|p| {
            let mut s = p.clone().into_os_string();
            s.push(suffix);
            PathBuf::from(s)
        })
    };
    [
        Arc::new(Mutex::new(
            Sink::new(req.keep_bytes, spool(".stdout.part")).with_budget(req.spool_budget.clone()),
        )),
        Arc::new(Mutex::new(
            Sink::new(req.keep_bytes, spool(".stderr.part")).with_budget(req.spool_budget.clone()),
        )),
    ]
}

/// The threads pumping the helper's stdout and stderr into their sinks.
struct Readers {
    /// How many were started (a pipe may be missing).
    count: usize,
    /// Each reader sends once when its pipe closes.
    done: mpsc::Receiver<()>,
}

impl Readers {
    /// Starts one reader per pipe of `child`. A reader that sees its stream pass
    /// the cap sets `flooded` and kills the process group `pgid`.
    fn spawn(
        pipes: [Option<Box<dyn std::io::Read + Send>>; 2],
        req: &ExecRequest<'_>,
        sinks: &[Arc<Mutex<Sink>>; 2],
        killer: Killer,
        flooded: &Arc<AtomicBool>,
    ) -> Readers {
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let mut readers = 0;
        let targets = [relay::Target::Stdout, relay::Target::Stderr];
        // Relayed output goes to harnessd's own streams (`harnessd sandbox` keeps
        // none of it), so only where it goes bounds it, as when a command runs there
        // itself.
        let cap = if req.relay_output {
            u64::MAX
        } else {
            FLOOD_CAP_BYTES
        };
        for ((pipe, sink), target) in pipes.into_iter().zip(sinks.iter()).zip(targets) {
            let Some(pipe) = pipe else { continue };
            let (sink, flooded, done_tx) = (sink.clone(), flooded.clone(), done_tx.clone());
            let killer = killer.clone();
            let mut relay = req.relay_output.then(|| relay::Relay::new(target));
            readers += 1;
            readers::run(Box::new(move || {
                let on_flood = || {
                    flooded.store(true, std::sync::atomic::Ordering::SeqCst);
                    killer.kill();
                };
                capture::pump(pipe, sink, cap, on_flood, |chunk| {
                    relay.as_mut().is_none_or(|r| r.write(chunk))
                });
                if let Some(r) = &mut relay {
                    r.finish();
                }
                let _ = done_tx.send(());
            }));
        }
        Readers {
            count: readers,
            done: done_rx,
        }
    }

    /// Waits up to [`DRAIN_GRACE`] for every pipe to close, after the process
    /// group was killed; returns a note when one was still held open.
    fn drain(self) -> Option<String> {
        let deadline = Instant::now() + DRAIN_GRACE;
        for _ in 0..self.count {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.done.recv_timeout(left).is_err() {
                return Some(
                    "output pipes were still held open by a process that left the tool's \
                     process group; output after this point is not recorded"
                        .to_string(),
                );
            }
        }
        None
    }
}

/// What the sinks hold, stdout then stderr, noting a full-output spool that
/// failed.
fn snapshot(sinks: [Arc<Mutex<Sink>>; 2], notes: &mut Vec<String>) -> [Captured; 2] {
    sinks.map(|s| match s.lock() {
        Ok(s) => {
            if let Some(e) = s.spool_error() {
                notes.push(format!("full output not kept: {e}"));
            }
            s.snapshot()
        }
        Err(_) => Captured::default(),
    })
}

/// Waits for the job to end: its exit, the timeout, a flood or cancellation.
/// `wait_for(limit)` waits at most `limit` for the exit: its ending, `None`
/// while the job runs.
fn wait(
    mut wait_for: impl FnMut(Duration) -> Result<Option<Ending>, String>,
    req: &ExecRequest<'_>,
    flooded: &std::sync::atomic::AtomicBool,
) -> Ending {
    // A timeout past what an `Instant` holds is no deadline (rather than a panic
    // that would skip killing the tree).
    let deadline = Instant::now().checked_add(req.timeout);
    // Short slices so cancellation is noticed; an exit is noticed at once.
    let slice = Duration::from_millis(50);
    loop {
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if left.is_zero() {
            return Ending::TimedOut;
        }
        match wait_for(left.min(slice)) {
            Ok(Some(_)) if flooded.load(std::sync::atomic::Ordering::SeqCst) => {
                return Ending::Flooded;
            }
            Ok(Some(ending)) => return ending,
            Ok(None) => {
                if req.cancel.is_cancelled() {
                    return Ending::Cancelled;
                }
            }
            Err(e) => return Ending::SpawnFailed(e),
        }
    }
}

/// [`wait`]'s step for a helper: its exit status as an ending.
fn wait_child(child: &mut Child, limit: Duration) -> Result<Option<Ending>, String> {
    use std::os::unix::process::ExitStatusExt;
    match child.wait_timeout(limit) {
        Ok(Some(status)) => Ok(Some(match (status.code(), status.signal()) {
            (Some(code), _) => Ending::Exited(code),
            (None, Some(sig)) => Ending::Signaled(sig),
            (None, None) => Ending::Exited(-1),
        })),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("cannot wait for the tool: {e}")),
    }
}

/// How to kill a job's whole process tree.
#[derive(Debug, Clone)]
enum Killer {
    /// A helper's process group ([`kill_tree`]).
    Group(Pid),
    /// A spawn server's child, by its pidfd.
    PidFd(Arc<std::os::fd::OwnedFd>),
}

impl Killer {
    fn kill(&self) {
        match self {
            Killer::Group(pgid) => kill_tree(*pgid),
            Killer::PidFd(fd) => spawn_server::kill_pidfd(fd),
        }
    }
}

/// The rest of [`Executor::run`] for a call a spawn server started: read its
/// output, wait for its end, kill what is left, return the cgroup.
fn finish_server_call(
    mut call: spawn_server::ServerCall,
    req: &ExecRequest<'_>,
    sinks: [Arc<Mutex<Sink>>; 2],
    cgroup: Option<cgroup::CallCgroup>,
    started: Instant,
) -> ExecOutcome {
    let flooded = Arc::new(AtomicBool::new(false));
    let killer = Killer::PidFd(call.killer());
    let pipes = [
        call.stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        call.stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ];
    let readers = Readers::spawn(pipes, req, &sinks, killer.clone(), &flooded);
    let ending = wait(
        |limit| Ok(call.wait_for(limit)?.map(Ending::Exited)),
        req,
        &flooded,
    );
    // The namespace's PID 1 is gone or goes now: every process in it with it.
    killer.kill();
    outcome(ending, readers, sinks, cgroup, started)
}

/// A call's outcome once its tree is gone: the call cgroup given back, the
/// readers' last output drained, what they kept.
fn outcome(
    ending: Ending,
    readers: Readers,
    sinks: [Arc<Mutex<Sink>>; 2],
    cgroup: Option<cgroup::CallCgroup>,
    started: Instant,
) -> ExecOutcome {
    if let Some(cg) = cgroup {
        cg.release();
    }
    let mut notes: Vec<String> = readers.drain().into_iter().collect();
    let [stdout, stderr] = snapshot(sinks, &mut notes);
    ExecOutcome {
        ending,
        stdout,
        stderr,
        duration: started.elapsed(),
        notes,
    }
}

/// Kills the helper and its process group. The helper supervises the tool's PID
/// namespace, whose PID 1 has SIGKILL as its parent-death signal: the kernel then
/// kills every process in the namespace.
fn kill_tree(helper: Pid) {
    let _ = killpg(helper, Signal::SIGKILL);
    let _ = nix::sys::signal::kill(helper, Signal::SIGKILL);
}

/// The whole environment of a tool process: an allow-list, never the daemon's, so
/// the API key and anything else in the daemon's environment cannot leak.
///
/// HOME is the workspace, which tools write: a `~/.gitconfig` there is model text,
/// and git runs what it names (an alias `!cmd`, a pager, a help viewer) — so an
/// allowed `git status*` would run a program no rule allowed. Git's global and
/// system configuration are therefore switched off. A repository's own
/// `.git/config` in the workspace cannot be switched off here: what keeps an allowed
/// command from writing it is that a file-writing redirection is never provable
/// (`policy::shell`), so only an approved write can plant it. Under the read-only
/// profile the helper adds more (see `sandbox::environment`).
///
/// Every git call trusts the workspace and the repositories below it as safe
/// directories (docs/policy.md): the tool uid does not own an operator's checkout, and
/// git refuses a repository owned by another uid. Two entries, because git matches
/// `safe.directory` exactly unless it ends in `/*`, which then matches only what
/// lies below; never `*`, which would trust every repository on the host.
pub fn tool_environment(workspace: &Path) -> Vec<(String, String)> {
    let ws = workspace.display().to_string();
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("HOME".into(), workspace.display().to_string()),
        (
            "TMPDIR".into(),
            workspace.join(TMP_DIR).display().to_string(),
        ),
        ("TERM".into(), "dumb".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        // less runs no `!`/`|` command, LESSOPEN or lesskey file (HOME is
        // writable, so `~/.lesskey` would be model text that sets LESSOPEN).
        ("LESSSECURE".into(), "1".into()),
        ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
        ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
        ("GIT_CONFIG_COUNT".into(), "2".into()),
        ("GIT_CONFIG_KEY_0".into(), "safe.directory".into()),
        ("GIT_CONFIG_VALUE_0".into(), ws.clone()),
        ("GIT_CONFIG_KEY_1".into(), "safe.directory".into()),
        ("GIT_CONFIG_VALUE_1".into(), format!("{ws}/*")),
    ]
}
