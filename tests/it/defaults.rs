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
    // The build script (the package's completions, man page and unit) reads only
    // what its INPUTS list, each its own file or under src/, and names no other path.
    let build_script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("build.rs")).unwrap();
    let list = &build_script[build_script.find("const INPUTS").unwrap()..];
    let list = &list[list.find('=').unwrap()..list.find("];").unwrap()];
    let inputs: Vec<&str> = list.split('"').skip(1).step_by(2).collect();
    assert!(!inputs.is_empty(), "build.rs lists no INPUTS");
    for input in &inputs {
        assert!(
            *input == "build.rs" || input.starts_with("src/"),
            "build.rs reads {input}, outside src/"
        );
    }
    assert!(
        build_script.contains("for input in INPUTS"),
        "build.rs watches other files"
    );
    let literals: Vec<&str> = build_script.split('"').skip(1).step_by(2).collect();
    for dir in [
        "config/",
        "policies/",
        "workspace/",
        "skills/",
        "transcripts/",
        "systemd/",
    ] {
        for literal in &literals {
            assert!(
                !literal.starts_with(dir) && !literal.starts_with(&format!("./{dir}")),
                "build.rs names a root's path: {literal:?}"
            );
        }
    }
    for read in ["read_to_string(\"", "fs::read(\""] {
        for (at, _) in build_script.match_indices(read) {
            let path = &build_script[at + read.len()..];
            let path = &path[..path.find('"').unwrap()];
            assert!(
                inputs.contains(&path),
                "build.rs reads {path}, not in INPUTS"
            );
        }
    }
}
