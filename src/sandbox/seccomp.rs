//! The seccomp filters of a tool process: what Landlock cannot refuse.
//!
//! Two filters are stacked (a third, on x86_64, closes the x32 numbering). A
//! spawn server installs them on itself but for its children's setup calls, which its
//! children refuse last, themselves ([`split`]). The first answers `clone3` with ENOSYS, so libc falls
//! back to `clone`, whose flags (unlike `clone3`'s, which sit in memory) a filter can
//! read. The second answers EPERM to: every socket family but AF_UNIX when the
//! network is off (UDP, raw, netlink, IPv6 — Landlock covers TCP only), and AF_UNIX
//! too when the tool shares the daemon's uid; ptrace and
//! cross-process memory access; io_uring (which would bypass this filter); the mount
//! family; namespace creation (`unshare`, `setns`, `clone` with CLONE_NEWUSER and
//! friends); keyrings; bpf; perf_event_open; the inode-flag ioctls (`chattr`); and the
//! TIOCSTI / TIOCLINUX ioctls that
//! inject input into a terminal.
//!
//! Landlock does not govern a file's mode, owner, timestamps or extended
//! attributes. When the tool keeps the daemon's uid (a daemon that is not root),
//! only that would stop it from opening up the daemon's own files (`chmod 644
//! config/key`), so the path-based calls that change them are refused for every
//! path ([`path_metadata`]), and so under the read-only profile, which may change
//! nothing. The fd-based calls (`fchmod`, `fchown`, `fsetxattr`, `fremovexattr`,
//! `futimens`, that is `utimensat` with a NULL path) stay: they need a descriptor of
//! the file opened by a real open, which Landlock checked. An `O_PATH` descriptor,
//! which Landlock does not check, does not do: on Linux 6.18 each of those calls
//! answers EBADF on one (checked). `fchownat` and `fchmodat2` with AT_EMPTY_PATH
//! would take one, and are refused with the rest.

use std::collections::BTreeMap;

use super::job::Network;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Why a filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
#[error("seccomp: {0}")]
pub struct SeccompError(String);

fn err(e: impl std::fmt::Display) -> SeccompError {
    SeccompError(e.to_string())
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Namespace flags of `clone`.
const CLONE_NEW_FLAGS: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// `fchmodat2` (Linux 6.6), `setxattrat` and `removexattrat` (6.13): numbered the
/// same on every architecture, and missing from older libc crates.
const SYS_FCHMODAT2: i64 = 452;
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// The calls that change a file's mode, owner, timestamps or extended attributes
/// by path, refused whole (`utimensat` is refused separately, only with a path).
fn path_metadata() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_fchmodat,
        SYS_FCHMODAT2,
        libc::SYS_fchownat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        SYS_SETXATTRAT,
        SYS_REMOVEXATTRAT,
    ];
    // The legacy calls exist on x86_64 only (aarch64 has just the *at family).
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
    ]);
    calls
}

