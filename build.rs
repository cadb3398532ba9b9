//! Renders what the Debian package installs besides the binary into
//! `target/<profile>/assets/`, where `[package.metadata.deb]` (Cargo.toml) takes it:
//! the bash, zsh and fish completions and the gzipped man page, from src/cli.rs included
//! whole (the build script cannot link the crate it builds), and the package's
//! systemd unit, from the one `harnessd init` writes with the package's header and
//! binary path. Plain `cargo deb` runs this as part of its build, so the package
//! holds files of that very build and none is a copy that can drift.
//!
//! `target/<profile>/` rather than OUT_DIR: cargo-deb finds build products by the
//! `target/release/` prefix (mapped to the real target directory and profile), and
//! OUT_DIR's hashed name cannot be written in Cargo.toml. OUT_DIR is
//! `<target>/<profile>/build/harnessd-<hash>/out` for every target directory,
//! profile and `--target`, so three levels up is that directory.

use std::path::{Path, PathBuf};

#[allow(dead_code)]
#[path = "src/cli.rs"]
mod cli;
#[allow(dead_code)]
#[path = "src/cli_render.rs"]
mod cli_render;

/// Stand-ins for the library types src/cli.rs names: rendering needs an argument's
/// name and help, never a parsed value.
mod events {
    pub mod verify {
        /// `audit verify --head`'s value; never parsed here.
        #[derive(Clone, Debug)]
        pub struct Head;
        impl std::str::FromStr for Head {
            type Err = String;
            fn from_str(_: &str) -> Result<Head, String> {
                Err("not parsed in build.rs".to_string())
            }
        }
    }
}

/// The unit's binary as `harnessd init` writes it, and as the package installs it.
const INIT_EXEC: &str = "ExecStart=/usr/local/bin/harnessd serve --root /var/lib/harnessd\n";
const PACKAGE_EXEC: &str = "ExecStart=/usr/bin/harnessd serve --root /var/lib/harnessd\n";

/// The package unit's header: what the package did and what is left to do.
const PACKAGE_HEADER: &str = "\
# harnessd as a system service, as the Debian package installs it. Local changes go
# in a drop-in (systemctl edit harnessd), which an upgrade keeps; this file is
# replaced. The package made the group harnessd and, when there was none, the root
# /var/lib/harnessd (harnessd init, with api.api_key_file and
# daemon.operators_group set), and left the service disabled: it needs the key
# first. As root:
#
#   install -D -m 0600 /dev/stdin /etc/harnessd/anthropic.key    # paste the key, Ctrl-D
#   systemctl enable --now harnessd
#
# Operators who are not root: add each to the group harnessd (usermod -aG harnessd
# alice, then alice logs in again); the socket is 0660 for that group.
# Reload policy: systemctl reload harnessd (SIGHUP); edits are also picked up live.
";

/// Every file this script reads: its own and under src/, never a root's (the
/// repository is a working root; tests/it/defaults.rs checks this list).
const INPUTS: [&str; 4] = [
    "build.rs",
    "src/cli.rs",
    "src/cli_render.rs",
    "src/config/harnessd.service",
];

fn main() -> Result<(), String> {
    for input in INPUTS {
        println!("cargo::rerun-if-changed={input}");
    }
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let profile_dir = out_dir.ancestors().nth(3).ok_or_else(|| {
        format!(
            "OUT_DIR {} is not <target>/<profile>/build/<pkg>/out",
            out_dir.display()
        )
    })?;
    let assets = profile_dir.join("assets");
    std::fs::create_dir_all(&assets).map_err(|e| format!("create {}: {e}", assets.display()))?;
    use clap_complete::Shell;
    write(
        &assets,
        "harnessd.bash",
        &cli_render::completions(Shell::Bash),
    )?;
    write(&assets, "_harnessd", &cli_render::completions(Shell::Zsh))?;
    write(
        &assets,
        "harnessd.fish",
        &cli_render::completions(Shell::Fish),
    )?;
    write(&assets, "harnessd.1.gz", &gzipped(&cli_render::man_page())?)?;
    let init_unit = std::fs::read_to_string("src/config/harnessd.service")
        .map_err(|e| format!("read src/config/harnessd.service: {e}"))?;
    write(
        &assets,
        "harnessd.service",
        package_unit(&init_unit)?.as_bytes(),
    )
}

/// The unit `harnessd init` writes, with the package's header and binary. Fails the
/// build when the unit no longer has the header or the line it replaces, rather
/// than ship a unit that starts a binary the package does not install.
fn package_unit(init_unit: &str) -> Result<String, String> {
    let body = init_unit
        .find("\n[Unit]\n")
        .map(|at| &init_unit[at..])
        .ok_or("src/config/harnessd.service has no [Unit] section after its header")?;
    if body.matches(INIT_EXEC).count() != 1 {
        return Err(format!(
            "src/config/harnessd.service must have exactly one line {INIT_EXEC:?} for the package to replace"
        ));
    }
    Ok(format!(
        "{PACKAGE_HEADER}{}",
        body.replace(INIT_EXEC, PACKAGE_EXEC)
    ))
}

/// `bytes` gzipped, at the best level and with no time in the header, so that one
/// page always packs to the same bytes.
fn gzipped(bytes: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes)
        .map_err(|e| format!("gzip the man page: {e}"))?;
    gz.finish().map_err(|e| format!("gzip the man page: {e}"))
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let path = dir.join(name);
    // Unchanged files are left alone, so their times do not move for nothing.
    if std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    std::fs::write(&path, bytes).map_err(|e| format!("write {}: {e}", path.display()))
}
