//! The confinement layers of a tool process, applied by the helper in this order
//! (each step says why it sits where it does):
//!
//! 1. new session (`setsid`): no controlling terminal, its own process group;
//! 2. parent-death signal, so the helper dies with the executor's thread;
//! 3. every descriptor above 2 closed (`close_range`): nothing of the daemon's is
//!    inherited, whatever was opened without CLOEXEC;
//! 4. a new PID and IPC namespace (as root; a user + PID + IPC namespace
//!    otherwise), entered by forking (a helper) or made by the spawn server's
//!    `clone` (its child): the tool is its PID 1, and when it or its supervisor
//!    dies the kernel kills every process in it — double-forked and setsid'd ones
//!    too. The helper, or the server, stays behind relaying the exit status. The IPC namespace holds the call's SysV shared memory, message queues,
//!    semaphores and POSIX message queues: no other process reaches them, and they
//!    go with the namespace when the call ends;
//! 5. the profile: under the read-only and server ones, a mount namespace of the
//!    call's own with a private tmpfs on `/tmp` (see [`super::mounts`]), `TMPDIR`
//!    (and for the read-only one `HOME`) pointing there. In the PID namespace's PID 1, so the mounts die with the
//!    call's tree; before the privilege drop, which takes CAP_SYS_ADMIN away (as
//!    root), and before Landlock, whose rule for `/tmp` must name the tmpfs and
//!    not the host's directory under it; seccomp (last) forbids `mount`;
//! 6. resource limits (CPU unless a server, address space, processes, file size,
//!    open files, no core dumps) — before the privilege drop, which makes RLIMIT_NPROC bind;
//! 7. privilege drop to `sandbox.user` when running as root: supplementary groups
//!    cleared, gid then uid set (all three ids), which empties every capability set;
//!    the parent-death signal is set again since a credential change clears it;
//! 8. `no_new_privs`: setuid binaries and file capabilities grant nothing;
//! 9. Landlock (see [`super::landlock`]): under the write profile it reads `read`
//!    and writes `write`; under the read-only one it reads `read ∪ write` and
//!    writes only `/dev/null` and the private `/tmp`; a server's reads `read` and
//!    writes `write`, `/dev/null` and the private `/tmp`;
//! 10. seccomp (see [`super::seccomp`]), with the path-based mode, owner, time and
//!     xattr changes refused too when the tool keeps the daemon's uid or is
//!     read-only — last, so the steps above may use what it forbids.

use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Gid, Pid, Uid, fork, getppid, setsid};

use std::path::PathBuf;

use super::environment::Overrides;
use super::job::{Confinement, Network, Profile, Require};
use super::landlock::PathSets;
use super::report::Report;

/// The uid a best_effort sandbox drops to when `sandbox.user` cannot be had.
const FALLBACK_UID: &str = "65534";

/// What is the same for every process of one confinement, worked out once: by a
/// spawn server when it starts (see [`super::spawn_server`]), or by a one-off
/// helper for its single job. Nothing here names a path a tool can change: the
/// Landlock rules are opened per process, so a directory replaced after the server
/// started is judged by what is there now.
#[derive(Debug)]
pub struct Prepared {
    /// Whether the process runs with the daemon's uid (a daemon that is not root).
    same_uid_as_daemon: bool,
    /// Its uid and gid before any user namespace: what an unprivileged child's
    /// maps name (inside a new one, before the maps, they read as the overflow ids).
    outer_ids: (Uid, Gid),
    /// `sandbox.user` resolved, when running as root.
    user: Option<Result<(Uid, Gid), String>>,
    /// The compiled seccomp filters, or why they could not be built.
    seccomp: Result<Vec<seccompiler::BpfProgram>, String>,
}

impl Prepared {
    /// Resolves the account and compiles the filters of `c`.
    pub fn new(c: &Confinement) -> Prepared {
        let same_uid_as_daemon = !Uid::effective().is_root();
        let unix_sockets = !same_uid_as_daemon;
        let metadata_by_path = same_uid_as_daemon || c.profile != Profile::Write;
        Prepared {
            same_uid_as_daemon,
            outer_ids: (Uid::current(), Gid::current()),
            user: (!same_uid_as_daemon).then(|| super::user::resolve_user(&c.limits.user)),
            seccomp: super::seccomp::filters(&c.limits.network, unix_sockets, metadata_by_path)
                .map_err(|e| e.to_string()),
        }
    }

