//! Built-in defaults come from code (docs/config.md): `init` writes the
//! same files whatever root it is run from or next to, and nothing a root holds
//! is an input of the build, so editing the repository's own config (it is a
//! working root) neither recompiles harnessd nor changes what `init` writes.

use std::path::{Path, PathBuf};

use crate::common::{TestRoot, bin, rust_files, src_dir, stderr};

/// Every file `init` writes, relative to the root.
const INIT_FILES: [&str; 6] = [
    "config/config.toml",
    "policies/settings.json",
    "policies/settings.schema.json",
    "transcripts/.gitignore",
    "workspace/scores.csv",
    "systemd/harnessd.service",
];

fn init_into(cwd: &Path, dir: &Path) {
    let out = std::process::Command::new(bin())
        .current_dir(cwd)
        .env("HARNESSD_ROOT", cwd)
        .arg("init")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "init {}: {}",
        dir.display(),
        stderr(&out)
    );
}

#[test]
fn init_into_a_new_root_after_editing_the_roots_config_writes_the_defaults() {
    // The root an operator works in (as the repository is), edited.
    let edited = TestRoot::new("http://127.0.0.1:9");
    edited.set_config("api", "model", "\"claude-edited-locally\"");
    edited.edit_settings(|s| s["output"]["max_chars"] = serde_json::json!(123));
    let config = std::fs::read_to_string(edited.dir.join("config/config.toml")).unwrap();
    assert!(config.contains("claude-edited-locally"));

    let pristine = TestRoot::new("http://127.0.0.1:9")
        .dir
        .with_extension("pristine");
    let _ = std::fs::remove_dir_all(&pristine);
    init_into(&std::env::temp_dir(), &pristine);
    let new = edited.dir.with_extension("new");
    let _ = std::fs::remove_dir_all(&new);
    init_into(&edited.dir, &new);
    for file in INIT_FILES {
        let written = std::fs::read_to_string(new.join(file)).unwrap();
        let expected = std::fs::read_to_string(pristine.join(file)).unwrap();
        assert_eq!(written, expected, "{file} is not the built-in default");
    }
    let written = std::fs::read_to_string(new.join("config/config.toml")).unwrap();
    assert!(!written.contains("edited-locally"), "{written}");
    assert!(
        written.contains("\nmodel = \"claude-sonnet-4-5\"\n"),
        "{written}"
    );
    let _ = std::fs::remove_dir_all(&new);
    let _ = std::fs::remove_dir_all(&pristine);
}

/// `include_str!`/`include_bytes!` in `src/` of files outside `src/`: each would
/// make that file an input of the build.
fn includes_outside_src() -> Vec<String> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for mac in ["include_str!(\"", "include_bytes!(\""] {
                let Some(start) = line.find(mac) else {
                    continue;
                };
                let arg = &line[start + mac.len()..];
                let arg = &arg[..arg.find('"').unwrap_or(arg.len())];
                let target = normalise(&file.parent().unwrap().join(arg));
                if !target.starts_with(&src) {
                    found.push(format!("{}:{}: {arg}", file.display(), n + 1));
                }
            }
        }
    }
    found
}

fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn no_file_of_a_root_is_an_input_of_the_build() {
    let found = includes_outside_src();
    assert!(
        found.is_empty(),
        "built-in defaults must come from code under src/, not from a root's files \
         (an edit would recompile harnessd and change what init writes): {found:#?}"
    );
    let build_script = Path::new(env!("CARGO_MANIFEST_DIR")).join("build.rs");
    assert!(
        !build_script.exists(),
        "a build script could watch a root's files"
    );
}
