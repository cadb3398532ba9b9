//! Whether joining a call cgroup is cheap here. Every tool call's first process
//! writes itself into its call's cgroup ([`super::cgroup`]), and the kernel
//! serialises such moves against every fork and exit with a per-CPU semaphore.
//! Unless the kernel is told to favour cgroup moves (`favordynmods`), taking it
//! for a move waits for an RCU grace period whenever no move happened in the last
//! few milliseconds: between a model's answers, every call waits. Measured on the
//! development machine: a join costs 8–15 µs back to back, 4.4–13 ms after 50 ms
//! without one, and 30–49 µs in any case once moves are favoured.
//!
//! harnessd does not change the kernel's mode itself: it is system-wide, and
//! on the development machine (cgroup v1) it outlived the mount that set it. `check` says so instead,
//! with what the operator can do.

use std::path::Path;

/// The warning `check` prints when call cgroups are in use and nothing says the
/// kernel favours cgroup moves; `None` when it does, or when there are no call
/// cgroups to join.
pub fn slow_join_warning() -> Option<String> {
    super::cgroup::available()?;
    let read = |p: &str| std::fs::read_to_string(Path::new(p)).unwrap_or_default();
    let release = read("/proc/sys/kernel/osrelease");
    let kconfig = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok();
    let favoured = favours_moves(
        &read("/proc/cmdline"),
        &read("/proc/self/mountinfo"),
        kconfig.as_deref(),
    );
    (!favoured).then(|| {
        "each tool call joins a cgroup of its own, and nothing says this kernel favours \
         cgroup moves (no cgroup_favordynmods=true on its command line, no cgroup mount \
         with favordynmods, no CONFIG_CGROUP_FAVOR_DYNMODS=y in /boot): after an idle \
         spell, as between a model's answers, each join then waits for an RCU grace \
         period (5-15 ms a call where this was measured). Boot with \
         cgroup_favordynmods=true (Linux 6.7 and later; cgroup v1 and v2), or under \
         cgroup v2 run `mount -o remount,favordynmods /sys/fs/cgroup`; forks and exits \
         cost a little more in exchange"
            .to_string()
    })
}

/// Whether the kernel favours cgroup moves, from its command line, the mount
/// table (`/proc/self/mountinfo`) and its build config if known. The command
/// line decides when it says either way (it overrides the build default);
/// otherwise a cgroup mount with `favordynmods`, or the build default, says yes.
pub fn favours_moves(cmdline: &str, mountinfo: &str, kconfig: Option<&str>) -> bool {
    // Each occurrence is applied in turn, so the last valid one holds; one the
    // kernel cannot read leaves the setting as it was.
    let asked = cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("cgroup_favordynmods="))
        .filter_map(kstrtobool)
        .next_back();
    if let Some(favoured) = asked {
        return favoured;
    }
    let mounted = super::cgroup::mounts(mountinfo)
        .any(|m| matches!(m.fstype, "cgroup" | "cgroup2") && m.has("favordynmods"));
    mounted
        || kconfig.is_some_and(|c| {
            c.lines()
                .any(|l| l.trim() == "CONFIG_CGROUP_FAVOR_DYNMODS=y")
        })
}

/// The kernel's `kstrtobool`: `y`, `t`, `1` and `on` are true, `n`, `f`, `0` and
/// `off` false, by their first letters; anything else is not a boolean.
fn kstrtobool(value: &str) -> Option<bool> {
    let mut chars = value.chars().map(|c| c.to_ascii_lowercase());
    match (chars.next(), chars.next()) {
        (Some('y' | 't' | '1'), _) | (Some('o'), Some('n')) => Some(true),
        (Some('n' | 'f' | '0'), _) | (Some('o'), Some('f')) => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::favours_moves;

    const PLAIN: &str = "\
30 25 0:26 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
31 25 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
40 1 8:1 / / rw,relatime - ext4 /dev/vda1 rw,favordynmods";

    #[test]
    fn a_cgroup_mount_with_favordynmods_says_yes_another_filesystem_does_not() {
        assert!(!favours_moves("root=/dev/vda1", PLAIN, None));
        let v2 = PLAIN.replace("rw,nsdelegate", "rw,nsdelegate,favordynmods");
        assert!(favours_moves("root=/dev/vda1", &v2, None));
        let v1 = PLAIN.replace("rw,pids", "rw,favordynmods,pids");
        assert!(favours_moves("", &v1, None));
    }

    #[test]
    fn the_command_line_overrides_the_build_default() {
        let built_in = "# comment\nCONFIG_CGROUP_FAVOR_DYNMODS=y\n";
        assert!(favours_moves("quiet", PLAIN, Some(built_in)));
        assert!(!favours_moves(
            "cgroup_favordynmods=0",
            PLAIN,
            Some(built_in)
        ));
        assert!(favours_moves("cgroup_favordynmods=true quiet", PLAIN, None));
        assert!(favours_moves("cgroup_favordynmods=Y", PLAIN, None));
        // The last of several is the one the kernel keeps.
        assert!(!favours_moves(
            "cgroup_favordynmods=1 cgroup_favordynmods=n",
            PLAIN,
            None
        ));
        assert!(!favours_moves(
            "",
            PLAIN,
            Some("# CONFIG_CGROUP_FAVOR_DYNMODS is not set")
        ));
        // A value the kernel cannot read changes nothing: the build default holds.
        assert!(favours_moves("cgroup_favordynmods=", PLAIN, Some(built_in)));
        assert!(favours_moves(
            "cgroup_favordynmods=maybe",
            PLAIN,
            Some(built_in)
        ));
        assert!(!favours_moves(
            "cgroup_favordynmods=off",
            PLAIN,
            Some(built_in)
        ));
        assert!(favours_moves("cgroup_favordynmods=On", PLAIN, None));
    }
}