    /// [`Prepared::new`] for a spawn server, which installs on itself the part of
    /// the seccomp filters its children inherit ([`super::seccomp::split`]), so
    /// that each child installs only the rest. Should that fail, each child
    /// installs them all, as a helper does.
    pub fn for_spawn_server(c: &Confinement) -> Prepared {
        let mut prepared = Prepared::new(c);
        let unix_sockets = !prepared.same_uid_as_daemon;
        let metadata_by_path = prepared.same_uid_as_daemon || c.profile != Profile::Write;
        if let Ok(split) = super::seccomp::split(&c.limits.network, unix_sockets, metadata_by_path)
            && super::seccomp::install(&split.inherited).is_ok()
        {
            prepared.seccomp = Ok(split.child);
        }
        prepared
    }
}

/// Who started the process being confined, which decides how it checks that its
/// parent is alive and how it gets its PID namespace.
#[derive(Debug, Clone, Copy)]
pub enum Origin {
    /// A one-off helper (`harnessd __sandbox-helper`) started by the daemon: it
    /// enters the namespaces itself and stays behind as their supervisor.
    Helper,
    /// A child of a spawn server, made by `clone` already inside its namespaces
    /// (`namespaces` says whether that worked, and why not). `server` is a pidfd
    /// of the server at descriptor 3, kept open until the layers are applied so
    /// the child can tell the server is still there after each parent-death
    /// signal it arms (`getppid` is 0 across a PID namespace).
    SpawnServer {
        /// Whether `clone` made the namespaces, or why not.
        namespaces: Result<(), nix::errno::Errno>,
    },
}

/// The descriptor a spawn server's child holds the server's pidfd at.
pub const SERVER_PIDFD: i32 = 3;

/// Applies every layer; returns in the process that should do the job (the PID 1
/// of the new namespace, or the helper itself without one). `Err` says which layer
/// a `full` sandbox could not have. `Ok` holds the variables the profile sets for
/// the program (see [`super::environment`]).
pub fn apply(c: &Confinement, report: &mut Report) -> Result<Overrides, String> {
    apply_with(c, &Prepared::new(c), Origin::Helper, report)
}

/// [`apply`] with what `prepared` holds, in a process started by `origin`.
pub fn apply_with(
    c: &Confinement,
    prepared: &Prepared,
    origin: Origin,
    report: &mut Report,
) -> Result<Overrides, String> {
    let full = c.limits.require == Require::Full;
    let layer = |report: &mut Report, name: &str, r: Result<String, String>| match r {
        Ok(detail) => {
            report.push(name, true, detail);
            Ok(())
        }
        Err(why) => {
            report.push(name, false, why.clone());
            if full {
                Err(format!(
                    "{name} cannot be enforced: {why}. Fix that, or set sandbox.require to \
                     \"best_effort\" in settings.json to run tools with a weaker sandbox"
                ))
            } else {
                Ok(())
            }
        }
    };
    layer(
        report,
        "session",
        setsid()
            .map(|_| "new session, no controlling terminal".into())
            .map_err(|e| e.to_string()),
    )?;
    let parent = ParentCheck::of(origin);
    layer(report, "parent_death", parent_death_signal(parent))?;
    layer(report, "descriptors", close_inherited(origin))?;
    let pid_namespace = match origin {
        Origin::Helper => enter_pid_namespace(),
        Origin::SpawnServer { namespaces } => entered_pid_namespace(namespaces, prepared.outer_ids),
    };
    layer(report, "pid_namespace", pid_namespace)?;
    let mut env = Overrides::default();
    let paths = enter_profile(c, &mut env, &mut |name, r| layer(report, name, r))?;
    layer(report, "rlimits", set_rlimits(c))?;
    layer(
        report,
        "privilege_drop",
        drop_privileges(
            &c.limits.user,
            prepared.user.clone(),
            ParentCheck::of(origin),
        ),
    )?;
    // docs/sandbox.md: tools never run as uid 0, whatever `require` says. A best_effort
    // sandbox whose user cannot be had falls back to `nobody`'s uid, or refuses.
    if Uid::effective().is_root() {
        drop_privileges(
            FALLBACK_UID,
            Some(super::user::resolve_user(FALLBACK_UID)),
            ParentCheck::of(origin),
        )
        .map_err(|e| {
            format!("tools never run as root, and dropping to uid {FALLBACK_UID} failed too: {e}")
        })?;
        report.push(
            "privilege_drop",
            true,
            format!("fell back to uid {FALLBACK_UID}"),
        );
    }
    layer(report, "no_new_privs", no_new_privs())?;
    let landlock = super::landlock::restrict(&paths, &c.limits.network, report.landlock_abi);
    // A port list is enforced by Landlock alone: without it the process would
    // reach every port, so it does not run, whatever `require` says.
    if let (Network::TcpPorts(_), Err(why)) = (&c.limits.network, &landlock) {
        return Err(format!("the TCP port list cannot be enforced: {why}"));
    }
    layer(report, "landlock", landlock)?;
    layer(report, "seccomp", install_seccomp(c, prepared))?;
    if let Origin::SpawnServer { .. } = origin {
        // The last descriptor of the server's: the job runs with none above 2.
        // SAFETY: closing a descriptor this process owns and uses no more.
        unsafe { libc::close(SERVER_PIDFD) };
    }
    Ok(env)
}

