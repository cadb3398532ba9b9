//! A cgroup per tool call, when the host lets harnessd make one: the whole call's
//! process tree shares one memory cap (`sandbox.memory_mb`) and one process cap
//! (`sandbox.max_processes`), so neither a memory bomb across many children nor a
//! fork bomb can exhaust the host or starve other calls, and every process in it can
//! be killed at the end. RLIMIT_AS and RLIMIT_NPROC stay in force underneath.
//!
//! cgroup v2 (a `cgroup2` mount whose `memory` and `pids` controllers we may use,
//! e.g. under systemd `Delegate=yes`) or v1 (separate `memory` and `pids`
//! hierarchies, as on this CI machine). Without either, calls run without one and
//! `check` says so.
//!
//! `serve` itself moves into one more, `harnessd-<pid>-daemon`, limited to
//! `daemon.memory_mb` ([`confine_daemon`]). It is a sibling of the call cgroups,
//! never their parent: a tool's memory must count against its call's limit, not
//! the daemon's, and cgroup v2 allows no process in a cgroup whose children have
//! controllers (which is also why, under `Delegate=yes`, the daemon must leave
//! its own cgroup before the controllers can be given to its children).
//!
//! ```text
//! <the cgroup serve was started in>/
//!     harnessd-<pid>-daemon/   the daemon (and its helpers until they exec)
//!     harnessd-<pid>-0/        one tool call
//!     harnessd-<pid>-1/        …
//! ```

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Where call cgroups are created.
#[derive(Debug, Clone)]
enum Layout {
    /// One unified directory: memory.max, pids.max, cgroup.kill.
    V2(PathBuf),
    /// The memory and pids hierarchies' directories for this process.
    V1 { memory: PathBuf, pids: PathBuf },
}

/// This process's cgroup path in the hierarchy whose `/proc/self/cgroup` line
/// matches `controller` ("" for v2).
fn own_path(controller: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    path_in(&text, controller)
}

/// The path (with its leading `/`) that `own`, a `/proc/PID/cgroup` text, names
/// in the hierarchy of `controller` ("" for the unified one).
pub fn path_in(own: &str, controller: &str) -> Option<String> {
    own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        hit.then(|| path.to_string())
    })
}

/// One mount of `/proc/self/mountinfo`: its filesystem type, mount point and
/// super options.
pub(super) struct Mount<'a> {
    /// `cgroup`, `cgroup2`, `ext4`…
    pub fstype: &'a str,
    /// Where it is mounted, as mountinfo escapes it.
    pub point: &'a str,
    /// The filesystem's own options, comma-separated.
    pub options: &'a str,
}

impl Mount<'_> {
    /// Whether its super options include `option`.
    pub fn has(&self, option: &str) -> bool {
        self.options.split(',').any(|o| o == option)
    }
}

/// The mounts a mountinfo text lists (`… MOUNT_POINT … - FSTYPE SOURCE
/// SUPER_OPTIONS`; spaces in names are escaped, so " - " is the separator).
pub(super) fn mounts(text: &str) -> impl Iterator<Item = Mount<'_>> {
    text.lines().filter_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        let (fstype, _src, options) = (post.next()?, post.next()?, post.next().unwrap_or(""));
        let point = pre.split_whitespace().nth(4)?;
        Some(Mount {
            fstype,
            point,
            options,
        })
    })
}

/// Mount points by filesystem type and super options, from mountinfo.
fn mount_of(fstype: &str, option: Option<&str>) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts(&text)
        .find(|m| m.fstype == fstype && option.is_none_or(|o| m.has(o)))
        .map(|m| PathBuf::from(m.point))
}

fn detect() -> Option<Layout> {
    if let (Some(mount), Some(path)) = (mount_of("cgroup2", None), own_path("")) {
        let base = mount.join(path.trim_start_matches('/'));
        let controllers =
            std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
        if controllers.contains("memory") && controllers.contains("pids") {
            return Some(Layout::V2(base));
        }
    }
    let memory =
        mount_of("cgroup", Some("memory"))?.join(own_path("memory")?.trim_start_matches('/'));
    let pids = mount_of("cgroup", Some("pids"))?.join(own_path("pids")?.trim_start_matches('/'));
    Some(Layout::V1 { memory, pids })
}

/// Where call cgroups are made, found once: before the daemon moves into its own
/// cgroup, so the base stays the cgroup it was started in.
static LAYOUT: OnceLock<Option<Layout>> = OnceLock::new();

fn layout() -> Option<&'static Layout> {
    LAYOUT
        .get_or_init(|| {
            let layout = detect();
            if let Some(l) = &layout {
                remove_stale(l);
            }
            layout
        })
        .as_ref()
}

