//! docs/sandbox.md: the x32 numbering of system calls is closed. An x32 call reports
//! the x86_64 architecture with its number offset by 0x40000000, so a filter
//! matching numbers alone would let `socket` or `ptrace` through it on a kernel
//! built with x32 support. The sandbox answers EPERM to every such number before the
//! kernel looks at it (a kernel without x32 would answer ENOSYS): the errno tells
//! the filter from the kernel, here as on a kernel where x32 is live.

#![cfg(target_arch = "x86_64")]

use crate::common::{TestRoot, stderr, stdout};

/// Calls `socket(AF_INET, SOCK_DGRAM)`, `ptrace(PTRACE_TRACEME)` and `getpid` by
/// their x32 numbers, and `getpid` by its own; prints each errno (0 for success).
const X32: &str = r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
X32 = 0x40000000
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    return 0 if r >= 0 else ctypes.get_errno()
print("x32-socket", call(X32 + 41, 2, 2, 0))
print("x32-ptrace", call(X32 + 101, 0, 0, 0, 0))
print("x32-getpid", call(X32 + 39))
print("getpid", call(39))
"#;

#[test]
fn every_x32_system_call_is_refused_by_the_filter_not_left_to_the_kernel() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root.run(&["sandbox", "--", "python3", "-c", X32]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    let eperm = libc::EPERM.to_string();
    for call in ["x32-socket", "x32-ptrace", "x32-getpid"] {
        let errno = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{call} ")))
            .unwrap_or_else(|| panic!("no {call} line: {text}"));
        assert_eq!(errno, eperm, "{call}: {text}");
    }
    assert!(
        text.contains("\ngetpid 0"),
        "the native call still works: {text}"
    );
}
