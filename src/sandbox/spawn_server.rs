//! The spawn server (`harnessd __spawn-server`): a small, single-threaded process
//! started once per confinement (one policy version, one profile, one workspace),
//! which forks a child per tool call instead of the daemon exec'ing a helper for
//! each.
//!
//! It holds what is the same for every call ([`Prepared`]: the account resolved,
//! the seccomp filters compiled), the tools' environment and the workspace as its
//! working directory. Each child is made by `clone` already inside a fresh PID and
//! IPC namespace (and user namespace, for an unprivileged daemon), joins the
//! call's cgroup, takes the call's pipes as its standard streams, reads its job
//! and applies every layer exactly as a one-off helper does (`confine`), then
//! becomes the program.
//!
//! The protocol, on a `SOCK_SEQPACKET` control socket (the server's stdin):
//! 1. the daemon sends the [`Setup`] (JSON); the server answers [`Ready`] (JSON);
//! 2. per call, one message of one byte carrying the call's descriptors
//!    (`SCM_RIGHTS`): a stream socket for the call, the stdout and stderr write
//!    ends, and the `cgroup.procs` files the child writes itself into. On the
//!    call socket the daemon writes the [`frame`](super::frame)d job (read by the
//!    child, never by the server); the server writes a start record (`S`, the
//!    child's pid, its pidfd attached), then an exit record (`X`, the exit code,
//!    or 128 + the signal).
//!
//! The end of the control socket (the daemon retired this server, or died) stops
//! new calls; the server exits once its running children have.
//!
//! What keeps a compromised child away from the server: the child runs as another
//! uid (as root) or in its own user namespace, in a PID namespace where the
//! server has no pid, under a Landlock domain scoped for signals and abstract
//! sockets, with ptrace refused by seccomp; the server is not dumpable (its
//! `/proc` files and memory are closed to its own uid), holds no named socket,
//! and its control socket is closed in every child before the job is read. It
//! never parses a job: only the child does, after the fork.

use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};

use nix::errno::Errno;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::confine::{Origin, Prepared, SERVER_PIDFD};
use super::{Confinement, Job, Report, landlock_abi};

/// The argument that selects the spawn server's entry point.
pub const SPAWN_SERVER_ARG: &str = "__spawn-server";

/// Largest [`Setup`] message, in bytes.
pub const MAX_SETUP_BYTES: usize = 1 << 20;

/// Descriptors a call message carries: the call socket, stdout, stderr and up to
/// two `cgroup.procs` files (cgroup v1 has two hierarchies).
pub const MAX_CALL_FDS: usize = 5;

/// Call tag: the job is a command (`run_bash`, `run_python`, a program): its child
/// may share the server's memory until it `exec`s (see [`Shared`]).
pub const CALL_COMMAND: u8 = b'V';

/// Call tag: any job; its child gets a copy of the server's memory.
pub const CALL_COPY: u8 = b'C';

/// Record tag: the child was started (its pid follows, its pidfd attached).
pub const STARTED: u8 = b'S';

/// Record tag: this server starts no more calls, and did not start this one: the
/// daemon sends it to a successor.
pub const RETIRED: u8 = b'R';

/// Record tag: the child has ended (its exit code follows).
pub const EXITED: u8 = b'X';

/// Bytes of a record on the call socket: a tag and an `i32`, little-endian.
pub const RECORD_BYTES: usize = 5;

/// The first message: what every call of this server is confined by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// The confinement of every child.
    pub confine: Confinement,
}

/// The server's answer to [`Setup`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ready {
    /// Why the server cannot serve, if it cannot.
    pub error: Option<String>,
}

/// What every child of this server starts from.
struct Served {
    setup: Setup,
    prepared: Prepared,
    /// The workspace by name (see [`serve`]).
    workspace: std::path::PathBuf,
    /// A pidfd of the server itself, for its children's check that it is alive.
    me: OwnedFd,
    /// How command children share the server's memory, when they may.
    shared: Option<Shared>,
}

/// One running child.
struct Running {
    /// The child's pid: its process group too (it makes itself a session leader).
    pid: Pid,
    pidfd: OwnedFd,
    call: OwnedFd,
}

/// Runs the server until the control socket is closed and its children are gone.
pub fn spawn_server_main() -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(_) => super::SETUP_FAILED,
    }
}