/// The unified cgroup this process was started in, when its parent offers the
/// `memory` and `pids` controllers but they are not yet enabled for its children
/// (systemd `Delegate=yes` gives a service exactly that).
fn undelegated_v2() -> Option<PathBuf> {
    let base = mount_of("cgroup2", None)?.join(own_path("")?.trim_start_matches('/'));
    let offered = std::fs::read_to_string(base.join("cgroup.controllers")).ok()?;
    let enabled = std::fs::read_to_string(base.join("cgroup.subtree_control")).ok()?;
    let has = |text: &str, c: &str| text.split_whitespace().any(|x| x == c);
    (has(&offered, "memory") && has(&offered, "pids") && !has(&enabled, "memory")).then_some(base)
}

/// How `serve` runs: in its own cgroup (which kind, where, the limit) or why not.
static DAEMON: OnceLock<Result<String, String>> = OnceLock::new();

/// Moves this process into `harnessd-<pid>-daemon` beside its call cgroups, with
/// its memory limited to `memory_mb`. Called once by `serve`, before the runtime
/// has grown (memory charged before the move stays with the old cgroup). Returns
/// what was done, or why it could not be (the daemon then runs unconfined, and
/// says so).
pub fn confine_daemon(memory_mb: u64) -> Result<String, String> {
    DAEMON.get_or_init(|| move_daemon(memory_mb)).clone()
}

/// [`confine_daemon`]'s result, if `serve` called it in this process.
pub fn daemon_confinement() -> Option<Result<String, String>> {
    DAEMON.get().cloned()
}

fn move_daemon(memory_mb: u64) -> Result<String, String> {
    let name = format!("harnessd-{}-daemon", std::process::id());
    let bytes = memory_mb.saturating_mul(1024 * 1024).to_string();
    let me = std::process::id().to_string();
    let write = |path: PathBuf, value: &str| {
        std::fs::write(&path, value).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    if LAYOUT.get().is_none()
        && let Some(base) = undelegated_v2()
    {
        // Out of `base` first: only then may its children have controllers.
        let dir = base.join(&name);
        let layout = Layout::V2(base.clone());
        remove_stale(&layout);
        std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        write(dir.join("cgroup.procs"), &me)?;
        write(base.join("cgroup.subtree_control"), "+memory +pids")?;
        let _ = LAYOUT.set(Some(layout));
        write(dir.join("memory.max"), &bytes)?;
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        return Ok(format!(
            "cgroup v2 {}: memory {memory_mb} MiB",
            dir.display()
        ));
    }
    let (dir, limit, kind) = match layout() {
        Some(Layout::V2(base)) => (base.join(&name), "memory.max", "cgroup v2"),
        Some(Layout::V1 { memory, .. }) => {
            (memory.join(&name), "memory.limit_in_bytes", "cgroup v1")
        }
        None => return Err("no cgroup hierarchy with a usable memory controller here".into()),
    };
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {}: {e}", dir.display())),
    }
    write(dir.join(limit), &bytes)?;
    if kind == "cgroup v2" {
        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
    }
    write(dir.join("cgroup.procs"), &me)?;
    Ok(format!("{kind} {}: memory {memory_mb} MiB", dir.display()))
}

/// A clean stop of `serve` leaves no cgroup behind: under v1 the daemon can go
/// back to the cgroup it came from and remove its own. (Under v2 it cannot go
/// back, the parent now having controllers for its children; the next start's
/// sweep removes it once this pid is gone.)
pub fn leave_daemon_cgroup() {
    if !matches!(DAEMON.get(), Some(Ok(_))) {
        return;
    }
    let Some(Layout::V1 { memory, .. }) = layout() else {
        return;
    };
    let me = std::process::id();
    let dir = memory.join(format!("harnessd-{me}-daemon"));
    // With this process go the helpers it started that have not exec'd a tool (a
    // spare sandbox helper waiting for its call): they end with the daemon anyway.
    let listed = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in listed.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let _ = std::fs::write(memory.join("cgroup.procs"), pid);
    }
    if let Err(e) = remove_dir_retrying(&dir) {
        tracing::warn!("cannot remove the daemon's cgroup {}: {e}", dir.display());
    }
}

