//! POSIX ACLs as the kernel stores them, and set through a descriptor.
//!
//! Tools run as `sandbox.user`; the operator's files in the workspace keep their
//! owner and get a named-user entry for that account instead (see
//! [`super::workspace`]). The value of `system.posix_acl_access` and
//! `system.posix_acl_default` is `posix_acl_xattr_header` (a little-endian u32
//! version, 2) followed by `posix_acl_xattr_entry`s (u16 tag, u16 perm, u32 id),
//! sorted by tag then id (`include/uapi/linux/posix_acl_xattr.h`); the kernel
//! refuses an unsorted list or a named entry without a mask.
//!
//! Every call works on an `O_PATH` descriptor the caller has already inspected, so
//! the inode changed is the inode inspected. `setxattrat(2)` with `AT_EMPTY_PATH`
//! is tried first; Linux 6.18 still refuses `O_PATH` descriptors there (EBADF), so
//! the fallback is the descriptor's own `/proc/self/fd/N` link, which resolves to
//! that same inode without opening it (no FIFO or device is ever opened) and is a
//! path no tool can write.
//!
//! Hand-written rather than a crate: the ACL crates wrap libacl, which works by
//! path or, with `acl_set_fd`, on a real (not `O_PATH`) descriptor, so using one
//! would mean opening the operator's FIFOs and files; the format is 20 lines.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;

/// The access ACL's extended attribute.
pub const ACCESS: &CStr = c"system.posix_acl_access";
/// The default ACL's extended attribute (directories only): what entries
/// created inside inherit.
pub const DEFAULT: &CStr = c"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const UNDEFINED_ID: u32 = u32::MAX;

/// `r`, `w` and `x` in an entry's perm.
pub const READ: u16 = 4;
/// See [`READ`].
pub const WRITE: u16 = 2;
/// See [`READ`].
pub const EXECUTE: u16 = 1;

/// `setxattrat(2)` and `getxattrat(2)`: one number on every architecture (6.13+);
/// the libc crate does not name them for x86_64 yet.
const SYS_SETXATTRAT: libc::c_long = 463;
const SYS_GETXATTRAT: libc::c_long = 464;

/// `struct xattr_args` of `include/uapi/linux/xattr.h`.
#[repr(C)]
struct XattrArgs {
    value: u64,
    size: u32,
    flags: u32,
}

/// An extended attribute value that is not an ACL this module understands.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AclError {
    /// Too short, a partial entry, or another version than 2.
    #[error("not a version 2 POSIX ACL ({len} bytes)")]
    Malformed {
        /// The value's length.
        len: usize,
    },
    /// An entry tag the kernel does not define.
    #[error("unknown POSIX ACL entry tag {tag:#x}")]
    UnknownTag {
        /// The tag.
        tag: u16,
    },
}

/// One entry: whom it is about and what it grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    tag: u16,
    id: u32,
    perm: u16,
}

/// An ACL, its entries in the order the kernel requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// The ACL equivalent to permission bits `mode`: owner, group and others.
    pub fn from_mode(mode: u32) -> Acl {
        // The masks keep each value within three bits, so the casts are exact.
        let bits = |shift: u32| ((mode >> shift) & 0o7) as u16;
        let entry = |tag, perm| Entry {
            tag,
            id: UNDEFINED_ID,
            perm,
        };
        Acl {
            entries: vec![
                entry(USER_OBJ, bits(6)),
                entry(GROUP_OBJ, bits(3)),
                entry(OTHER, bits(0)),
            ],
        }
    }

    /// Parses an extended attribute value.
    pub fn decode(value: &[u8]) -> Result<Acl, AclError> {
        let malformed = AclError::Malformed { len: value.len() };
        let (header, body) = value.split_first_chunk::<4>().ok_or(malformed)?;
        if u32::from_le_bytes(*header) != VERSION || body.len() % 8 != 0 {
            return Err(AclError::Malformed { len: value.len() });
        }
        let mut entries = Vec::with_capacity(body.len() / 8);
        for raw in body.chunks_exact(8) {
            let tag = u16::from_le_bytes([raw[0], raw[1]]);
            if ![USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER].contains(&tag) {
                return Err(AclError::UnknownTag { tag });
            }
            entries.push(Entry {
                tag,
                perm: u16::from_le_bytes([raw[2], raw[3]]),
                id: u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]),
            });
        }
        entries.sort();
        Ok(Acl { entries })
    }

    /// The extended attribute value.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 8 * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// This ACL with `perm` added to the named entry for `uid` (made if missing)
    /// and the mask widened to every group-class entry, as `setfacl -m` does: the
    /// mask caps named entries, so without it the grant would not take effect.
    pub fn with_user(&self, uid: u32, perm: u16) -> Acl {
        let mut entries = self.entries.clone();
        match entries.iter_mut().find(|e| e.tag == USER && e.id == uid) {
            Some(e) => e.perm |= perm,
            None => entries.push(Entry {
                tag: USER,
                id: uid,
                perm,
            }),
        }
        let group_class = entries
            .iter()
            .filter(|e| matches!(e.tag, USER | GROUP_OBJ | GROUP))
            .fold(0, |acc, e| acc | e.perm);
        entries.retain(|e| e.tag != MASK);
        entries.push(Entry {
            tag: MASK,
            id: UNDEFINED_ID,
            perm: group_class,
        });
        entries.sort();
        Acl { entries }
    }

    /// What the named entry for `uid` effectively grants (its perm within the
    /// mask); 0 when there is none.
    #[cfg(test)]
    pub fn effective(&self, uid: u32) -> u16 {
        let mask = self
            .entries
            .iter()
            .find(|e| e.tag == MASK)
            .map_or(0o7, |e| e.perm);
        self.entries
            .iter()
            .find(|e| e.tag == USER && e.id == uid)
            .map_or(0, |e| e.perm & mask)
    }
}

