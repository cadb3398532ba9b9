//! The Debian package that `cargo deb` builds from `[package.metadata.deb]`: the
//! files it holds and their modes, packaged completions, man page and unit that are
//! what the binary renders, a unit that `systemd-analyze verify` passes where it is
//! installed, and maintainer scripts that make the root and the group on install,
//! keep an operator's files on upgrade and remove them on purge only (run by dpkg
//! into a fresh root, outside a chroot, through DPKG_ROOT).
//!
//! The package is built once for the module, from the binary and the rendered
//! assets of this very test build (`cargo deb --no-build --profile dev --fast`): a
//! release build with LTO takes ten minutes; what is checked is the packaging, the
//! same for both profiles. cargo-deb must be installed (`.ci/run` does so).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::common::{bin, fresh_dir, stderr, stdout};

/// The cargo-deb version `.ci/run` installs.
const CARGO_DEB: &str = "3.8.0";

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{shown} cannot run: {e}"));
    assert!(
        out.status.success(),
        "{shown}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    out
}

/// The .deb, built once.
fn deb() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| {
        let version = Command::new("cargo").args(["deb", "--version"]).output();
        assert!(
            version.is_ok_and(|o| o.status.success()),
            "cargo-deb is not installed: cargo install cargo-deb --version {CARGO_DEB} --locked \
             (.ci/run does so)"
        );
        let dir = fresh_dir("harnessd-deb-");
        let deb = dir.join("harnessd.deb");
        // The binary under test is target/<profile>/harnessd; cargo-deb finds it
        // (and build.rs's assets beside it) by the profile's directory name.
        let profile = Path::new(bin())
            .parent()
            .and_then(Path::file_name)
            .and_then(|p| p.to_str())
            .map(|p| if p == "debug" { "dev" } else { p })
            .unwrap()
            .to_string();
        let started = std::time::Instant::now();
        run(Command::new("cargo")
            .args([
                "deb",
                "--no-build",
                "--fast",
                "--locked",
                "--profile",
                &profile,
            ])
            .arg("--output")
            .arg(&deb)
            .current_dir(env!("CARGO_MANIFEST_DIR")));
        println!("cargo deb --no-build took {:?}", started.elapsed());
        deb
    })
}

/// `dpkg-deb -c`: each path (without the leading `./`) with its mode and owner.
fn contents() -> BTreeMap<String, (String, String)> {
    let out = run(Command::new("dpkg-deb").arg("-c").arg(deb()));
    stdout(&out)
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = fields[5].trim_start_matches("./").to_string();
            (path, (fields[0].to_string(), fields[1].to_string()))
        })
        .collect()
}

/// The package extracted into a new directory.
fn extracted() -> PathBuf {
    let dir = fresh_dir("harnessd-deb-x-");
    run(Command::new("dpkg-deb").arg("-x").arg(deb()).arg(&dir));
    dir
}

#[test]
fn the_package_holds_the_binary_unit_completions_and_man_page_with_sane_modes() {
    let files: BTreeMap<String, (String, String)> = contents()
        .into_iter()
        .filter(|(_, (mode, _))| !mode.starts_with('d'))
        .collect();
    let expected = [
        ("usr/bin/harnessd", "-rwxr-xr-x"),
        ("usr/lib/systemd/system/harnessd.service", "-rw-r--r--"),
        (
            "usr/share/bash-completion/completions/harnessd",
            "-rw-r--r--",
        ),
        ("usr/share/zsh/vendor-completions/_harnessd", "-rw-r--r--"),
        (
            "usr/share/fish/vendor_completions.d/harnessd.fish",
            "-rw-r--r--",
        ),
        ("usr/share/man/man1/harnessd.1.gz", "-rw-r--r--"),
        ("usr/share/doc/harnessd/README.md", "-rw-r--r--"),
        ("usr/share/doc/harnessd/copyright", "-rw-r--r--"),
    ];
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    let mut want: Vec<&str> = expected.iter().map(|(p, _)| *p).collect();
    want.sort_unstable();
    assert_eq!(names, want, "the package's files");
    for (path, mode) in expected {
        let (got, owner) = &files[path];
        assert_eq!(got, mode, "{path}");
        assert_eq!(owner, "0/0", "{path} is not root's");
    }
    for (path, (mode, owner)) in contents() {
        if mode.starts_with('d') {
            assert_eq!(mode, "drwxr-xr-x", "{path}");
            assert_eq!(owner, "0/0", "{path}");
        }
    }
    // The maintainer scripts, executable, and nothing else in the control area
    // but the control file (and md5sums, which --fast leaves out): no conffiles,
    // the package ships nothing in /etc.
    let control = fresh_dir("harnessd-deb-ctl-");
    run(Command::new("dpkg-deb").arg("-e").arg(deb()).arg(&control));
    let mut entries: Vec<String> = std::fs::read_dir(&control)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.retain(|e| e != "md5sums");
    entries.sort();
    assert_eq!(entries, ["control", "postinst", "postrm", "prerm"]);
    for script in ["postinst", "postrm", "prerm"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(control.join(script))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755, "{script}");
    }
    let fields = std::fs::read_to_string(control.join("control")).unwrap();
    assert!(fields.contains("Package: harnessd\n"), "{fields}");
    assert!(fields.contains("Depends: libc6"), "{fields}");
    let _ = std::fs::remove_dir_all(&control);
}