fn serve() -> Result<(), String> {
    let ctrl = confine_self()?;
    let me = pidfd_open(nix::unistd::getpid()).map_err(|e| format!("pidfd_open: {e}"))?;
    let setup = read_setup(&ctrl)?;
    // The workspace by name, entered again by each child: a directory moved or
    // replaced under the server is not where calls run.
    let workspace = std::env::current_dir().map_err(|e| format!("working directory: {e}"))?;
    // From here the server runs under most of its children's seccomp filters
    // (they inherit them; see `Prepared::for_spawn_server`).
    let prepared = Prepared::for_spawn_server(&setup.confine);
    let mut served = Served {
        setup,
        prepared,
        workspace,
        me,
        shared: Shared::new(),
    };
    send_json(&ctrl, &Ready { error: None })?;
    let mut running: Vec<Running> = Vec::new();
    let mut open = true;
    // Once set, every call is answered RETIRED, unstarted (see `Shared`).
    let mut retiring = false;
    while open || !running.is_empty() {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(running.len() + 1);
        fds.push(libc::pollfd {
            fd: if open { ctrl.as_raw_fd() } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend(running.iter().map(|r| libc::pollfd {
            fd: r.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            if Errno::last() == Errno::EINTR {
                continue;
            }
            return Err(format!("poll: {}", Errno::last()));
        }
        // Ended children first: their slots are reused below.
        let ended: Vec<usize> = fds[1..]
            .iter()
            .enumerate()
            .filter(|(_, p)| p.revents != 0)
            .map(|(i, _)| i)
            .collect();
        for i in ended.into_iter().rev() {
            let r = running.swap_remove(i);
            // Its group dies before it is reaped, while its pid still names it:
            // what the namespace's end does not take (a best_effort sandbox
            // without one) goes here, as a helper's process group does.
            let _ = nix::sys::signal::killpg(r.pid, nix::sys::signal::Signal::SIGKILL);
            let code = reap(&r.pidfd);
            let _ = send_record(&r.call, EXITED, code, None);
        }
        if open && fds[0].revents != 0 {
            match receive_call(&ctrl) {
                Ok(Some(call)) if retiring => {
                    let _ = send_record(&call.call, RETIRED, 0, None);
                }
                Ok(Some(call)) => {
                    if let Some(r) = start(&mut served, call, &mut retiring) {
                        running.push(r);
                    }
                }
                Ok(None) => open = false,
                Err(Errno::EINTR | Errno::EAGAIN) => {}
                Err(_) => open = false,
            }
        }
    }
    Ok(())
}

/// The server's own confinement: it dies with the daemon, is not dumpable, has
/// its own session and no descriptor but the control socket, which it returns.
fn confine_self() -> Result<OwnedFd, String> {
    let parent = nix::unistd::getppid();
    // Dies with the daemon's spawner thread, even on kill -9.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(|e| e.to_string())?;
    if nix::unistd::getppid() != parent {
        return Err("the daemon is gone".into());
    }
    let _ = nix::unistd::setsid();
    // Not dumpable: a process of the same uid (a tool of an unprivileged daemon)
    // can neither ptrace it nor read its memory or descriptors through /proc.
    // SAFETY: a prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    let _ = nix::sys::prctl::set_no_new_privs();
    // SAFETY: nothing above 2 is in use yet (std holds none open here).
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    // The control socket leaves stdin; 0, 1 and 2 become /dev/null, so a child's
    // dup2 onto them never closes anything the server needs.
    // SAFETY: duplicates descriptor 0 onto the lowest free one from 3.
    let ctrl = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
    if ctrl < 0 {
        return Err(format!("control socket: {}", Errno::last()));
    }
    // SAFETY: a descriptor just made by F_DUPFD_CLOEXEC, owned here alone.
    let ctrl = unsafe { OwnedFd::from_raw_fd(ctrl) };
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("/dev/null: {e}"))?;
    for fd in 0..3 {
        // SAFETY: dup2 onto the standard descriptors, which hold nothing else.
        unsafe { libc::dup2(null.as_raw_fd(), fd) };
    }
    drop(null);
    Ok(ctrl)
}

fn read_setup(ctrl: &OwnedFd) -> Result<Setup, String> {
    let mut buf = vec![0u8; MAX_SETUP_BYTES];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(ctrl.as_raw_fd(), &mut iov, None, MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(|e| format!("reading the setup: {e}"))?;
    if msg.flags.contains(MsgFlags::MSG_TRUNC) {
        return Err("the setup is too long".into());
    }
    let len = msg.bytes;
    serde_json::from_slice(&buf[..len]).map_err(|e| format!("malformed setup: {e}"))
}

fn send_json<T: Serialize>(ctrl: &OwnedFd, value: &T) -> Result<(), String> {
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    sendmsg::<()>(
        ctrl.as_raw_fd(),
        &[IoSlice::new(&bytes)],
        &[],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map(drop)
    .map_err(|e| format!("writing to the daemon: {e}"))
}

/// The descriptors of one call.
struct CallFds {
    /// [`CALL_COMMAND`] or [`CALL_COPY`].
    tag: u8,
    call: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    cgroups: Vec<OwnedFd>,
}

/// The next call message; `None` at the end of the control socket. A message
/// without the descriptors a call needs is dropped (its descriptors closed).
fn receive_call(ctrl: &OwnedFd) -> Result<Option<CallFds>, Errno> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; MAX_CALL_FDS]);
    let msg = recvmsg::<()>(
        ctrl.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: descriptors just received, owned by this process alone.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    let mut fds = fds.into_iter();
    // A message without the descriptors a call needs is skipped (what it
    // carried is closed with it); the server goes on.
    let (Some(call), Some(stdout), Some(stderr)) = (fds.next(), fds.next(), fds.next()) else {
        return Err(Errno::EAGAIN);
    };
    Ok(Some(CallFds {
        tag: byte[0],
        call,
        stdout,
        stderr,
        cgroups: fds.collect(),
    }))
}

/// Forks the child of `call`; its record of starting is sent from here. Sets
/// `retiring` when this server must start no more calls.
fn start(served: &mut Served, call: CallFds, retiring: &mut bool) -> Option<Running> {
    let mut flags = libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
    if !nix::unistd::Uid::effective().is_root() {
        flags |= libc::CLONE_NEWUSER;
    }
    let share = call.tag == CALL_COMMAND && served.shared.is_some();
    let mut namespaces = Ok(());
    let mut pid = if share {
        clone_shared(served, &call, flags, Ok(()))
    } else {
        clone(flags)
    };
    if let Err(e) = pid {
        // The child then records the layer as missing (and refuses when the
        // sandbox is `full`), exactly as a helper that could not unshare.
        namespaces = Err(e);
        pid = if share {
            clone_shared(served, &call, 0, namespaces)
        } else {
            clone(0)
        };
    }
    if share && pid.is_ok() {
        // The child's credential change set the memory's dumpable flag (to
        // `fs.suid_dumpable`): the server's is set back.
        // SAFETY: a prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        // The child has exec'd or exited: what it left in the shared memory is
        // judged before anything else runs here.
        if let Some(shared) = &served.shared
            && !shared.intact()
        {
            *retiring = true;
        }
    }
    match pid {
        Ok(0) => child(served, &call, namespaces, false),
        Ok(pid) => {
            let pid = Pid::from_raw(pid);
            let CallFds { call, .. } = call;
            match pidfd_open(pid) {
                Ok(pidfd) => {
                    if send_record(&call, STARTED, pid.as_raw(), Some(&pidfd)).is_err() {
                        // The daemon gave the call up: the child must not run alone.
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    }
                    Some(Running { pid, pidfd, call })
                }
                Err(_) => {
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    let _ = nix::sys::wait::waitpid(pid, None);
                    None
                }
            }
        }
        // The call socket closes with `call`: the daemon reads that as a failed
        // start.
        Err(_) => None,
    }
}

/// `clone` with `flags` and no new stack: the child continues here, like `fork`.
fn clone(flags: libc::c_int) -> Result<libc::pid_t, Errno> {
    // SAFETY: the server is single-threaded, so the child's copy of the address
    // space holds no lock another thread took; with a null stack the child runs
    // on its copy of this stack, as after fork.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as libc::pid_t)
    }
}

/// How a command's child may run in the server's own memory until it `exec`s
/// (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does), which saves copying the
/// server's address space for it, faulting it back in, and tearing the copy down
/// at `exec`: most of a call's cost.
///
/// Only as root: the child's credentials change while it shares the memory, and
/// a child of an unprivileged server would have to make itself dumpable to write
/// its user namespace's maps, which would make the server dumpable too. Only
/// where the kernel leaves a process whose credentials changed undumpable
/// (`fs.suid_dumpable` 0 or 2; see `dumps_closed`). Only for
/// a command job, which `exec`s as soon as it is confined (a file job would run
/// in the server's memory for its whole length).
///
/// While the child runs, the server is suspended (the kernel resumes it when the
/// child `exec`s or exits), so nothing runs in the memory concurrently; the child
/// runs on a stack of its own, writes nothing the server reads but the heap it
/// allocates from (and leaks: it never frees before `exec`), and sets no variable
/// of the process (see [`super::environment`]). What it cannot promise is to
/// finish an allocation: a child killed in the middle of one would leave the
/// heap inconsistent. [`STAGE`] tells: a child that ended without reaching its
/// `exec` (or its clean exit) retires the server, which from then on answers
/// every call [`RETIRED`], unstarted, for a successor to run; so does a heap
/// grown past [`LEAK_LIMIT`].
struct Shared {
    /// The child's stack: mapped once, its lowest page a guard.
    stack: *mut libc::c_void,
    /// Bytes the heap held when the server became ready.
    heap_at_start: usize,
}

/// Bytes of a shared child's stack (reserved, not committed, until used).
const STACK_BYTES: usize = 8 << 20;

/// Heap growth after which a server retires: what its shared children leaked.
const LEAK_LIMIT: usize = 16 << 20;

/// Where a shared child is (see [`Shared`]): set by the child, read and reset by
/// the server once it resumes.
static STAGE: AtomicU8 = AtomicU8::new(IDLE);

/// No shared child, or one not started yet.
const IDLE: u8 = 0;
/// A shared child is running the server's code.
const RUNNING: u8 = 1;
/// A shared child is in `execve`: no code of the server's runs in it again.
const EXECUTING: u8 = 2;
/// A shared child exits after finishing everything it began.
const CLEAN_EXIT: u8 = 3;

impl Shared {
    /// The shared mode's stack, when this server may use it (root, a single
    /// thread); `None` otherwise.
    fn new() -> Option<Shared> {
        if !nix::unistd::Uid::effective().is_root() || !single_threaded() || !dumps_closed() {
            return None;
        }
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let stack = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if stack == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: the lowest page of the mapping just made becomes inaccessible,
        // so an overflowing child faults instead of writing below its stack.
        if unsafe { libc::mprotect(stack, page_size(), libc::PROT_NONE) } != 0 {
            // SAFETY: unmaps the mapping just made, used by nothing.
            unsafe { libc::munmap(stack, STACK_BYTES) };
            return None;
        }
        Some(Shared {
            stack,
            heap_at_start: heap_in_use(),
        })
    }

    /// Whether the last shared child left the memory as the server needs it, and
    /// the leaked heap is still within bounds. Resets [`STAGE`].
    fn intact(&self) -> bool {
        let stage = STAGE.swap(IDLE, Ordering::SeqCst);
        matches!(stage, EXECUTING | CLEAN_EXIT)
            && heap_in_use().saturating_sub(self.heap_at_start) <= LEAK_LIMIT
    }
}

/// Whether a process whose credentials change is left undumpable by the kernel
/// (`fs.suid_dumpable` 0 or 2): the child drops to the tool's uid while it shares
/// the server's memory, and with 1 that memory would be open to ptrace and
/// `/proc/PID/mem` by any process of that uid until the `exec`.
fn dumps_closed() -> bool {
    std::fs::read_to_string("/proc/sys/fs/suid_dumpable")
        .is_ok_and(|v| matches!(v.trim(), "0" | "2"))
}

/// Whether this process has a single thread (`/proc/self/status`).
fn single_threaded() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|n| n.trim() == "1"))
        })
        .unwrap_or(false)
}