/// Removes call cgroups left by a harnessd that died (`harnessd-<pid>-<n>` whose
/// pid is gone), killing first whatever still runs in them: after a kill -9 the
/// dead daemon's tool processes may still be dying (or, had one escaped its
/// parent-death signal, running), and a cgroup with a process in it cannot be
/// removed. Each removal is logged (a warning when processes had to be killed)
/// and so is each failure, naming the directory.
fn remove_stale(layout: &Layout) {
    let dirs: Vec<&PathBuf> = match layout {
        Layout::V2(base) => vec![base],
        Layout::V1 { memory, pids } => vec![memory, pids],
    };
    for dir in dirs {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("harnessd-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            // Our own pid names a dead predecessor's cgroup, never ours: this runs
            // before this process makes its first one. A daemon that is PID 1 of
            // its namespace after a kill -9 has the pid of the one that died.
            let ours = u32::try_from(pid).is_ok_and(|p| p == std::process::id());
            if !ours && !gone(pid) {
                continue;
            }
            let path = entry.path();
            let killed = kill_listed(&path);
            match remove_dir_retrying(&path) {
                // Processes outliving their daemon are worth a warning; an empty
                // directory is housekeeping.
                Ok(()) if killed > 0 => tracing::warn!(
                    "removed call cgroup {} left by harnessd pid {pid}, which is gone, \
                     after killing {killed} process(es) still in it",
                    path.display()
                ),
                Ok(()) => tracing::info!(
                    "removed call cgroup {} left by harnessd pid {pid}, which is gone",
                    path.display()
                ),
                Err(e) => tracing::warn!(
                    "cannot remove call cgroup {} left by harnessd pid {pid}: {e}",
                    path.display()
                ),
            }
        }
    }
}

/// Whether no process has this pid. Only ESRCH says so: EPERM means a process
/// exists that we may not signal (a root daemon's, probed by `check` as another
/// user), and its cgroups are not ours to remove.
fn gone(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH)
}

