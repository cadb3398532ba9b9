//! The daemon's side of the spawn servers ([`crate::sandbox::spawn_server`]): one
//! server per confinement in use, started on first need and retired when the
//! policy moves on.
//!
//! A server is keyed by its workspace and its whole [`Confinement`] (paths,
//! profile, limits, user, require): a call goes only to a server started with
//! exactly its own, so a policy change reaches the next call, and a server of an
//! older version of the same profile is retired when its successor starts (its
//! running calls finish first). At most [`MAX_SERVERS`] live at once, the least
//! recently used retired beyond.
//!
//! Every server is started by the executor's spawner thread, so its parent-death
//! signal ends it with the daemon; each of its children has one on the server.
//! A server found dead (killed, OOM) is replaced by a new one before the call is
//! sent; a call whose server dies while it runs ends with an error, its process
//! tree gone with the server.

use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, sendmsg, socketpair,
};

use super::cgroup::CallCgroup;
use super::spare::Spares;
use super::tool_environment;
use crate::sandbox::spawn_server::{
    CALL_COMMAND, CALL_COPY, EXITED, MAX_SETUP_BYTES, RETIRED, Ready, SPAWN_SERVER_ARG, STARTED,
    Setup, read_record,
};
use crate::sandbox::{Confinement, HelperRequest};

/// Servers alive at once.
pub const MAX_SERVERS: usize = 8;

/// How long a new server may take to answer its setup.
const READY_LIMIT: Duration = Duration::from_secs(10);

/// One live server.
#[derive(Debug)]
struct Server {
    workspace: PathBuf,
    confine: Confinement,
    /// The control socket; closing it retires the server.
    ctrl: OwnedFd,
    /// The server process, reaped when it is retired.
    process: Mutex<Option<Child>>,
    /// When a call last went to it.
    used: Mutex<Instant>,
}

impl Server {
    fn exited(&self) -> bool {
        self.process
            .lock()
            .ok()
            .and_then(|mut p| p.as_mut().map(|c| !matches!(c.try_wait(), Ok(None))))
            .unwrap_or(true)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The control socket closes after this: the server finishes its running
        // calls and exits, and is reaped here without holding up the caller.
        if let Some(mut child) = self.process.lock().ok().and_then(|mut p| p.take()) {
            let _ = std::thread::Builder::new()
                .name("spawn-server-reaper".into())
                .spawn(move || {
                    let _ = child.wait();
                });
        }
    }
}

/// The live spawn servers of one executor.
#[derive(Debug)]
pub(crate) struct SpawnServers {
    helper: PathBuf,
    live: Mutex<Vec<Arc<Server>>>,
}

/// A call running in a spawn server's child.
#[derive(Debug)]
pub(crate) struct ServerCall {
    /// The call socket: the exit record arrives here.
    sock: UnixStream,
    /// The child (the call's PID 1): killing it ends the whole namespace.
    pidfd: Arc<OwnedFd>,
    /// The read ends of its stdout and stderr, until the readers take them.
    pub stdout: Option<std::fs::File>,
    /// See `stdout`.
    pub stderr: Option<std::fs::File>,
}

/// Largest job sent to a command's child that shares the server's memory: more
/// than the kernel lets one command's arguments be (`ARG_MAX`).
const SHARED_JOB_BYTES: usize = 1 << 20;

/// What [`SpawnServers::start`] starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start<'a> {
    /// The job and its confinement.
    pub request: &'a HelperRequest,
    /// Where it runs.
    pub workspace: &'a Path,
    /// The call's cgroup, if it has one.
    pub cgroup: Option<&'a CallCgroup>,
    /// The call's timeout, which bounds its start too.
    pub limit: Duration,
}

/// Why a call could not be started by a server.
#[derive(Debug)]
pub(crate) enum StartError {
    /// Nothing was sent: the caller may start the job another way.
    NotSent(String),
    /// The job was handed over, then the server failed: it may have begun.
    Failed(String),
}

impl SpawnServers {
    /// Servers of `helper` (the harnessd executable).
    pub(crate) fn new(helper: PathBuf) -> SpawnServers {
        SpawnServers {
            helper,
            live: Mutex::new(Vec::new()),
        }
    }

    /// How many servers are live (for tests and the benchmark's report).
    pub(crate) fn count(&self) -> usize {
        self.live.lock().map(|l| l.len()).unwrap_or(0)
    }