fn page_size() -> usize {
    // SAFETY: sysconf with a valid name.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

/// Bytes allocated from the heap (arenas and mapped chunks), by glibc's count.
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks + info.hblkhd
}

/// What a shared child is started with, on the server's stack (suspended while
/// the child runs).
struct ChildStart<'a> {
    served: &'a Served,
    call: &'a CallFds,
    namespaces: Result<(), Errno>,
}

/// `clone` of a command's child that shares the server's memory until it
/// `exec`s (see [`Shared`]); returns once it has `exec`d or exited.
fn clone_shared(
    served: &Served,
    call: &CallFds,
    flags: libc::c_int,
    namespaces: Result<(), Errno>,
) -> Result<libc::pid_t, Errno> {
    let Some(shared) = &served.shared else {
        return Err(Errno::EINVAL);
    };
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the ChildStart below, alive on the server's stack for
        // as long as the server is suspended, which is as long as this runs.
        let start = unsafe { &*(arg as *const ChildStart<'_>) };
        child(start.served, start.call, start.namespaces, true)
    }
    let start = ChildStart {
        served,
        call,
        namespaces,
    };
    STAGE.store(RUNNING, Ordering::SeqCst);
    // The stack grows down from the mapping's end (16-byte aligned, as mmap's
    // pages are).
    // SAFETY: the mapping is STACK_BYTES long.
    let top = unsafe { shared.stack.cast::<u8>().add(STACK_BYTES) }.cast::<libc::c_void>();
    // SAFETY: CLONE_VM | CLONE_VFORK: the child runs `entry` on its own stack in
    // this address space while this thread, the server's only one, is
    // suspended; `start` outlives it. See `Shared` for what the child may touch.
    let r = unsafe {
        libc::clone(
            entry,
            top,
            flags | libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::addr_of!(start).cast_mut().cast(),
        )
    };
    if r < 0 {
        STAGE.store(IDLE, Ordering::SeqCst);
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

/// Marks a shared child's `exec` (see [`Shared`]): from here until the mark is
/// dropped (the `exec` failed) the child runs none of the server's code that
/// could be cut short in the middle of an allocation. Does nothing outside a
/// shared child.
pub(super) fn before_exec() -> ExecMark {
    let marked = STAGE
        .compare_exchange(RUNNING, EXECUTING, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    ExecMark { marked }
}

/// See [`before_exec`].
pub(super) struct ExecMark {
    marked: bool,
}

impl Drop for ExecMark {
    fn drop(&mut self) {
        if self.marked {
            STAGE.store(RUNNING, Ordering::SeqCst);
        }
    }
}

/// The child: joins the call, reads its job, confines itself and runs it.
/// `shared`: it runs in the server's memory (see [`Shared`]).
fn child(served: &Served, call: &CallFds, namespaces: Result<(), Errno>, shared: bool) -> ! {
    let Served {
        setup,
        prepared,
        workspace,
        me,
        shared: _,
    } = served;
    // Armed first, then checked: a server that dies from here on takes this
    // process with it, and one that died before is seen.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if readable(me.as_raw_fd()) {
        exit(super::SETUP_FAILED);
    }
    // The server's own setting is not the child's: a process that is not dumpable
    // has its /proc files owned by root, and an unprivileged child must write its
    // user namespace's maps there. (exec would make it dumpable anyway.) Not for
    // a shared child, a root one: the setting is the memory's, the server's too.
    if !shared {
        // SAFETY: a prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    }
    // SAFETY: dup2 onto descriptors this process owns; the sources stay valid.
    unsafe {
        libc::dup2(call.call.as_raw_fd(), 0);
        libc::dup2(call.stdout.as_raw_fd(), 1);
        libc::dup2(call.stderr.as_raw_fd(), 2);
    }
    // Before anything that could start a process: from here on the call's
    // cgroup bounds and kills this tree.
    for procs in &call.cgroups {
        // "0" is the writer itself, whatever its pid in its own namespace.
        if let Err(e) = nix::unistd::write(procs, b"0") {
            refuse(&format!("cannot join the call's cgroup: {e}"));
        }
    }
    // SAFETY: dup2 of a descriptor this process owns onto the agreed number.
    if me.as_raw_fd() != SERVER_PIDFD && unsafe { libc::dup2(me.as_raw_fd(), SERVER_PIDFD) } < 0 {
        refuse(&format!(
            "cannot keep the server's pidfd: {}",
            Errno::last()
        ));
    }
    // SAFETY: closes what the server held (other calls' pipes and sockets, the
    // control socket); nothing above the server's pidfd is used after this.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            SERVER_PIDFD as u32 + 1,
            u32::MAX,
            0u32,
        )
    };
    let req = read_job(setup, call);
    if let Err(e) = std::fs::File::open("/dev/null")
        .and_then(|null| nix::unistd::dup2_stdin(&null).map_err(std::io::Error::from))
    {
        refuse(&format!("cannot reopen stdin on /dev/null: {e}"));
    }
    if let Err(e) = std::env::set_current_dir(workspace) {
        refuse(&format!(
            "cannot enter the workspace {}: {e}",
            workspace.display()
        ));
    }
    let mut report = Report {
        landlock_abi: landlock_abi(),
        layers: Vec::new(),
    };
    let env = match super::confine::apply_with(
        &setup.confine,
        prepared,
        Origin::SpawnServer { namespaces },
        &mut report,
    ) {
        Ok(env) => env,
        Err(e) => refuse(&e),
    };
    let code = super::run_job(req.job, &report, &env);
    let _ = std::io::stdout().flush();
    exit(code)
}

/// The job on the call socket (descriptor 0), refused unless it is one this
/// server's child may run: confined by this server's policy, a tool call, and a
/// command exactly when the call was tagged as one.
fn read_job(setup: &Setup, call: &CallFds) -> super::HelperRequest {
    // SAFETY: descriptor 0 is the call socket for as long as the job is read.
    let mut input = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let req = match super::read_framed(&mut *input) {
        Ok(req) => req,
        Err(e) => refuse(&e),
    };
    if req.confine != setup.confine {
        refuse(
            "internal error: a job confined by another policy reached this spawn server; \
             it was not run",
        );
    }
    if matches!(
        req.job,
        Job::McpServer { .. } | Job::Hook { .. } | Job::Probe
    ) {
        refuse("internal error: a spawn server runs only tool calls");
    }
    // A shared child must exec at once (see `Shared`): a file job never runs in
    // one, whatever reached it.
    if call.tag == CALL_COMMAND && !req.job.is_command() {
        refuse("internal error: a file job was tagged as a command; it was not run");
    }
    req
}

/// Says why on stderr (the call's) and exits as a helper that could not set up.
fn refuse(message: &str) -> ! {
    exit(super::setup_failed(message))
}

fn exit(code: i32) -> ! {
    // Whatever a shared child began, it finished: its exit leaves the memory
    // consistent (see `Shared`).
    let _ = STAGE.compare_exchange(RUNNING, CLEAN_EXIT, Ordering::SeqCst, Ordering::SeqCst);
    // SAFETY: ends this process at once, running nothing of the server's.
    unsafe { libc::_exit(code) }
}

/// Whether `fd` is readable now (a pidfd is once its process has exited).
fn readable(fd: RawFd) -> bool {
    let mut fds = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: polls one descriptor this process owns, without waiting.
    unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) > 0 }
}

