//! What the sandbox enforces for a root's settings here, and whether tools could
//! run as they are configured: the judgement `harnessd check` prints and a hot
//! reload must pass before a new policy takes effect, so the daemon never puts
//! in force what `check` would refuse (a `sandbox.user` that does not exist under
//! `sandbox.require = "full"`, say).
//!
//! The probe is real: a helper confined exactly as a tool would be, once with the
//! write profile and once read-only. It costs a few tens of milliseconds, so a
//! reload probes only when the confinement changed ([`judge_change`]): a rule
//! edit or `approve --remember` never waits for one.

use crate::config::{ConfigError, Loaded, SandboxRequire, find_key};
use crate::sandbox::{Confinement, Layer, Profile};

use super::Executor;

/// What a probe of a root's confinement found.
#[derive(Debug, Clone)]
pub struct Enforcement {
    /// The kernel's Landlock ABI.
    pub landlock_abi: u32,
    /// One entry per layer, in probe order (see [`one_per_layer`]).
    pub layers: Vec<Layer>,
    /// Why the probe itself failed, if it did.
    pub probe_error: Option<String>,
    /// Required (non-optional) layers found not enforced.
    pub missing: usize,
    /// The first of them as the probe reported it: name and why.
    pub first_missing: Option<(String, String)>,
    /// `sandbox.require = "full"` and the sandbox is incomplete here: tools
    /// would be refused, so `check` fails and a reload is rejected.
    pub refused: bool,
}

impl Enforcement {
    /// Probes the confinement `loaded` asks for through `executor`. The probes
    /// run in call cgroups, which are pooled for later calls; a caller that makes
    /// no other call removes them ([`super::remove_pooled_cgroups`]).
    pub fn probe(loaded: &Loaded, executor: &Executor) -> Enforcement {
        let (landlock_abi, layers, probe_error) = probe_layers(loaded, executor);
        let first_missing = layers
            .iter()
            .find(|l| !l.enforced && !l.optional)
            .map(|l| (l.name.clone(), l.detail.clone()));
        let layers = one_per_layer(layers);
        let missing = layers.iter().filter(|l| !l.enforced && !l.optional).count();
        let refused = loaded.policy.settings.sandbox.require == SandboxRequire::Full
            && (probe_error.is_some() || missing > 0);
        Enforcement {
            landlock_abi,
            layers,
            probe_error,
            missing,
            first_missing,
            refused,
        }
    }

    /// The error of a `full` sandbox this host cannot give, naming the first
    /// layer that cannot be had and the key to fix: `sandbox.user` for the
    /// privilege drop, `sandbox.require` otherwise. `None` when tools can run.
    pub fn refusal(&self, loaded: &Loaded) -> Option<ConfigError> {
        if !self.refused {
            return None;
        }
        let (layer, why) = match &self.probe_error {
            Some(e) => ("probe".to_string(), e.clone()),
            None => self.first_missing.clone()?,
        };
        let key = if layer == "privilege_drop" {
            "sandbox.user"
        } else {
            "sandbox.require"
        };
        let file = loaded.paths.display(&loaded.paths.settings);
        let text = std::fs::read_to_string(&loaded.paths.settings).unwrap_or_default();
        let message = format!(
            "sandbox.require is \"full\" but layer {layer} cannot be enforced here: {why}; tools \
             would be refused. Fix that, or set sandbox.require to \"best_effort\""
        );
        Some(ConfigError::invalid(
            &file,
            find_key(&text, key),
            key,
            message,
        ))
    }
}

/// What a judged probe ran on: the confinement of a tool and its working
/// directory. The same again enforces what it enforced before.
pub type Probed = (Confinement, std::path::PathBuf);

/// What the probe of `loaded` would run on.
pub fn probed(loaded: &Loaded) -> Probed {
    (
        Confinement::for_root(loaded, Profile::Write),
        loaded.paths.workspace.clone(),
    )
}

/// Whether a reload may put `candidate` in force: what `check` would refuse is
/// refused. The files themselves were validated when `candidate` was built; what
/// is left is the probe, run only when `candidate` asks for another confinement
/// than `last`, the last one judged (then `last` becomes it).
pub fn judge_change(
    candidate: &Loaded,
    last: &mut Probed,
    executor: &Executor,
) -> Result<(), ConfigError> {
    let asked = probed(candidate);
    if asked == *last {
        return Ok(());
    }
    if let Some(e) = Enforcement::probe(candidate, executor).refusal(candidate) {
        return Err(e);
    }
    *last = asked;
    Ok(())
}

/// A real probe through the executor, of the write profile, with the `profile`
/// layer of a second, read-only probe (its private `/tmp`, which a host may not
/// give) after the namespaces.
fn probe_layers(loaded: &Loaded, executor: &Executor) -> (u32, Vec<Layer>, Option<String>) {
    let probe = |profile| {
        let confine = Confinement::for_root(loaded, profile);
        executor.probe(&confine, &loaded.paths.workspace)
    };
    let probed = probe(Profile::Write);
    let read_only = probe(Profile::ReadOnly);
    match probed {
        Ok(mut report) => {
            let profile = match read_only {
                Ok(r) => r.layers.into_iter().find(|l| l.name == "profile"),
                Err(e) => Some(Layer {
                    name: "profile".into(),
                    enforced: false,
                    detail: format!("the read-only probe failed: {e}"),
                    optional: false,
                }),
            };
            if let Some(layer) = profile {
                let at = report
                    .layers
                    .iter()
                    .position(|l| l.name == "pid_namespace")
                    .map_or(report.layers.len(), |i| i + 1);
                report.layers.insert(at, layer);
            }
            let (enforced, detail) = daemon_cgroup(loaded.config.daemon.memory_mb);
            report.push_optional("daemon_cgroup", enforced, detail);
            (report.landlock_abi, report.layers, None)
        }
        Err(e) => (crate::sandbox::landlock_abi(), Vec::new(), Some(e)),
    }
}

/// Whether `serve` can run in a cgroup of its own limited to `daemon.memory_mb`:
/// where the probe's call cgroup could be made, the daemon's sibling can be too.
fn daemon_cgroup(memory_mb: u64) -> (bool, String) {
    match crate::exec::cgroup::available() {
        Some(kind) => (
            true,
            format!(
                "{kind}: serve runs in its own cgroup limited to daemon.memory_mb = \
                 {memory_mb} MiB, beside the call cgroups"
            ),
        ),
        None => (
            false,
            format!(
                "no writable cgroup with a memory controller: serve runs without its \
                 memory limit (daemon.memory_mb = {memory_mb}); response bodies still \
                 share three quarters of it"
            ),
        ),
    }
}

/// One entry per layer name, in probe order. The helper reports a layer twice
/// when it falls back (`privilege_drop` to `nobody`'s uid after `sandbox.user`
/// failed); shown as two lines that contradicted each other. The merged layer is
/// enforced only if every attempt was, and its detail tells the whole story.
fn one_per_layer(layers: Vec<Layer>) -> Vec<Layer> {
    let mut merged: Vec<Layer> = Vec::new();
    for layer in layers {
        match merged.iter_mut().find(|l| l.name == layer.name) {
            Some(first) => {
                first.detail = format!(
                    "{}; with sandbox.require \"best_effort\": {}",
                    first.detail, layer.detail
                );
                first.enforced &= layer.enforced;
                first.optional &= layer.optional;
            }
            None => merged.push(layer),
        }
    }
    merged
}
