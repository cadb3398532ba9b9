//! A fresh harnessd root for a benchmark: `harnessd init` into the temporary
//! directory, then text replacements in `config/config.toml` (the shipped file's
//! own lines, so a bench states exactly what it changes).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Makes `<tmp>/harnessd-bench-<name>-<pid>` with `bin init` (replacing an older
/// one) and applies `edits` to its config.toml, each `(shipped text, new text)`.
/// Panics when init fails or an edit's text is not in the file, so a renamed key
/// cannot leave a bench measuring the defaults.
pub fn init_root(bin: &str, name: &str, edits: &[(&str, &str)]) -> PathBuf {
    let root = std::env::temp_dir().join(format!("harnessd-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let ok = Command::new(bin)
        .arg("init")
        .arg(&root)
        .stdout(Stdio::null())
        .status()
        .expect("run harnessd init")
        .success();
    assert!(ok, "harnessd init {} failed", root.display());
    edit_file(&root.join("config/config.toml"), edits);
    root
}

/// Applies `(old, new)` replacements to the file at `path`; each `old` must occur.
pub fn edit_file(path: &Path, edits: &[(&str, &str)]) {
    let mut text = std::fs::read_to_string(path).expect("read the file to edit");
    for (old, new) in edits {
        assert!(text.contains(old), "{old:?} is not in {}", path.display());
        text = text.replace(old, new);
    }
    std::fs::write(path, text).expect("write the edited file");
}