/// Reaps the child `pidfd` names; its exit code, or 128 + the signal that killed it.
fn reap(pidfd: &OwnedFd) -> i32 {
    /// `idtype_t` of a pidfd (Linux 5.4).
    const P_PIDFD: libc::idtype_t = 3;
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value for waitid to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on a pidfd this process owns, filling `info`.
        let r = unsafe {
            libc::waitid(
                P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED,
            )
        };
        if r < 0 {
            if Errno::last() == Errno::EINTR {
                continue;
            }
            return super::SETUP_FAILED;
        }
        // SAFETY: waitid succeeded with WEXITED, so si_status is set.
        let status = unsafe { info.si_status() };
        return match info.si_code {
            libc::CLD_EXITED => status,
            _ => 128 + status,
        };
    }
}

/// Writes one record on a call socket, with `fd` attached when given.
fn send_record(call: &OwnedFd, tag: u8, value: i32, fd: Option<&OwnedFd>) -> Result<(), Errno> {
    let mut record = [0u8; RECORD_BYTES];
    record[0] = tag;
    record[1..].copy_from_slice(&value.to_le_bytes());
    let raw: Vec<RawFd> = fd.map(|f| f.as_raw_fd()).into_iter().collect();
    let cmsgs: Vec<ControlMessage<'_>> = if raw.is_empty() {
        Vec::new()
    } else {
        vec![ControlMessage::ScmRights(&raw)]
    };
    sendmsg::<()>(
        call.as_raw_fd(),
        &[IoSlice::new(&record)],
        &cmsgs,
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        None,
    )
    .map(drop)
}

/// A pidfd of `pid` (Linux 5.3).
pub fn pidfd_open(pid: Pid) -> Result<OwnedFd, Errno> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a descriptor just returned by the kernel, owned here alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Reads exactly one record from a call socket, with the descriptor attached to
/// it if any; `Ok(None)` at its end.
pub fn read_record(call: RawFd) -> Result<Option<(u8, i32, Option<OwnedFd>)>, Errno> {
    let mut record = [0u8; RECORD_BYTES];
    let mut got = 0;
    let mut attached = None;
    while got < RECORD_BYTES {
        let mut space = nix::cmsg_space!([RawFd; 1]);
        let mut iov = [IoSliceMut::new(&mut record[got..])];
        let msg = match recvmsg::<()>(call, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        {
            Ok(msg) => msg,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        };
        for cmsg in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = cmsg {
                for fd in raw {
                    // SAFETY: a descriptor just received, owned here alone.
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    attached.get_or_insert(fd);
                }
            }
        }
        if msg.bytes == 0 {
            return Ok(None);
        }
        got += msg.bytes;
    }
    let value = i32::from_le_bytes([record[1], record[2], record[3], record[4]]);
    Ok(Some((record[0], value, attached)))
}
