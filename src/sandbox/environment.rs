//! The environment changes a profile makes inside the helper. The parent sets the
//! tool's environment when it starts the helper, before the job (and so its
//! profile) is known — a spare helper waits with it already set — so what depends
//! on the profile is worked out here and given to the program at `exec`.
//!
//! The changes are collected in an [`Overrides`], never set on the process: a
//! spawn server's child may share the server's memory until it `exec`s, and the
//! server's environment must stay what every call starts from.

use std::ffi::OsString;
use std::path::Path;

/// What git's command-scope configuration (`GIT_CONFIG_KEY_n`, which wins over a
/// repository's own `.git/config`) switches off under the read-only profile: the
/// programs a repository's config could make `git status` or `git log` run. Not
/// here, because no value means "off": `diff.external` (an empty one makes every
/// `git diff` fail) and filter and textconv drivers (named per repository); those
/// still run, inside the read-only process (see docs/sandbox.md).
const READ_ONLY_GIT: [(&str, &str); 3] = [
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
];

/// Points `TMPDIR` and `HOME` at the private temporary directory `tmp` (the
/// workspace's `.tmp` is not writable under the read-only profile), and gives git
/// the read-only profile's configuration: [`READ_ONLY_GIT`] appended to the
/// entries the parent set (keeping `GIT_CONFIG_COUNT` consistent with them), no
/// prompt, and no optional locks, so `git status` does not try to write the
/// index.
pub fn read_only(tmp: &Path, env: &mut Overrides) {
    let tmp = tmp.display().to_string();
    env.set("TMPDIR", &tmp);
    env.set("HOME", &tmp);
    let first = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    for (i, (key, value)) in READ_ONLY_GIT.iter().enumerate() {
        env.set(format!("GIT_CONFIG_KEY_{}", first + i), key);
        env.set(format!("GIT_CONFIG_VALUE_{}", first + i), value);
    }
    env.set(
        "GIT_CONFIG_COUNT",
        (first + READ_ONLY_GIT.len()).to_string(),
    );
    env.set("GIT_TERMINAL_PROMPT", "0");
    env.set("GIT_OPTIONAL_LOCKS", "0");
}

/// Points `TMPDIR` and `HOME` at the server profile's private temporary directory
/// `tmp` (interpreters such as node and python want one). Not the workspace, which
/// tools write: python's user site-packages (`~/.local`, whose `.pth` files run at
/// start), node's `~/.node_modules` and the like would run what they put there
/// inside the server, with its variables and rights.
pub fn server(tmp: &Path, env: &mut Overrides) {
    let tmp = tmp.display().to_string();
    env.set("TMPDIR", &tmp);
    env.set("HOME", &tmp);
}

/// Variables set on top of the process's own environment for the program it
/// `exec`s, in the order they were set.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Overrides(Vec<(OsString, OsString)>);

impl Overrides {
    /// Sets `key` to `value` (a later value for the same key wins).
    pub fn set(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) {
        let (key, value) = (key.into(), value.into());
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// `vars` (in their order) with these set as `setenv` would set them one after
    /// another: a variable already there keeps its place, a new one comes last.
    pub fn applied_to(&self, mut vars: Vec<(OsString, OsString)>) -> Vec<(OsString, OsString)> {
        for (key, value) in &self.0 {
            match vars.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value.clone(),
                None => vars.push((key.clone(), value.clone())),
            }
        }
        vars
    }

    /// The process's environment with these set: what the program is given.
    pub fn environment(&self) -> Vec<(OsString, OsString)> {
        self.applied_to(std::env::vars_os().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn overrides_replace_in_place_and_append_new_names_in_order() {
        let mut env = Overrides::default();
        env.set("HOME", "/tmp");
        env.set("NEW_B", "1");
        env.set("NEW_A", "2");
        env.set("NEW_B", "3");
        let got = env.applied_to(vars(&[("PATH", "/bin"), ("HOME", "/root"), ("LANG", "C")]));
        assert_eq!(
            got,
            vars(&[
                ("PATH", "/bin"),
                ("HOME", "/tmp"),
                ("LANG", "C"),
                ("NEW_B", "3"),
                ("NEW_A", "2"),
            ])
        );
    }

    #[test]
    fn the_read_only_git_entries_follow_those_already_given() {
        let mut env = Overrides::default();
        // The count is read from the process: under test it is whatever the
        // runner has, so compare against that.
        let first: usize = std::env::var("GIT_CONFIG_COUNT")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        read_only(Path::new("/tmp"), &mut env);
        let got = env.applied_to(Vec::new());
        let value = |k: &str| {
            got.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        let count = first + READ_ONLY_GIT.len();
        assert_eq!(value("GIT_CONFIG_COUNT"), Some(count.to_string()));
        assert_eq!(
            value(&format!("GIT_CONFIG_KEY_{first}")).as_deref(),
            Some("core.fsmonitor")
        );
        assert_eq!(value("HOME").as_deref(), Some("/tmp"));
    }
}