/// Installs the prepared seccomp filters; what they refuse, for the report.
fn install_seccomp(c: &Confinement, prepared: &Prepared) -> Result<String, String> {
    let same_uid_as_daemon = prepared.same_uid_as_daemon;
    let unix_sockets = !same_uid_as_daemon;
    // The daemon's own files are the tool's to chmod when it shares their uid;
    // a read-only process may change nothing, and a server's read set (the
    // workspace, owned by the tool uid) is not its to change either.
    let metadata_by_path = same_uid_as_daemon || c.profile != Profile::Write;
    prepared
        .seccomp
        .clone()
        .and_then(|f| super::seccomp::install(&f).map_err(|e| e.to_string()))
        .map(|()| {
            let net = match (&c.limits.network, unix_sockets) {
                (Network::On, _) => "",
                (Network::Off, true) => "sockets other than AF_UNIX, ",
                (Network::Off, false) => "every socket (socketpair allowed), ",
                (Network::TcpPorts(_), true) => {
                    "sockets other than TCP and AF_UNIX, TCP fast open, listen, "
                }
                (Network::TcpPorts(_), false) => "sockets other than TCP, TCP fast open, listen, ",
            };
            let metadata = if metadata_by_path {
                "path-based chmod/chown/utimes/setxattr, "
            } else {
                ""
            };
            format!("refused: {net}{metadata}ptrace, process_vm, io_uring, mount, namespaces, keyctl, bpf, perf_event_open, TIOCSTI/TIOCLINUX, x32 calls")
        })
}

/// How a process tells that its parent is still alive once its parent-death
/// signal is armed (the signal only covers a death after it was set).
#[derive(Debug, Clone, Copy)]
enum ParentCheck {
    /// Its parent pid is still this one.
    Pid(Pid),
    /// The pidfd at [`SERVER_PIDFD`] has not become readable (a pidfd is readable
    /// once its process has exited).
    PidFd,
}

impl ParentCheck {
    fn of(origin: Origin) -> ParentCheck {
        match origin {
            Origin::Helper => ParentCheck::Pid(getppid()),
            Origin::SpawnServer { .. } => ParentCheck::PidFd,
        }
    }

    fn alive(self) -> bool {
        match self {
            // In a new PID namespace the parent is outside it and `getppid` is 0
            // both before and after a death: the check then holds trivially, as
            // it always did for the namespace's PID 1.
            ParentCheck::Pid(pid) => getppid() == pid,
            ParentCheck::PidFd => {
                let mut fds = [libc::pollfd {
                    fd: SERVER_PIDFD,
                    events: libc::POLLIN,
                    revents: 0,
                }];
                // SAFETY: polls one descriptor this process owns, without waiting.
                let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
                n == 0
            }
        }
    }
}

/// Records one layer's outcome; `Err` when a `full` sandbox must refuse.
type RecordLayer<'a> = dyn FnMut(&str, Result<String, String>) -> Result<(), String> + 'a;

