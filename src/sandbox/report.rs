//! What the helper enforced, layer by layer: printed by a probe job for `check` and
//! `daemon_started`, and the reason a `full` sandbox refuses to run.

use serde::{Deserialize, Serialize};

/// One confinement layer and whether it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    /// Short name: `session`, `descriptors`, `rlimits`, `pid_namespace` (PID and
    /// IPC), `profile` (the read-only profile's private `/tmp`), `privilege_drop`,
    /// `no_new_privs`, `landlock`, `seccomp`.
    pub name: String,
    /// Whether it is in force.
    pub enforced: bool,
    /// What exactly, or why not and how to fix it.
    pub detail: String,
    /// A layer `sandbox.require = "full"` does not insist on (the per-call cgroup,
    /// which needs a delegated cgroup tree).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// Every layer the helper tried, in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The kernel's Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// The layers.
    pub layers: Vec<Layer>,
}

impl Report {
    /// Records a layer.
    pub fn push(&mut self, name: &str, enforced: bool, detail: impl Into<String>) {
        self.layers.push(Layer {
            name: name.into(),
            enforced,
            detail: detail.into(),
            optional: false,
        });
    }

    /// Records a layer that is reported but not required.
    pub fn push_optional(&mut self, name: &str, enforced: bool, detail: impl Into<String>) {
        self.push(name, enforced, detail);
        if let Some(l) = self.layers.last_mut() {
            l.optional = true;
        }
    }

    /// The layers not in force, as `name: detail`.
    pub fn missing(&self) -> Vec<String> {
        self.layers
            .iter()
            .filter(|l| !l.enforced && !l.optional)
            .map(|l| format!("{}: {}", l.name, l.detail))
            .collect()
    }
}

/// The kernel's Landlock ABI version, 0 when Landlock is unavailable.
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute and size 0 and the VERSION flag, the syscall
    // only returns the ABI number; it reads and writes no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}