#[test]
fn the_packaged_completions_man_page_and_unit_are_what_the_binary_renders() {
    let dir = extracted();
    let packaged = |path: &str| std::fs::read(dir.join(path)).unwrap();
    let rendered = |args: &[&str]| run(Command::new(bin()).args(args)).stdout;
    for (shell, path) in [
        ("bash", "usr/share/bash-completion/completions/harnessd"),
        ("zsh", "usr/share/zsh/vendor-completions/_harnessd"),
        ("fish", "usr/share/fish/vendor_completions.d/harnessd.fish"),
    ] {
        assert!(
            packaged(path) == rendered(&["completions", shell]),
            "{path} differs"
        );
    }
    let page = run(Command::new("gzip")
        .args(["-dc"])
        .arg(dir.join("usr/share/man/man1/harnessd.1.gz")))
    .stdout;
    assert!(page == rendered(&["man"]), "the packaged man page differs");
    // The unit: init's, from its [Unit] section on, with the package's binary; a
    // header that says what the package did.
    let root = fresh_dir("harnessd-deb-init-");
    run(Command::new(bin()).arg("init").arg(root.join("r")));
    let init = std::fs::read_to_string(root.join("r/systemd/harnessd.service")).unwrap();
    let unit = String::from_utf8(packaged("usr/lib/systemd/system/harnessd.service")).unwrap();
    let body = |u: &str| u[u.find("\n[Unit]\n").unwrap()..].to_string();
    assert_eq!(
        body(&unit),
        body(&init).replace(
            "ExecStart=/usr/local/bin/harnessd serve",
            "ExecStart=/usr/bin/harnessd serve"
        )
    );
    let header = &unit[..unit.find("\n[Unit]\n").unwrap()];
    assert!(!header.contains("/usr/local"), "{header}");
    assert!(
        header.contains("systemctl enable --now harnessd"),
        "{header}"
    );
    assert!(header.contains("usermod -aG harnessd"), "{header}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_installed_unit_passes_systemd_analyze_verify() {
    let dir = extracted();
    let unit =
        std::fs::read_to_string(dir.join("usr/lib/systemd/system/harnessd.service")).unwrap();
    assert!(unit.contains("\nExecStart=/usr/bin/harnessd serve --root /var/lib/harnessd\n"));
    // verify --root checks each command inside DIR: the unit's ExecReload is
    // /bin/kill, and its dependencies are the host's standard targets.
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::copy("/bin/kill", dir.join("bin/kill")).unwrap();
    for entry in std::fs::read_dir("/usr/lib/systemd/system").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "target") {
            std::fs::copy(
                &path,
                dir.join("usr/lib/systemd/system")
                    .join(path.file_name().unwrap()),
            )
            .unwrap();
        }
    }
    let verify = |dir: &Path| {
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("--root={}", dir.display()))
            .arg("harnessd.service")
            .output()
            .expect("systemd-analyze is not installed: apt-get install systemd (.ci/run does so)")
    };
    let out = verify(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "systemd-analyze verify warned");
    // It does look inside DIR: without the binary there, the same unit fails.
    std::fs::remove_file(dir.join("usr/bin/harnessd")).unwrap();
    let out = verify(&dir);
    assert!(
        !out.status.success() && stderr(&out).contains("/usr/bin/harnessd"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A root dpkg can install into: an empty database, and the host's group files
/// for groupadd --prefix to edit.
fn dpkg_root() -> PathBuf {
    let dir = fresh_dir("harnessd-dpkg-");
    for sub in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("var/lib/dpkg/status"), "").unwrap();
    std::fs::write(dir.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(dir.join("etc/group"), "root:x:0:\n").unwrap();
    std::fs::write(dir.join("etc/gshadow"), "root:*::\n").unwrap();
    dir
}

/// `dpkg --root DIR ACTION…`, its maintainer scripts run outside a chroot (the
/// fresh root has no shell) with DPKG_ROOT set; dependencies (libc6) are the
/// host's.
fn dpkg(dir: &Path, action: &[&std::ffi::OsStr]) -> Output {
    run(Command::new("dpkg")
        .arg(format!("--root={}", dir.display()))
        .args([
            "--force-not-root",
            "--force-script-chrootless",
            "--force-depends",
        ])
        .args(action))
}

fn has_group(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("etc/group"))
        .unwrap()
        .lines()
        .any(|l| l.starts_with("harnessd:"))
}

#[test]
fn dpkg_makes_the_root_and_group_keeps_them_on_upgrade_and_purges_them() {
    let dir = dpkg_root();
    let state = dir.join("var/lib/harnessd");
    let config = state.join("config/config.toml");
    let install = [std::ffi::OsStr::new("-i"), deb().as_os_str()];
    let out = dpkg(&dir, &install);
    assert!(
        stdout(&out).contains("systemctl enable --now harnessd"),
        "{}",
        stdout(&out)
    );
    assert!(has_group(&dir), "no group harnessd");
    let settings = std::fs::read_to_string(&config).unwrap();
    assert!(
        settings.contains("\napi_key_file = \"/run/credentials/harnessd.service/anthropic.key\"\n"),
        "{settings}"
    );
    assert!(
        settings.contains("\noperators_group = \"harnessd\"\n"),
        "{settings}"
    );
    assert!(state.join("policies/settings.json").is_file());
    assert!(
        !state.join("systemd").exists(),
        "init's /usr/local unit left in the root"
    );
    // The root it made loads, as the service would read it; a copy, its group
    // swapped for one this host has (the fresh root's group file is not the host's).
    let copy = fresh_dir("harnessd-deb-copy-");
    run(Command::new("cp").arg("-a").arg(&state).arg(copy.join("r")));
    let swapped = settings.replace(
        "operators_group = \"harnessd\"",
        "operators_group = \"root\"",
    );
    std::fs::write(copy.join("r/config/config.toml"), swapped).unwrap();
    let policy = run(Command::new(bin()).arg("--root").arg(copy.join("r")).args([
        "policy",
        "test",
        "read_file",
        "README.md",
    ]));
    assert!(stdout(&policy).contains("allow"), "{}", stdout(&policy));
    let _ = std::fs::remove_dir_all(&copy);

    // An operator's edits, then the same package again (an upgrade: postinst gets
    // the installed version): kept as they were.
    let edited = format!("{settings}# the operator's line\n");
    std::fs::write(&config, &edited).unwrap();
    std::fs::write(state.join("workspace/notes.txt"), "mine").unwrap();
    let out = dpkg(&dir, &install);
    assert!(!stdout(&out).contains("made the root"), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    assert_eq!(
        std::fs::read_to_string(state.join("workspace/notes.txt")).unwrap(),
        "mine"
    );

    // Removal takes the package's files and leaves what postinst made.
    dpkg(
        &dir,
        &[
            std::ffi::OsStr::new("--remove"),
            std::ffi::OsStr::new("harnessd"),
        ],
    );
    assert!(!dir.join("usr/bin/harnessd").exists());
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    assert!(has_group(&dir));

    // Purge takes that too.
    dpkg(
        &dir,
        &[
            std::ffi::OsStr::new("--purge"),
            std::ffi::OsStr::new("harnessd"),
        ],
    );
    assert!(!state.exists(), "purge left the root");
    assert!(!has_group(&dir), "purge left the group");
    let _ = std::fs::remove_dir_all(&dir);
}