    /// Pids of the live servers.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.live
            .lock()
            .map(|l| {
                l.iter()
                    .filter_map(|s| s.process.lock().ok()?.as_ref().map(Child::id))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Starts a call's job in a child of the server for its confinement and
    /// workspace (started first if need be), in its cgroup.
    pub(crate) fn start(
        &self,
        spares: &Spares,
        start: &Start<'_>,
    ) -> Result<ServerCall, StartError> {
        let Start {
            request,
            workspace,
            cgroup,
            limit,
        } = *start;
        let job = crate::sandbox::frame(request).map_err(|e| StartError::NotSent(e.to_string()))?;
        let procs = match cgroup {
            Some(cg) => cg
                .procs_files()
                .map_err(|e| StartError::NotSent(format!("cannot open the call's cgroup: {e}")))?,
            None => Vec::new(),
        };
        // A command's child may share the server's memory until it execs; any
        // other job's gets a copy (see the server's `Shared`), and so does a job
        // too large to be a command that can run, which would only be read into
        // the server's heap (charged to the server, not to the call's cgroup).
        let tag = if request.job.is_command() && job.len() <= SHARED_JOB_BYTES {
            CALL_COMMAND
        } else {
            CALL_COPY
        };
        // A server that died since its last call is noticed when the message
        // cannot be sent, one that retired itself by its answer; its successor
        // gets the call (once: a second failure is the host's, not a stale
        // server's).
        let mut last = String::new();
        for _ in 0..2 {
            let server = self
                .server_for(spares, workspace, &request.confine)
                .map_err(StartError::NotSent)?;
            match send_call(&server, &procs, tag) {
                Ok(sent) => match finish_start(sent, &job, &server, limit)? {
                    Some(call) => return Ok(call),
                    None => {
                        last = "the spawn server retired".into();
                        self.retire(&server);
                    }
                },
                Err(e) => {
                    last = e;
                    self.retire(&server);
                }
            }
        }
        Err(StartError::NotSent(last))
    }

    /// The live server for `workspace` and `confine`, started if there is none.
    fn server_for(
        &self,
        spares: &Spares,
        workspace: &Path,
        confine: &Confinement,
    ) -> Result<Arc<Server>, String> {
        let mut live = self
            .live
            .lock()
            .map_err(|_| "spawn server list lock poisoned".to_string())?;
        live.retain(|s| !s.exited());
        if let Some(s) = live
            .iter()
            .find(|s| s.workspace == workspace && s.confine == *confine)
        {
            if let Ok(mut used) = s.used.lock() {
                *used = Instant::now();
            }
            return Ok(s.clone());
        }
        let server = Arc::new(self.launch(spares, workspace, confine)?);
        // Older versions of the same profile in the same workspace are retired:
        // no call will be confined by them again.
        live.retain(|s| !(s.workspace == workspace && s.confine.profile == confine.profile));
        while live.len() >= MAX_SERVERS {
            let oldest = live
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.used.lock().map(|u| *u).unwrap_or_else(|_| Instant::now()))
                .map(|(i, _)| i);
            match oldest {
                Some(i) => drop(live.remove(i)),
                None => break,
            }
        }
        live.push(server.clone());
        Ok(server)
    }

    fn retire(&self, server: &Arc<Server>) {
        if let Ok(mut live) = self.live.lock() {
            live.retain(|s| !Arc::ptr_eq(s, server));
        }
    }

    /// Starts a server (from the spawner thread) and waits for its answer.
    fn launch(
        &self,
        spares: &Spares,
        workspace: &Path,
        confine: &Confinement,
    ) -> Result<Server, String> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| format!("socketpair: {e}"))?;
        let helper = self.helper.clone();
        let dir = workspace.to_path_buf();
        let mut child = spares
            .on_spawner_thread(Box::new(move || {
                Command::new(&helper)
                    .arg(SPAWN_SERVER_ARG)
                    .env_clear()
                    .envs(tool_environment(&dir))
                    .current_dir(&dir)
                    .stdin(Stdio::from(theirs))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
            }))
            .map_err(|e| format!("cannot start the spawn server: {e}"))?;
        let setup = serde_json::to_vec(&Setup {
            confine: confine.clone(),
        })
        .map_err(|e| e.to_string())?;
        let abandon = |child: &mut Child, why: String| {
            let _ = child.kill();
            let _ = child.wait();
            why
        };
        if setup.len() > MAX_SETUP_BYTES {
            return Err(abandon(
                &mut child,
                "the confinement is too large for a spawn server".into(),
            ));
        }
        if let Err(e) = sendmsg::<()>(
            ours.as_raw_fd(),
            &[IoSlice::new(&setup)],
            &[],
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            return Err(abandon(
                &mut child,
                format!("cannot set up the spawn server: {e}"),
            ));
        }
        let ready = match read_ready(&ours) {
            Ok(ready) => ready,
            Err(e) => return Err(abandon(&mut child, e)),
        };
        if let Some(e) = ready.error {
            return Err(abandon(&mut child, e));
        }
        Ok(Server {
            workspace: workspace.to_path_buf(),
            confine: confine.clone(),
            ctrl: ours,
            process: Mutex::new(Some(child)),
            used: Mutex::new(Instant::now()),
        })
    }
}