/// Grants `uid` what tools need on the inode `fd` refers to, whose permission
/// bits are `mode`, keeping its owner and any entries already there: `rw` on a
/// file (`x` too when its owner has it, so the operator's scripts run), `rwx` on
/// a directory plus the same in its default ACL, so what the operator adds there
/// later is reachable too. Returns whether anything changed; fails with
/// `EOPNOTSUPP` where the filesystem has no ACLs and `EINVAL` on an ACL this
/// module cannot read (left as it is).
pub fn grant(fd: BorrowedFd<'_>, mode: u32, is_dir: bool, uid: u32) -> nix::Result<bool> {
    // Linux has no ACLs on links, and the `/proc/self/fd` fallback resolves
    // through a link's descriptor: links are refused here, not only by callers.
    if mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(Errno::ELOOP);
    }
    let runs = is_dir || mode & 0o100 != 0;
    let perm = READ | WRITE | if runs { EXECUTE } else { 0 };
    let access = read(fd, ACCESS)?;
    let current = access.clone().unwrap_or_else(|| Acl::from_mode(mode));
    let mut changed = update(fd, ACCESS, access.as_ref(), current.with_user(uid, perm))?;
    if is_dir {
        // With no default yet, entries made inside inherit the directory's own
        // owner, group and other permissions, as without an ACL.
        let default = read(fd, DEFAULT)?;
        let base = default.clone().unwrap_or(current);
        let wanted = base.with_user(uid, READ | WRITE | EXECUTE);
        changed |= update(fd, DEFAULT, default.as_ref(), wanted)?;
    }
    Ok(changed)
}

fn read(fd: BorrowedFd<'_>, name: &CStr) -> nix::Result<Option<Acl>> {
    match get(fd, name)? {
        Some(value) => Acl::decode(&value).map(Some).map_err(|_| Errno::EINVAL),
        None => Ok(None),
    }
}

/// Writes `wanted` unless `current` already is it.
fn update(
    fd: BorrowedFd<'_>,
    name: &CStr,
    current: Option<&Acl>,
    wanted: Acl,
) -> nix::Result<bool> {
    if current == Some(&wanted) {
        return Ok(false);
    }
    set(fd, name, &wanted.encode())?;
    Ok(true)
}

