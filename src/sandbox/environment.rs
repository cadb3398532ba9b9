//! The environment changes a profile makes inside the helper. The parent sets the
//! tool's environment when it starts the helper, before the job (and so its
//! profile) is known — a spare helper waits with it already set — so what depends
//! on the profile is changed here, in the single-threaded helper, before `exec`.

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
pub fn read_only(tmp: &Path) {
    let tmp = tmp.display().to_string();
    set("TMPDIR", &tmp);
    set("HOME", &tmp);
    let first = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    for (i, (key, value)) in READ_ONLY_GIT.iter().enumerate() {
        set(&format!("GIT_CONFIG_KEY_{}", first + i), key);
        set(&format!("GIT_CONFIG_VALUE_{}", first + i), value);
    }
    set(
        "GIT_CONFIG_COUNT",
        &(first + READ_ONLY_GIT.len()).to_string(),
    );
    set("GIT_TERMINAL_PROMPT", "0");
    set("GIT_OPTIONAL_LOCKS", "0");
}

/// Points `TMPDIR` and `HOME` at the server profile's private temporary directory
/// `tmp` (interpreters such as node and python want one). Not the workspace, which
/// tools write: python's user site-packages (`~/.local`, whose `.pth` files run at
/// start), node's `~/.node_modules` and the like would run what they put there
/// inside the server, with its variables and rights.
pub fn server(tmp: &Path) {
    let tmp = tmp.display().to_string();
    set("TMPDIR", &tmp);
    set("HOME", &tmp);
}

fn set(key: &str, value: &str) {
    // SAFETY: the helper is single-threaded (no tokio, no threads spawned), so no
    // other thread reads or writes the environment concurrently.
    unsafe { std::env::set_var(key, value) };
}