/// SIGKILLs every process listed in `dir`'s `cgroup.procs` until none is left (a
/// fork in flight may add one more); how many kills were sent. For cgroup v1,
/// which has no `cgroup.kill`, and for stale cgroups of either kind.
fn kill_listed(dir: &std::path::Path) -> usize {
    let procs = dir.join("cgroup.procs");
    let mut sent = 0;
    for _ in 0..50 {
        let Ok(list) = std::fs::read_to_string(&procs) else {
            return sent;
        };
        let pids: Vec<i32> = list.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.is_empty() {
            return sent;
        }
        for pid in pids {
            if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                sent += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    sent
}

/// Whether a call cgroup could be made (unknown until the first attempt).
static WORKS: OnceLock<bool> = OnceLock::new();

/// Whether call cgroups are available here, and which kind: the layout exists and
/// creating one worked (the start-up probe makes the first attempt).
pub fn available() -> Option<&'static str> {
    if WORKS.get() != Some(&true) {
        return None;
    }
    layout().map(|l| match l {
        Layout::V2(_) => "cgroup v2",
        Layout::V1 { .. } => "cgroup v1 (memory, pids)",
    })
}

/// A limit to write: (index into the call's dirs, file, value).
type Limit = (usize, &'static str, String);

/// One call's cgroup. Dropping it kills what is left in it and returns it to a
/// pool: creating and removing cgroups costs the kernel far more than reusing them
/// (cgroup v1 frees them through RCU work), and a daemon runs few calls at once.
#[derive(Debug)]
pub struct CallCgroup {
    dirs: Vec<PathBuf>,
    v2: bool,
}

/// Empty cgroups ready for the next call.
static POOL: std::sync::Mutex<Vec<CallCgroup>> = std::sync::Mutex::new(Vec::new());

impl CallCgroup {
    /// A cgroup capped at `memory_mb` and `max_processes` (limits written afresh,
    /// since the policy may have changed), or `None` where cgroups are unavailable.
    pub fn create(memory_mb: u64, max_processes: u64) -> Option<CallCgroup> {
        if WORKS.get() == Some(&false) {
            return None;
        }
        let reused = POOL.lock().ok().and_then(|mut p| p.pop());
        let cg = match reused {
            Some(cg) => cg,
            None => {
                let made = CallCgroup::make();
                let _ = WORKS.set(made.is_some());
                made?
            }
        };
        let bytes = memory_mb.saturating_mul(1024 * 1024).to_string();
        let limits: Vec<Limit> = if cg.v2 {
            vec![
                (0, "memory.max", bytes),
                (0, "memory.swap.max", "0".into()),
                (0, "pids.max", max_processes.to_string()),
            ]
        } else {
            vec![
                (0, "memory.limit_in_bytes", bytes),
                (1, "pids.max", max_processes.to_string()),
            ]
        };
        for (i, file, value) in limits {
            // memory.swap.max may not exist without swap accounting; the rest must.
            if std::fs::write(cg.dirs[i].join(file), value).is_err() && file != "memory.swap.max" {
                return None;
            }
        }
        Some(cg)
    }

    fn make() -> Option<CallCgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "harnessd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let (dirs, v2) = match layout()? {
            Layout::V2(base) => (vec![base.join(&name)], true),
            Layout::V1 { memory, pids } => (vec![memory.join(&name), pids.join(&name)], false),
        };
        for d in &dirs {
            if std::fs::create_dir(d).is_err() {
                return None;
            }
        }
        Some(CallCgroup { dirs, v2 })
    }

    /// Moves `pid` (and so everything it will start) into the cgroup.
    pub fn add(&self, pid: u32) -> std::io::Result<()> {
        for d in &self.dirs {
            std::fs::write(d.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// Each hierarchy's `cgroup.procs`, open for writing: a process that writes
    /// `0` to them moves itself in (a spawn server's child, before it starts
    /// anything). Opened by the daemon, so the daemon's rights to them count.
    pub fn procs_files(&self) -> std::io::Result<Vec<std::fs::File>> {
        self.dirs
            .iter()
            .map(|d| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("cgroup.procs"))
            })
            .collect()
    }

    /// Kills every process in the cgroup.
    pub fn kill_all(&self) {
        if self.v2 {
            let _ = std::fs::write(self.dirs[0].join("cgroup.kill"), "1");
            return;
        }
        // v1 has no cgroup.kill: kill what is listed until nothing is.
        if let Some(dir) = self.dirs.last() {
            kill_listed(dir);
        }
    }
}

impl CallCgroup {
    /// Kills what is left and returns the cgroup to the pool once it is empty.
    pub fn release(self) {
        self.kill_all();
        let procs = self.dirs.last().map(|d| d.join("cgroup.procs"));
        let empty = procs
            .and_then(|p| std::fs::read_to_string(p).ok())
            .is_some_and(|l| l.trim().is_empty());
        if empty && let Ok(mut pool) = POOL.lock() {
            pool.push(self);
        }
        // Otherwise it is left for remove_stale at the next start.
    }
}

/// Removes the pooled (idle) call cgroups this process made: called when `run`,
/// `serve` or `sandbox` stops cleanly, so a clean exit leaves nothing in the host's
/// cgroup tree. Calls still running keep theirs; a later call makes a new one.
/// Returns how many could not be removed (each is logged; the next start's stale
/// sweep removes them once this pid is gone).
pub fn remove_pooled() -> usize {
    let pooled: Vec<CallCgroup> = match POOL.lock() {
        Ok(mut pool) => pool.drain(..).collect(),
        // A panic while holding the pool left it as it was: still ours to empty.
        Err(poisoned) => poisoned.into_inner().drain(..).collect(),
    };
    pooled.into_iter().filter(|cg| !cg.remove()).count()
}

impl CallCgroup {
    /// Kills anything left in it (a pooled one should hold nothing) and removes its
    /// directories; whether all of them are gone.
    fn remove(&self) -> bool {
        self.kill_all();
        let mut removed = true;
        for dir in &self.dirs {
            if let Err(e) = remove_dir_retrying(dir) {
                tracing::warn!("cannot remove call cgroup {}: {e}", dir.display());
                removed = false;
            }
        }
        removed
    }
}

/// rmdir, retried briefly: a cgroup whose last process has just been reaped can
/// still be busy for a moment while the kernel lets go of it.
fn remove_dir_retrying(dir: &std::path::Path) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::gone;
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::{ForkResult, Uid, fork, setuid};

    #[test]
    fn a_process_we_may_not_signal_is_alive_and_a_reaped_one_gone() {
        // A reaped child's pid names no process (until reused, which takes a
        // full wrap of the pid space).
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let mut child = child;
        child.wait().unwrap();
        assert!(gone(pid), "a reaped child counts as gone");
        assert!(!gone(std::process::id().try_into().unwrap()));
        if !Uid::effective().is_root() {
            return;
        }
        // As another uid, signalling init is EPERM: alive, not gone.
        // SAFETY: the child only calls setuid, kill and _exit before exiting.
        match unsafe { fork() }.unwrap() {
            ForkResult::Child => {
                let code = match setuid(Uid::from_raw(65534)) {
                    Ok(()) if gone(1) => 1,
                    Ok(()) => 0,
                    Err(_) => 2,
                };
                unsafe { nix::libc::_exit(code) };
            }
            ForkResult::Parent { child } => match waitpid(child, None).unwrap() {
                WaitStatus::Exited(_, 0) => {}
                other => panic!("as uid 65534, pid 1 was judged gone or setuid failed: {other:?}"),
            },
        }
    }
}
