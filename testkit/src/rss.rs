//! Peak resident memory of a child process, read from its own `/proc/<pid>/status`
//! (`VmHWM`) while it runs. `wait4`'s `ru_maxrss` is not used: a child started with
//! `posix_spawn` shares the parent's memory until `exec`, so its maximum would
//! include the (test) parent's resident set.

use std::process::{Child, ExitStatus};
use std::time::Duration;

/// A `/proc/<pid>/status` figure in KiB (`key` with its colon: `"VmRSS:"`,
/// `"VmHWM:"`); 0 when the process or the line is gone.
pub fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    Some(status_kib(pid, "VmHWM:")).filter(|&k| k > 0)
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
