//! The environment changes a profile makes inside the helper. The parent sets the
//! tool's environment when it starts the helper, before the job (and so its
//! profile) is known — a spare helper waits with it already set — so what depends
//! on the profile is changed here, in the single-threaded helper, before `exec`.

use std::path::Path;

/// Points `TMPDIR` and `HOME` at the private temporary directory `tmp`: the
/// workspace's `.tmp` is not writable under the read-only profile.
pub fn read_only(tmp: &Path) {
    let tmp = tmp.display().to_string();
    set("TMPDIR", &tmp);
    set("HOME", &tmp);
}

fn set(key: &str, value: &str) {
    // SAFETY: the helper is single-threaded (no tokio, no threads spawned), so no
    // other thread reads or writes the environment concurrently.
    unsafe { std::env::set_var(key, value) };
}
