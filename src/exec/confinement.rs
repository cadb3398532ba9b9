//! Settings into sandbox types: the one place the parent turns
//! `settings.json` (`allowed_paths`, `sandbox`) into the [`Confinement`] the helper
//! applies. The helper's types live in [`crate::sandbox`], which imports nothing
//! of `config`; this conversion is why only the parent side knows both.

use std::path::{Path, PathBuf};

use crate::config::{Loaded, SandboxRequire, SandboxSettings, Settings, resolve};
use crate::sandbox::{Confinement, Limits, Network, Profile, Require};

impl From<SandboxRequire> for Require {
    fn from(r: SandboxRequire) -> Require {
        match r {
            SandboxRequire::Full => Require::Full,
            SandboxRequire::BestEffort => Require::BestEffort,
        }
    }
}

impl From<crate::protocol::Profile> for Profile {
    fn from(p: crate::protocol::Profile) -> Profile {
        match p {
            crate::protocol::Profile::ReadOnly => Profile::ReadOnly,
            crate::protocol::Profile::Write => Profile::Write,
        }
    }
}

/// The helper's limits from `s`, dropping to `user` (the resolved
/// [`crate::config::ToolUser::user`], never `s.user`, which may say `"auto"`).
fn limits(s: &SandboxSettings, user: &str) -> Limits {
    Limits {
        network: Network::from_bool(s.network),
        cpu_secs: Some(s.cpu_secs),
        memory_mb: s.memory_mb,
        max_processes: s.max_processes,
        max_file_mb: s.max_file_mb,
        max_open_files: s.max_open_files,
        tmp_mb: s.tmp_mb,
        user: user.to_string(),
        require: s.require.into(),
    }
}

// An inherent impl of a sandbox type, written here on purpose: callers keep
// `Confinement::from_settings`, while the sandbox module stays free of `config`.
impl Confinement {
    /// The confinement a tool call of the root `loaded` gets under `profile`:
    /// its settings, with tools running as its resolved tool user.
    pub fn for_root(loaded: &Loaded, profile: Profile) -> Confinement {
        Confinement::from_settings(
            &loaded.policy.settings,
            &loaded.paths.root,
            &loaded.tool_user.user,
            profile,
        )
    }

    /// The confinement of a server of the root `loaded`: it reads the policy's
    /// `allowed_paths.read` and its own `read`, writes only its own `write` (and a
    /// private `/tmp`, [`Profile::Server`]), has the network only when `network`,
    /// the same memory, process, file and descriptor limits, uid and `require` as a
    /// tool — and no CPU-time limit, since it lives as long as its task. Paths are
    /// absolute (the caller resolved them).
    pub fn for_server(
        loaded: &Loaded,
        read: &[PathBuf],
        write: &[PathBuf],
        network: bool,
    ) -> Confinement {
        let settings = &loaded.policy.settings;
        let mut limits = limits(&settings.sandbox, &loaded.tool_user.user);
        limits.network = Network::from_bool(network);
        limits.cpu_secs = None;
        let mut all_read: Vec<PathBuf> = settings
            .allowed_paths
            .read
            .iter()
            .map(|p| resolve(&loaded.paths.root, p))
            .collect();
        all_read.extend(read.iter().cloned());
        Confinement {
            read: all_read,
            write: write.to_vec(),
            profile: Profile::Server,
            limits,
        }
    }

    /// The confinement of a hook of the root `loaded`: a server's (the policy's
    /// `allowed_paths.read` and its own `read`, a private `/tmp`) with no write
    /// set, its own `network`, and the tools' CPU-time limit, since it is one-shot.
    pub fn for_hook(loaded: &Loaded, read: &[PathBuf], network: Network) -> Confinement {
        let mut c = Confinement::for_server(loaded, read, &[], false);
        c.limits.network = network;
        c.limits.cpu_secs = Some(loaded.policy.settings.sandbox.cpu_secs);
        c
    }

    /// The confinement `settings` asks for under `profile`, with relative paths
    /// resolved against `root` and tools running as `user` (resolved, see
    /// [`crate::config::ToolUser`]).
    pub fn from_settings(
        settings: &Settings,
        root: &Path,
        user: &str,
        profile: Profile,
    ) -> Confinement {
        let paths = |list: &[String]| list.iter().map(|p| resolve(root, p)).collect();
        Confinement {
            read: paths(&settings.allowed_paths.read),
            write: paths(&settings.allowed_paths.write),
            profile,
            limits: limits(&settings.sandbox, user),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_become_the_helpers_limits_and_absolute_paths() {
        let mut settings = Settings::default();
        settings.sandbox.require = SandboxRequire::BestEffort;
        settings.sandbox.network = true;
        let c =
            Confinement::from_settings(&settings, Path::new("/root-dir"), "61200", Profile::Write);
        assert!(
            c.read
                .contains(&Path::new("/root-dir/workspace").to_path_buf())
        );
        assert!(c.read.contains(&Path::new("/usr").to_path_buf()));
        assert_eq!(c.write[0], Path::new("/root-dir/workspace"));
        let s = &settings.sandbox;
        let expected = Limits {
            network: Network::On,
            cpu_secs: Some(s.cpu_secs),
            memory_mb: s.memory_mb,
            max_processes: s.max_processes,
            max_file_mb: s.max_file_mb,
            max_open_files: s.max_open_files,
            tmp_mb: s.tmp_mb,
            user: "61200".into(),
            require: Require::BestEffort,
        };
        assert_eq!(c.limits, expected);
    }
}
