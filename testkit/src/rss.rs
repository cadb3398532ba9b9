//! Peak resident memory of a child process, read from its own `/proc/<pid>/status`
//! (`VmHWM`) while it runs. `wait4`'s `ru_maxrss` is not used: a child started with
//! `posix_spawn` shares the parent's memory until `exec`, so its maximum would
//! include the (test) parent's resident set.

use std::process::{Child, ExitStatus};
use std::time::Duration;

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Waits for `child`, sampling its peak RSS every 5 ms; returns its status and the
/// highest `VmHWM` seen, in KiB.
pub fn wait_measuring_rss(mut child: Child) -> (ExitStatus, u64) {
    let pid = child.id();
    let mut peak = 0;
    loop {
        if let Some(kib) = vm_hwm_kib(pid) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return (status, peak);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
