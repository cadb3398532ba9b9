//! Settings into sandbox types: the one place the parent turns
//! `settings.json` (`allowed_paths`, `sandbox`) into the [`Confinement`] the helper
//! applies. The helper's types live in [`crate::sandbox`], which imports nothing
//! of `config`; this conversion is why only the parent side knows both.

use std::path::Path;

use crate::config::{SandboxRequire, SandboxSettings, Settings, resolve};
use crate::sandbox::{Confinement, Limits, Profile, Require};

impl From<SandboxRequire> for Require {
    fn from(r: SandboxRequire) -> Require {
        match r {
            SandboxRequire::Full => Require::Full,
            SandboxRequire::BestEffort => Require::BestEffort,
        }
    }
}

impl From<crate::policy::Profile> for Profile {
    fn from(p: crate::policy::Profile) -> Profile {
        match p {
            crate::policy::Profile::ReadOnly => Profile::ReadOnly,
            crate::policy::Profile::Write => Profile::Write,
        }
    }
}

impl From<&SandboxSettings> for Limits {
    fn from(s: &SandboxSettings) -> Limits {
        Limits {
            network: s.network,
            cpu_secs: s.cpu_secs,
            memory_mb: s.memory_mb,
            max_processes: s.max_processes,
            max_file_mb: s.max_file_mb,
            max_open_files: s.max_open_files,
            tmp_mb: s.tmp_mb,
            user: s.user.clone(),
            require: s.require.into(),
        }
    }
}

// An inherent impl of a sandbox type, written here on purpose: callers keep
// `Confinement::from_settings`, while the sandbox module stays free of `config`.
impl Confinement {
    /// The confinement `settings` asks for under `profile`, with relative paths
    /// resolved against `root`.
    pub fn from_settings(settings: &Settings, root: &Path, profile: Profile) -> Confinement {
        let paths = |list: &[String]| list.iter().map(|p| resolve(root, p)).collect();
        Confinement {
            read: paths(&settings.allowed_paths.read),
            write: paths(&settings.allowed_paths.write),
            profile,
            limits: Limits::from(&settings.sandbox),
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
        let c = Confinement::from_settings(&settings, Path::new("/root-dir"), Profile::Write);
        assert!(
            c.read
                .contains(&Path::new("/root-dir/workspace").to_path_buf())
        );
        assert!(c.read.contains(&Path::new("/usr").to_path_buf()));
        assert_eq!(c.write[0], Path::new("/root-dir/workspace"));
        let s = &settings.sandbox;
        let expected = Limits {
            network: true,
            cpu_secs: s.cpu_secs,
            memory_mb: s.memory_mb,
            max_processes: s.max_processes,
            max_file_mb: s.max_file_mb,
            max_open_files: s.max_open_files,
            tmp_mb: s.tmp_mb,
            user: s.user.clone(),
            require: Require::BestEffort,
        };
        assert_eq!(c.limits, expected);
    }
}