/// The profile's step: nothing under the write profile; under the read-only and
/// server ones the private `/tmp` and its environment. `layer` records it (and refuses a `full`
/// sandbox without it). Returns what Landlock is to allow: a read-only process
/// whose `/tmp` could not be mounted still writes nothing but `/dev/null`.
fn enter_profile(
    c: &Confinement,
    env: &mut Overrides,
    layer: &mut RecordLayer<'_>,
) -> Result<PathSets, String> {
    if c.profile == Profile::Write {
        return Ok(PathSets {
            read: c.read.clone(),
            write: c.write.clone(),
        });
    }
    let both: Vec<PathBuf> = c.read.iter().chain(&c.write).cloned().collect();
    let mounted = super::mounts::private_tmp(c.limits.tmp_mb, &both);
    let tmp = mounted.as_ref().ok().map(|t| t.dir.clone());
    layer(
        "profile",
        mounted
            .map(|t| match c.profile {
                // The detail speaks of the read-only profile it was written for.
                Profile::Server => t.detail.replacen(
                    "read-only: writes only /dev/null",
                    "server: writes only its own write paths, /dev/null",
                    1,
                ),
                _ => t.detail,
            })
            .map_err(|e| {
                format!(
                    "{} profile without its private /tmp: {e}",
                    profile_name(c.profile)
                )
            }),
    )?;
    let tmp_dir = tmp
        .clone()
        .unwrap_or_else(|| PathBuf::from(super::mounts::PRIVATE_TMP));
    let mut write = vec![PathBuf::from("/dev/null")];
    write.extend(tmp);
    if c.profile == Profile::Server {
        super::environment::server(&tmp_dir, env);
        write.extend(c.write.iter().cloned());
        return Ok(PathSets {
            read: c.read.clone(),
            write,
        });
    }
    super::environment::read_only(&tmp_dir, env);
    Ok(PathSets { read: both, write })
}

fn profile_name(p: Profile) -> &'static str {
    match p {
        Profile::ReadOnly => "read-only",
        Profile::Write => "write",
        Profile::Server => "server",
    }
}

/// SIGKILL when the parent goes, and a check that it has not gone already.
fn parent_death_signal(parent: ParentCheck) -> Result<String, String> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| e.to_string())?;
    if !parent.alive() {
        // The parent died before the signal was armed. `_exit`: a spawn server's
        // child may share the server's memory, whose exit handlers are not its own.
        // SAFETY: ends this process at once.
        unsafe { libc::_exit(super::SETUP_FAILED) };
    }
    Ok("SIGKILL when the parent dies".into())
}

fn close_inherited(origin: Origin) -> Result<String, String> {
    // A spawn server's child keeps the server's pidfd (closed once the layers
    // are applied, before the job).
    let first: u32 = match origin {
        Origin::Helper => 3,
        Origin::SpawnServer { .. } => SERVER_PIDFD as u32 + 1,
    };
    // SAFETY: close_range only closes descriptors; none above 2 is used by this
    // process after this point (Rust's std holds none open here).
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
    if r != 0 {
        return Err(format!("close_range: {}", std::io::Error::last_os_error()));
    }
    Ok("every descriptor above 2 closed".into())
}

/// The PID namespace layer of a spawn server's child, which `clone` made (or
/// could not: `namespaces`). As an unprivileged daemon the user namespace came
/// with them and its maps are written here.
fn entered_pid_namespace(
    namespaces: Result<(), nix::errno::Errno>,
    (uid, gid): (Uid, Gid),
) -> Result<String, String> {
    let how = match namespaces {
        Err(e) => Err(e.to_string()),
        Ok(()) if uid.is_root() => Ok("PID + IPC namespace"),
        Ok(()) => write_user_maps(uid, gid).map(|()| "user + PID + IPC namespace"),
    };
    let how = how.map_err(namespace_refused)?;
    Ok(format!(
        "{how}: the tool is PID 1, the whole tree dies with it; SysV IPC and POSIX message queues private to the call"
    ))
}

fn namespace_refused(e: String) -> String {
    format!(
        "cannot create a PID and IPC namespace ({e}); the whole process tree cannot be \
         killed, and its SysV IPC objects would be the host's"
    )
}

fn enter_pid_namespace() -> Result<String, String> {
    let how = if Uid::effective().is_root() {
        unshare(CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC)
            .map(|()| "PID + IPC namespace")
            .map_err(|e| e.to_string())
    } else {
        enter_user_and_pid_namespace().map(|()| "user + PID + IPC namespace")
    };
    let how = how.map_err(namespace_refused)?;
    // SAFETY: the helper is single-threaded (no tokio, no threads spawned), so
    // fork is safe; the child continues in ordinary Rust.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            // The death signal does not survive fork; the supervisor is the parent now.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| e.to_string())?;
            Ok(format!(
                "{how}: the tool is PID 1, the whole tree dies with it; SysV IPC and POSIX message queues private to the call"
            ))
        }
        Ok(ForkResult::Parent { child }) => supervise(child),
        Err(e) => Err(format!("fork: {e}")),
    }
}