fn arg(index: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(err)
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<BpfProgram, SeccompError> {
    SeccompFilter::new(rules, SeccompAction::Allow, action, ARCH)
        .map_err(err)?
        .try_into()
        .map_err(err)
}

/// The rules of every filter. `unix_sockets`: whether `socket(AF_UNIX)` stays allowed
/// when the network is off. It must not when the tool runs as the daemon's own uid:
/// Landlock before ABI 9 does not govern connecting to a named socket, so only the
/// socket file's permissions would keep the tool off the control API.
/// `socketpair` stays allowed either way (it connects nothing outside).
/// `metadata_by_path`: whether the path-based mode, owner, timestamp and xattr
/// changes are refused (see the module doc).
fn rules(
    network: &Network,
    unix_sockets: bool,
    metadata_by_path: bool,
) -> Result<Rules, SeccompError> {
    let mut enosys = BTreeMap::new();
    enosys.insert(libc::SYS_clone3, vec![]);

    let mut eperm: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let always = [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
    ];
    for nr in always.into_iter().chain(NAMESPACE_CALLS) {
        eperm.insert(nr, vec![]);
    }
    // Rules are alternatives: one per namespace flag, matching when it is set.
    let clone_rules = CLONE_NEW_FLAGS
        .iter()
        .map(|&flag| {
            let cond = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .map_err(err)?;
            SeccompRule::new(vec![cond]).map_err(err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    eperm.insert(libc::SYS_clone, clone_rules);
    eperm.insert(
        libc::SYS_ioctl,
        vec![
            SeccompRule::new(vec![arg(1, SeccompCmpOp::Eq, libc::TIOCSTI)?]).map_err(err)?,
            SeccompRule::new(vec![arg(1, SeccompCmpOp::Eq, libc::TIOCLINUX)?]).map_err(err)?,
            // Inode flags and fsxattrs (`chattr +A`, `+d`, project ids) need only a
            // descriptor opened for reading, which Landlock allows on any readable
            // file the tool uid owns: refused everywhere (FS_IOC_SETFLAGS, its
            // 32-bit form, FS_IOC_FSSETXATTR).
            SeccompRule::new(vec![arg(1, SeccompCmpOp::Eq, 0x4008_6602)?]).map_err(err)?,
            SeccompRule::new(vec![arg(1, SeccompCmpOp::Eq, 0x4004_6602)?]).map_err(err)?,
            SeccompRule::new(vec![arg(1, SeccompCmpOp::Eq, 0x401c_5820)?]).map_err(err)?,
        ],
    );
    if metadata_by_path {
        refuse_metadata_by_path(&mut eperm)?;
    }
    match network {
        Network::On => {}
        Network::Off => refuse_sockets(&mut eperm, unix_sockets)?,
        Network::TcpPorts(_) => refuse_all_but_tcp(&mut eperm, unix_sockets)?,
    }
    Ok(Rules { enosys, eperm })
}

/// The rules of [`filters`], before they are compiled.
struct Rules {
    /// Answered ENOSYS.
    enosys: BTreeMap<i64, Vec<SeccompRule>>,
    /// Answered EPERM.
    eperm: BTreeMap<i64, Vec<SeccompRule>>,
}

/// The calls that make or enter namespaces and change mounts, refused whole.
const NAMESPACE_CALLS: [i64; 12] = [
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
];

/// Whether `nr` is a call a spawn server's child still makes while it sets up
/// (its parent makes the namespaces with `clone`; the child makes its mount
/// namespace and private `/tmp`): the only refusals left for the child to
/// install itself.
fn is_setup_call(nr: i64) -> bool {
    nr == libc::SYS_clone || NAMESPACE_CALLS.contains(&nr)
}

/// Builds every filter, for a process that installs them all itself (a one-off
/// helper). See [`rules`] for the arguments.
pub fn filters(
    network: &Network,
    unix_sockets: bool,
    metadata_by_path: bool,
) -> Result<Vec<BpfProgram>, SeccompError> {
    let Rules { enosys, eperm } = rules(network, unix_sockets, metadata_by_path)?;
    let mut programs = vec![
        compile(enosys, SeccompAction::Errno(libc::ENOSYS as u32))?,
        compile(eperm, SeccompAction::Errno(libc::EPERM as u32))?,
    ];
    programs.extend(refuse_x32());
    Ok(programs)
}

/// The same refusals as [`filters`], in two parts for a spawn server: what the
/// server installs on itself, which every child inherits at `clone` at no cost
/// (everything but [`is_setup_call`]'s), and what each child installs once it has set
/// up (those). Installing a filter is most of what seccomp costs a process (the
/// kernel checks it against every system call number to build its cache), and it
/// grows with the filter: the child's part is a few calls long.
pub fn split(
    network: &Network,
    unix_sockets: bool,
    metadata_by_path: bool,
) -> Result<Split, SeccompError> {
    let Rules { enosys, eperm } = rules(network, unix_sockets, metadata_by_path)?;
    let (child, server): (BTreeMap<_, _>, BTreeMap<_, _>) =
        eperm.into_iter().partition(|(nr, _)| is_setup_call(*nr));
    let mut inherited = vec![
        compile(enosys, SeccompAction::Errno(libc::ENOSYS as u32))?,
        compile(server, SeccompAction::Errno(libc::EPERM as u32))?,
    ];
    inherited.extend(refuse_x32());
    Ok(Split {
        inherited,
        child: vec![compile(child, SeccompAction::Errno(libc::EPERM as u32))?],
    })
}

/// [`split`]'s two parts.
#[derive(Debug)]
pub struct Split {
    /// Installed by the spawn server on itself: its children inherit them.
    pub inherited: Vec<BpfProgram>,
    /// Installed by each child, last.
    pub child: Vec<BpfProgram>,
}

/// The bit that marks an x32 system call on x86_64.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// On x86_64, a filter answering EPERM to every x32 call. An x32 call reports the
/// x86_64 architecture with its number offset by [`X32_SYSCALL_BIT`], so the
/// filters above, which match numbers, would let `socket` or `ptrace` through by
/// that door on a kernel built with x32 support. Four instructions:
/// load the number; at or past the bit, EPERM; else allow.
#[cfg(target_arch = "x86_64")]
fn refuse_x32() -> Option<BpfProgram> {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ERRNO: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
    const RET_ALLOW: u32 = 0x7fff_0000; // SECCOMP_RET_ALLOW
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    Some(vec![
        op(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        op(RET_K, 0, 0, RET_ALLOW),
    ])
}

/// Other architectures have no second numbering to close.
#[cfg(not(target_arch = "x86_64"))]
fn refuse_x32() -> Option<BpfProgram> {
    None
}

/// Adds the path-based mode, owner, timestamp and xattr changes to `eperm`.
fn refuse_metadata_by_path(
    eperm: &mut BTreeMap<i64, Vec<SeccompRule>>,
) -> Result<(), SeccompError> {
    for nr in path_metadata() {
        eperm.insert(nr, vec![]);
    }
    // utimensat(dirfd, path, …) with a path; NULL is futimens(dirfd, …).
    let with_path =
        SeccompCondition::new(1, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0).map_err(err)?;
    eperm.insert(
        libc::SYS_utimensat,
        vec![SeccompRule::new(vec![with_path]).map_err(err)?],
    );
    Ok(())
}

/// Adds every socket family but AF_UNIX (and AF_UNIX too unless `unix_sockets`)
/// to `eperm`; `socketpair` of AF_UNIX stays.
fn refuse_sockets(
    eperm: &mut BTreeMap<i64, Vec<SeccompRule>>,
    unix_sockets: bool,
) -> Result<(), SeccompError> {
    let not_unix = || {
        arg(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)
            .and_then(|c| SeccompRule::new(vec![c]).map_err(err))
    };
    let socket_rule = if unix_sockets {
        vec![not_unix()?]
    } else {
        vec![]
    };
    eperm.insert(libc::SYS_socket, socket_rule);
    eperm.insert(libc::SYS_socketpair, vec![not_unix()?]);
    Ok(())
}

/// Adds every socket but TCP over IPv4 and IPv6 (and AF_UNIX when
/// `unix_sockets`) to `eperm`: Landlock governs TCP ports and nothing else, so
/// UDP (DNS included), SCTP and MPTCP streams, raw and netlink sockets are
/// refused here, and so are TCP fast open sends and `listen`. `socketpair` of
/// AF_UNIX stays.
fn refuse_all_but_tcp(
    eperm: &mut BTreeMap<i64, Vec<SeccompRule>>,
    unix_sockets: bool,
) -> Result<(), SeccompError> {
    let rule = |conds: Vec<SeccompCondition>| SeccompRule::new(conds).map_err(err);
    let inet = [libc::AF_INET as u64, libc::AF_INET6 as u64];
    let mut other_family = vec![
        arg(0, SeccompCmpOp::Ne, inet[0])?,
        arg(0, SeccompCmpOp::Ne, inet[1])?,
    ];
    if unix_sockets {
        other_family.push(arg(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?);
    }
    let mut rules = vec![rule(other_family)?];
    // The type's low bits (SOCK_NONBLOCK and SOCK_CLOEXEC are above them) must
    // say SOCK_STREAM; the protocol must be TCP's, given or implied.
    const SOCK_TYPE_MASK: u64 = 0xf;
    for family in inet {
        for other in (0..=SOCK_TYPE_MASK).filter(|t| *t != libc::SOCK_STREAM as u64) {
            rules.push(rule(vec![
                arg(0, SeccompCmpOp::Eq, family)?,
                arg(1, SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK), other)?,
            ])?);
        }
        rules.push(rule(vec![
            arg(0, SeccompCmpOp::Eq, family)?,
            arg(2, SeccompCmpOp::Ne, 0)?,
            arg(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
        ])?);
    }
    eperm.insert(libc::SYS_socket, rules);
    let not_unix = arg(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?;
    eperm.insert(libc::SYS_socketpair, vec![rule(vec![not_unix])?]);
    // Landlock checks connect(2) and bind(2), not what does their work without
    // them: a send with MSG_FASTOPEN connects an unconnected TCP socket to any
    // port, and listen(2) on an unbound one binds an ephemeral port.
    let fast_open = libc::MSG_FASTOPEN as u64;
    for (nr, flags) in [
        (libc::SYS_sendto, 3),
        (libc::SYS_sendmsg, 2),
        (libc::SYS_sendmmsg, 3),
    ] {
        let with = arg(flags, SeccompCmpOp::MaskedEq(fast_open), fast_open)?;
        eperm.insert(nr, vec![rule(vec![with])?]);
    }
    eperm.insert(libc::SYS_listen, vec![]);
    Ok(())
}

/// Installs the filters on the calling thread (and what it execs). Requires
/// `no_new_privs` (or CAP_SYS_ADMIN).
pub fn install(filters: &[BpfProgram]) -> Result<(), SeccompError> {
    for f in filters {
        seccompiler::apply_filter(f).map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_combination_of_filters_compiles() {
        for network in [Network::Off, Network::On, Network::TcpPorts(vec![443])] {
            for unix_sockets in [false, true] {
                for metadata_by_path in [false, true] {
                    let f = filters(&network, unix_sockets, metadata_by_path);
                    let x32 = usize::from(cfg!(target_arch = "x86_64"));
                    assert!(f.is_ok_and(|f| f.len() == 2 + x32));
                }
            }
        }
    }

    #[test]
    fn the_metadata_list_names_each_call_once() {
        let mut calls = path_metadata();
        let n = calls.len();
        calls.sort_unstable();
        calls.dedup();
        assert_eq!(calls.len(), n);
        assert!(!calls.contains(&libc::SYS_fchmod) && !calls.contains(&libc::SYS_fchown));
    }
}