/// The value of extended attribute `name` of the inode `fd` refers to (an
/// `O_PATH` descriptor is enough); `None` when it has none.
pub fn get(fd: BorrowedFd<'_>, name: &CStr) -> nix::Result<Option<Vec<u8>>> {
    // Asked for its size first; retried if it grows in between.
    for _ in 0..4 {
        let size = match get_into(fd, name, &mut []) {
            Ok(size) => size,
            Err(Errno::ENODATA) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut buf = vec![0u8; size];
        match get_into(fd, name, &mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            Err(Errno::ERANGE) => continue,
            Err(Errno::ENODATA) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Err(Errno::ERANGE)
}

fn get_into(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> nix::Result<usize> {
    let mut args = XattrArgs {
        value: buf.as_mut_ptr() as u64,
        size: u32::try_from(buf.len()).map_err(|_| Errno::E2BIG)?,
        flags: 0,
    };
    // SAFETY: the path is an empty C string, `name` is NUL-terminated, `args`
    // points at `buf`, which outlives the call, with its exact length.
    let r = unsafe {
        libc::syscall(
            SYS_GETXATTRAT,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            name.as_ptr(),
            &raw mut args,
            size_of::<XattrArgs>(),
        )
    };
    match Errno::result(r) {
        Ok(n) => Ok(usize::try_from(n).unwrap_or(0)),
        Err(Errno::EBADF | Errno::ENOSYS) => {
            let link = proc_link(fd)?;
            // SAFETY: `link` and `name` are NUL-terminated; `buf` is valid for
            // its length.
            let r = unsafe {
                libc::getxattr(
                    link.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            Errno::result(r).map(|n| usize::try_from(n).unwrap_or(0))
        }
        Err(e) => Err(e),
    }
}

/// Sets extended attribute `name` of the inode `fd` refers to (an `O_PATH`
/// descriptor is enough) to `value`.
pub fn set(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> nix::Result<()> {
    let args = XattrArgs {
        value: value.as_ptr() as u64,
        size: u32::try_from(value.len()).map_err(|_| Errno::E2BIG)?,
        flags: 0,
    };
    // SAFETY: the path is an empty C string, `name` is NUL-terminated, `args`
    // points at `value`, which outlives the call, with its exact length.
    let r = unsafe {
        libc::syscall(
            SYS_SETXATTRAT,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            name.as_ptr(),
            &raw const args,
            size_of::<XattrArgs>(),
        )
    };
    match Errno::result(r) {
        Ok(_) => Ok(()),
        Err(Errno::EBADF | Errno::ENOSYS) => {
            let link = proc_link(fd)?;
            // SAFETY: `link` and `name` are NUL-terminated; `value` is valid for
            // its length.
            let r = unsafe {
                libc::setxattr(
                    link.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    0,
                )
            };
            Errno::result(r).map(drop)
        }
        Err(e) => Err(e),
    }
}

/// `/proc/self/fd/N`: resolves to the descriptor's own inode, whatever happened
/// to the path it was opened by.
fn proc_link(fd: BorrowedFd<'_>) -> nix::Result<CString> {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|_| Errno::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_grant_adds_the_user_and_a_mask_covering_it() {
        let acl = Acl::from_mode(0o644).with_user(65534, READ | WRITE);
        assert_eq!(acl.effective(65534), READ | WRITE);
        let bytes = acl.encode();
        // Header, then user::rw-, user:65534:rw-, group::r--, mask::rw-, other::r--.
        let expected: Vec<u8> = [
            &2u32.to_le_bytes()[..],
            &[1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff],
            &[2, 0, 6, 0, 0xfe, 0xff, 0, 0],
            &[4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff],
            &[0x10, 0, 6, 0, 0xff, 0xff, 0xff, 0xff],
            &[0x20, 0, 4, 0, 0xff, 0xff, 0xff, 0xff],
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(Acl::decode(&bytes), Ok(acl));
    }

    #[test]
    fn a_grant_keeps_other_entries_and_is_idempotent() {
        let base = Acl::from_mode(0o750).with_user(1000, READ);
        let once = base.with_user(65534, READ | WRITE | EXECUTE);
        assert_eq!(once.effective(1000), READ);
        assert_eq!(once.effective(65534), 0o7);
        assert_eq!(once.with_user(65534, READ | WRITE), once);
        // Sorted by id within the named users whatever the order of grants.
        let other_order = Acl::from_mode(0o750)
            .with_user(65534, 0o7)
            .with_user(1000, READ);
        assert_eq!(other_order, once);
    }

    #[test]
    fn a_narrow_mask_caps_a_named_entry() {
        let mut acl = Acl::from_mode(0o644).with_user(65534, READ | WRITE);
        for e in &mut acl.entries {
            if e.tag == MASK {
                e.perm = READ;
            }
        }
        assert_eq!(acl.effective(65534), READ);
        assert_eq!(acl.with_user(65534, WRITE).effective(65534), READ | WRITE);
    }

    #[test]
    fn a_link_is_refused_before_anything_is_read_or_written() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("harnessd-acl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("target"), "x").unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join("link")).unwrap();
        let flags = nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_NOFOLLOW;
        let fd = nix::fcntl::open(&dir.join("link"), flags, nix::sys::stat::Mode::empty());
        let mode = std::fs::symlink_metadata(dir.join("link")).unwrap().mode();
        let result = grant(fd.unwrap().as_fd(), mode, false, 65534);
        let target = get(
            nix::fcntl::open(&dir.join("target"), flags, nix::sys::stat::Mode::empty())
                .unwrap()
                .as_fd(),
            ACCESS,
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(result, Err(Errno::ELOOP));
        assert_eq!(target, Ok(None));
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(Acl::decode(&[2, 0]), Err(AclError::Malformed { len: 2 }));
        assert_eq!(
            Acl::decode(&[1, 0, 0, 0]),
            Err(AclError::Malformed { len: 4 })
        );
        let bad_tag = [&2u32.to_le_bytes()[..], &[0x40, 0, 0, 0, 0, 0, 0, 0]].concat();
        assert_eq!(
            Acl::decode(&bad_tag),
            Err(AclError::UnknownTag { tag: 0x40 })
        );
        assert!(Acl::decode(&[&2u32.to_le_bytes()[..], &[1, 0, 6]].concat()).is_err());
    }
}