fn read_ready(ctrl: &OwnedFd) -> Result<Ready, String> {
    let mut fds = [libc::pollfd {
        fd: ctrl.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let limit = READY_LIMIT.as_millis() as libc::c_int;
    // SAFETY: polls one descriptor this process owns.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, limit) };
    if n <= 0 {
        return Err("the spawn server did not answer its setup".into());
    }
    let mut buf = vec![0u8; 64 * 1024];
    let got = nix::sys::socket::recv(ctrl.as_raw_fd(), &mut buf, MsgFlags::empty())
        .map_err(|e| format!("reading the spawn server's answer: {e}"))?;
    if got == 0 {
        return Err("the spawn server exited before it was ready".into());
    }
    serde_json::from_slice(&buf[..got]).map_err(|e| format!("the spawn server's answer: {e}"))
}

/// A call handed to a server: the daemon's end of its socket and pipes.
struct Sent {
    sock: UnixStream,
    stdout: std::fs::File,
    stderr: std::fs::File,
}

/// Sends one call message, tagged `tag`; an error means nothing was sent.
fn send_call(server: &Server, procs: &[std::fs::File], tag: u8) -> Result<Sent, String> {
    let (sock, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    let (out_r, out_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let (err_r, err_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let mut fds = vec![theirs.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
    fds.extend(procs.iter().map(AsRawFd::as_raw_fd));
    sendmsg::<()>(
        server.ctrl.as_raw_fd(),
        &[IoSlice::new(&[tag])],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| format!("the spawn server is gone ({e})"))?;
    // Our copies of the write ends close here: the pipes end with the tree.
    Ok(Sent {
        sock,
        stdout: std::fs::File::from(out_r),
        stderr: std::fs::File::from(err_r),
    })
}

/// Writes the job and waits, up to `limit`, for the start record; `None` when the
/// server retired instead of starting it (the job did not run). A child that
/// does not start within `limit` holds up its server (suspended while a command's
/// child sets up): the server is killed, its other calls with it.
fn finish_start(
    mut sent: Sent,
    job: &[u8],
    server: &Server,
    limit: Duration,
) -> Result<Option<ServerCall>, StartError> {
    let gone = |e: String| StartError::Failed(format!("the spawn server failed the call: {e}"));
    // The child reads the whole job before it writes anything, so this cannot
    // deadlock against a full stdout pipe.
    // A retiring server closes the socket unread after its answer: the answer
    // is read even when the job could not be written whole.
    let written = sent.sock.write_all(job);
    if !readable_within(&sent.sock, limit) {
        if let Some(child) = server.process.lock().ok().as_mut().and_then(|p| p.as_mut()) {
            let _ = child.kill();
        }
        return Err(gone(format!(
            "the call did not start within its {} s; the spawn server was killed",
            limit.as_secs()
        )));
    }
    let record = read_record(sent.sock.as_raw_fd());
    if let Err(e) = written
        && !matches!(record, Ok(Some((RETIRED, _, _))))
    {
        return Err(gone(format!("writing the job: {e}")));
    }
    match record {
        Ok(Some((STARTED, _pid, Some(pidfd)))) => Ok(Some(ServerCall {
            sock: sent.sock,
            pidfd: Arc::new(pidfd),
            stdout: Some(sent.stdout),
            stderr: Some(sent.stderr),
        })),
        Ok(Some((RETIRED, _, _))) => Ok(None),
        Ok(Some((tag, _, _))) => Err(gone(format!("unexpected record {tag:?}"))),
        Ok(None) => Err(gone("it exited".into())),
        Err(e) => Err(gone(e.to_string())),
    }
}

/// Whether `sock` becomes readable (or ends) within `limit`.
fn readable_within(sock: &UnixStream, limit: Duration) -> bool {
    let deadline = Instant::now().checked_add(limit);
    loop {
        let left = deadline.map_or(Duration::from_secs(3600), |d| {
            d.saturating_duration_since(Instant::now())
        });
        let mut fds = [libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ms = left.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: polls one descriptor this process owns.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        match n {
            n if n > 0 => return true,
            0 if deadline.is_some() => return false,
            0 => {}
            _ if Errno::last() == Errno::EINTR => {}
            _ => return true,
        }
    }
}

impl ServerCall {
    /// A handle that kills the call's tree, for the output readers.
    pub(crate) fn killer(&self) -> Arc<OwnedFd> {
        self.pidfd.clone()
    }

    /// Waits up to `limit` for the call to end: its exit code, `None` while it
    /// runs, an error when its server died.
    pub(crate) fn wait_for(&mut self, limit: Duration) -> Result<Option<i32>, String> {
        let mut fds = [libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ms = limit.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: polls one descriptor this process owns.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        if n < 0 {
            return match Errno::last() {
                Errno::EINTR => Ok(None),
                e => Err(format!("waiting for the tool: {e}")),
            };
        }
        if n == 0 {
            return Ok(None);
        }
        match read_record(self.sock.as_raw_fd()) {
            Ok(Some((EXITED, code, _))) => Ok(Some(code)),
            Ok(Some((tag, _, _))) => Err(format!("the spawn server sent record {tag:?}")),
            Ok(None) => Err(
                "the spawn server exited while the call ran; the call's process tree died with it"
                    .into(),
            ),
            Err(e) => Err(format!("waiting for the tool: {e}")),
        }
    }
}

/// Kills the process a pidfd names (a spawn server's child: the PID 1 of the
/// call's namespace, so with it every process in it). A pidfd never names
/// another process, even once this one is reaped.
pub(crate) fn kill_pidfd(pidfd: &OwnedFd) {
    // SAFETY: pidfd_send_signal with a descriptor this process owns and no info.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
}
