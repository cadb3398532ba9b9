//! Device nodes and privileges: setuid, capabilities, mounts, raw devices.

use serde_json::Value;

use super::{Targets, bash, py};

/// The attacks of this family: (id, tool, input), each printing ESCAPED only if it worked.
pub(super) fn attacks(_t: &Targets) -> Vec<(&'static str, &'static str, Value)> {
    vec![
        // Device nodes and privileges.
        (
            "mknod",
            "run_bash",
            bash("mknod devnull c 1 3 && echo ESCAPED"),
        ),
        (
            "setuid_mount",
            "run_bash",
            bash("mkdir -p mnt; /usr/bin/mount -t tmpfs none mnt && echo ESCAPED"),
        ),
        (
            "setuid_py",
            "run_python",
            py("import os; os.setuid(0); print('ESCAPED')"),
        ),
        (
            "uid",
            "run_bash",
            bash("[ \"$(id -u)\" = 0 ] && echo ESCAPED; id"),
        ),
        (
            "caps",
            "run_python",
            py(
                "import ctypes; libc = ctypes.CDLL(None); hdr = (ctypes.c_uint32 * 2)(0x20080522, 0); data = (ctypes.c_uint32 * 6)(); r = libc.syscall(125, hdr, data); print('caps', list(data)); print('ESCAPED' if r != 0 or any(data) else 'no capabilities')",
            ),
        ),
        (
            "unshare",
            "run_bash",
            bash("unshare -Ur true && echo ESCAPED"),
        ),
    ]
}