/// The supervisor: holds nothing, waits for the namespace's PID 1, exits like it.
fn supervise(child: Pid) -> ! {
    // Our copies of the standard streams would keep the pipes open after the tree
    // is gone (a server's stdin is the daemon's pipe too).
    // SAFETY: closing our own standard descriptors; nothing uses them after.
    unsafe {
        libc::close(0);
        libc::close(1);
        libc::close(2);
    }
    let code = loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => break code,
            Ok(WaitStatus::Signaled(_, sig, _)) => break 128 + sig as i32,
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break super::SETUP_FAILED,
        }
    };
    std::process::exit(code)
}

fn enter_user_and_pid_namespace() -> Result<(), String> {
    let (uid, gid) = (Uid::current(), Gid::current());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC)
        .map_err(|e| e.to_string())?;
    write_user_maps(uid, gid)
}

/// Maps `uid` and `gid` (this process's ids outside the user namespace it just
/// entered) to themselves inside it.
fn write_user_maps(uid: Uid, gid: Gid) -> Result<(), String> {
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text).map_err(|e| format!("{file}: {e}"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))?;
    Ok(())
}

fn set_rlimits(c: &Confinement) -> Result<String, String> {
    const MIB: u64 = 1024 * 1024;
    if let Some(cpu) = c.limits.cpu_secs {
        setrlimit(Resource::RLIMIT_CPU, cpu, cpu).map_err(|e| format!("cpu: {e}"))?;
    }
    let limits = [
        (Resource::RLIMIT_CORE, 0, "core 0"),
        (
            Resource::RLIMIT_AS,
            c.limits.memory_mb.saturating_mul(MIB),
            "address space",
        ),
        (Resource::RLIMIT_NPROC, c.limits.max_processes, "processes"),
        (
            Resource::RLIMIT_FSIZE,
            c.limits.max_file_mb.saturating_mul(MIB),
            "file size",
        ),
        (
            Resource::RLIMIT_NOFILE,
            c.limits.max_open_files,
            "open files",
        ),
    ];
    for (resource, value, name) in limits {
        setrlimit(resource, value, value).map_err(|e| format!("{name}: {e}"))?;
    }
    let cpu = match c.limits.cpu_secs {
        Some(secs) => format!("{secs} s"),
        None => "unlimited".into(),
    };
    Ok(format!(
        "cpu {cpu}, address space {} MiB, {} processes, files {} MiB, {} open files, no core",
        c.limits.memory_mb, c.limits.max_processes, c.limits.max_file_mb, c.limits.max_open_files
    ))
}

/// Drops to `user`, whose ids `resolved` holds (`None` when not running as
/// root); `parent` re-checks the parent after the credential change, which
/// clears the parent-death signal.
fn drop_privileges(
    user: &str,
    resolved: Option<Result<(Uid, Gid), String>>,
    parent: ParentCheck,
) -> Result<String, String> {
    if !Uid::effective().is_root() {
        return Ok(format!("not needed: running as uid {}", Uid::effective()));
    }
    let (uid, gid) = match resolved {
        Some(ids) => ids?,
        None => super::user::resolve_user(user)?,
    };
    if uid.is_root() {
        return Err(format!(
            "sandbox.user {user:?} is uid 0; name an unprivileged account"
        ));
    }
    nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
    parent_death_signal(parent)?;
    let caps = capabilities()?;
    if caps.iter().any(|(_, v)| *v != 0) {
        return Err(format!("capabilities remain after the drop: {caps:?}"));
    }
    Ok(format!(
        "uid {uid} gid {gid} ({user}), no supplementary groups, no capabilities"
    ))
}

/// CapInh, CapPrm, CapEff, CapAmb of this process.
fn capabilities() -> Result<Vec<(String, u64)>, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    Ok(status
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k, "CapInh" | "CapPrm" | "CapEff" | "CapAmb").then(|| {
                (
                    k.to_string(),
                    u64::from_str_radix(v.trim(), 16).unwrap_or(u64::MAX),
                )
            })
        })
        .collect())
}

fn no_new_privs() -> Result<String, String> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| e.to_string())?;
    Ok("set".into())
}
