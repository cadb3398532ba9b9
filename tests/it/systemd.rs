//! The systemd unit `harnessd init` writes (docs/config.md): it passes `systemd-analyze
//! verify`, each hardening directive leaves the sandbox what it needs, and the
//! install steps at its top work as written. The unit is read from a fresh root,
//! never from the repository's own copy (which an operator may edit).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{TestRoot, bin, stderr, stdout};

/// Where the unit expects the root, as its install steps make it.
const ROOT: &str = "/var/lib/harnessd";

fn unit_of(root: &TestRoot) -> String {
    std::fs::read_to_string(root.dir.join("systemd/harnessd.service")).unwrap()
}

/// `Key=value` lines of the unit (the last one wins, as for systemd).
fn directives(unit: &str) -> BTreeMap<String, String> {
    unit.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The install steps: the indented commands of the header comment.
fn install_steps(unit: &str) -> Vec<String> {
    unit.lines()
        .take_while(|l| l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("#   "))
        .map(|l| l.split("    #").next().unwrap().trim().to_string())
        .collect()
}

/// `systemd-analyze verify` on `unit` (ExecStart pointed at the binary under
/// test, so the check that it exists passes): the lines that concern the unit.
fn verify(unit: &str, name: &str) -> Vec<String> {
    let version = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        version.is_ok_and(|o| o.status.success()),
        "systemd-analyze is not installed: install systemd (apt-get install systemd); \
         .ci/run does so"
    );
    let dir = crate::common::fresh_dir(&format!("harnessd-unit-{name}-"));
    let path = dir.join("harnessd.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/harnessd", bin())).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("harnessd.service"))
        // Outside a booted systemd (a container, CI) verify cannot load the
        // dependency graph; those lines are about the host, not the unit.
        .filter(|l| !l.contains("Failed to create") && !l.contains("Cannot add dependency job"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let unit = unit_of(&root);
    let problems = verify(&unit, "shipped");
    assert!(problems.is_empty(), "systemd-analyze verify: {problems:#?}");
    // The check can fail: a broken directive is reported.
    let broken = unit.replace("ProtectSystem=strict", "ProtectSystem=bogus");
    let problems = verify(&broken, "broken");
    assert!(
        problems.iter().any(|l| l.contains("bogus")),
        "verify did not see a bad value: {problems:#?}"
    );
}

#[test]
fn each_hardening_directive_leaves_the_sandbox_what_it_needs() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let unit = unit_of(&root);
    let d = directives(&unit);
    let get = |k: &str| d.get(k).map(String::as_str);
    assert_eq!(get("Type"), Some("notify"), "serve sends READY=1");
    assert_eq!(get("ExecReload"), Some("/bin/kill -HUP $MAINPID"));
    // Per-call cgroups need a delegated, writable tree.
    assert_eq!(get("Delegate"), Some("yes"));
    assert!(
        !matches!(get("ProtectControlGroups"), Some("yes" | "true" | "strict")),
        "ProtectControlGroups makes the cgroup tree read-only and cancels Delegate=yes"
    );
    // Every tool call gets user + PID namespaces.
    for key in ["RestrictNamespaces", "PrivateUsers"] {
        assert_eq!(
            get(key),
            None,
            "{key} would take the sandbox's namespaces away"
        );
    }
    // A man page harnessd does not ship would be a dead link.
    assert!(!unit.contains("man:"), "no man page is shipped");
    // Every writable path exists in a root `init` made (a missing one fails the
    // namespace setup with 226/NAMESPACE), and nothing else is.
    let exec = get("ExecStart").unwrap();
    assert!(exec.ends_with(&format!("serve --root {ROOT}")), "{exec}");
    // The root, and nothing else: config/sandbox-uid and the uid registry
    // (/var/lib/harnessd/uids) are written there besides the data directories.
    assert_eq!(get("ReadWritePaths"), Some(ROOT));
    assert!(root.dir.is_dir());
    // The credential is where api.api_key_file's example (uncommented by the
    // install steps) looks for it.
    let (name, source) = get("LoadCredential").unwrap().split_once(':').unwrap();
    let config = std::fs::read_to_string(root.dir.join("config/config.toml")).unwrap();
    assert!(
        config.contains(&format!(
            "\n# api_key_file = \"/run/credentials/harnessd.service/{name}\"\n"
        )),
        "{config}"
    );
    assert!(install_steps(&unit).iter().any(|s| s.contains(source)));
}

/// Replaces the host paths of a step with ones under `prefix`.
fn under(step: &str, prefix: &Path) -> String {
    let p = prefix.display();
    step.replace("target/release/harnessd", bin())
        .replace(" /etc/", &format!(" {p}/etc/"))
        .replace(" /usr/local/", &format!(" {p}/usr/local/"))
        .replace(" /var/lib/", &format!(" {p}/var/lib/"))
        .replace("harnessd init", &format!("{p}/usr/local/bin/harnessd init"))
}

/// The install steps, run as written except that host paths go under a temporary
/// prefix and the steps that change the host (a user, ownership, systemctl) are
/// left out: every file step works verbatim, `install -D` included.
#[test]
fn the_install_steps_work_as_written_under_a_prefix() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let steps = install_steps(&unit_of(&root));
    assert!(steps.len() >= 6, "{steps:#?}");
    let prefix: PathBuf = root.dir.join("host");
    let host_only = ["systemctl "];
    for step in steps
        .iter()
        .filter(|s| !host_only.iter().any(|h| s.starts_with(h)))
    {
        let cmd = under(step, &prefix);
        let mut child = Command::new("bash")
            .args(["-euo", "pipefail", "-c", &cmd])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // Only the key step reads it; a step that exits first closes the pipe.
        let _ = std::io::Write::write_all(&mut stdin, b"sk-ant-pasted\n");
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let key = prefix.join("etc/harnessd/anthropic.key");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), "sk-ant-pasted\n");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let installed = prefix.join("etc/systemd/system/harnessd.service");
    assert_eq!(std::fs::read_to_string(installed).unwrap(), unit_of(&root));
    let service_root = prefix.join("var/lib/harnessd");
    let config = std::fs::read_to_string(service_root.join("config/config.toml")).unwrap();
    assert!(
        config.contains("\napi_key_file = \"/run/credentials/harnessd.service/anthropic.key\"\n"),
        "{config}"
    );
    // The edited root still validates (the credential exists only under systemd).
    let out = Command::new(bin())
        .args(["check", "--root"])
        .arg(&service_root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// The directives the unit must carry: the daemon runs as root, cut down to the
/// capabilities the sandbox needs, with the filesystem, kernel and address
/// families locked down; and the ones it must not carry, since tools inherit them.
#[test]
fn the_unit_runs_as_root_hardened_without_what_tools_would_inherit() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let d = directives(&unit_of(&root));
    let get = |k: &str| d.get(k).map(String::as_str);
    assert_eq!(get("User"), None, "root: tools need a uid of their own");
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("LockPersonality", "yes"),
        ("RestrictRealtime", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("SystemCallArchitectures", "native"),
        ("UMask", "0077"),
    ] {
        assert_eq!(get(key), Some(value), "{key}");
    }
    let caps: Vec<&str> = get("CapabilityBoundingSet").unwrap().split(' ').collect();
    assert_eq!(caps, UNIT_CAPS.map(|(c, _)| c), "CapabilityBoundingSet");
    // A seccomp filter every tool inherits: breaks JITs; hidden processes would
    // look like free uids to "auto".
    for key in ["MemoryDenyWriteExecute", "SystemCallFilter", "ProtectProc"] {
        assert_eq!(
            get(key),
            None,
            "{key}: tools inherit it or auto needs /proc"
        );
    }
}

/// The unit's CapabilityBoundingSet, each with the `setpriv` name.
const UNIT_CAPS: [(&str, &str); 7] = [
    ("CAP_SETUID", "setuid"),
    ("CAP_SETGID", "setgid"),
    ("CAP_SYS_ADMIN", "sys_admin"),
    ("CAP_CHOWN", "chown"),
    ("CAP_FOWNER", "fowner"),
    ("CAP_DAC_OVERRIDE", "dac_override"),
    ("CAP_KILL", "kill"),
];

/// `harnessd --root ROOT ARGS` as the unit runs it: no_new_privs and the unit's
/// bounding set, less `without`.
fn as_the_unit(root: &TestRoot, without: Option<&str>, args: &[&str]) -> std::process::Output {
    let caps: String = UNIT_CAPS
        .iter()
        .filter(|(_, c)| Some(*c) != without)
        .map(|(_, c)| format!(",+{c}"))
        .collect();
    Command::new("setpriv")
        .args(["--no-new-privs", "--inh-caps", "-all", "--bounding-set"])
        .arg(format!("-all{caps}"))
        .arg(bin())
        .arg("--root")
        .arg(&root.dir)
        .args(args)
        .env("ANTHROPIC_API_KEY", crate::common::SECRET_KEY)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A root whose workspace has what only some capabilities open up: the
/// operator's file (not root's), and a directory its owner closed.
fn workspace_of_others() -> TestRoot {
    let root = TestRoot::new("http://127.0.0.1:9");
    let ws = root.workspace();
    std::os::unix::fs::chown(ws.join("scores.csv"), Some(1000), Some(1000)).unwrap();
    std::fs::create_dir(ws.join("closed")).unwrap();
    std::fs::write(ws.join("closed/f"), "x").unwrap();
    crate::common::chown_tree(&ws.join("closed"), 1000);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(ws.join("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    root.edit_settings(|s| s["sandbox"]["timeout_secs"] = serde_json::json!(2));
    root
}

/// Pids of processes whose command line contains `marker`.
fn processes_named(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

/// A tool tree that outlives its 2 s timeout unless killed, run as the unit
/// would (less `without`); returns whether any of it survived.
fn tree_survives_timeout(root: &TestRoot, without: Option<&str>) -> bool {
    let marker = format!(
        "hd-cap-tree-{}-{}",
        std::process::id(),
        without.unwrap_or("none")
    );
    let script =
        format!("(exec -a {marker} sleep 60) & setsid bash -c 'exec -a {marker} sleep 60' & wait");
    let out = as_the_unit(root, without, &["sandbox", "--", "bash", "-c", &script]);
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    // A tree that survives shows its names once its processes have exec'd, which
    // on a loaded machine can be after the timeout: look for up to 3 s.
    let mut left = Vec::new();
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = processes_named(&marker);
        if !left.is_empty() {
            break;
        }
    }
    for pid in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::SIGKILL);
    }
    !left.is_empty()
}

/// The unit's bounding set is enough and each capability in it is needed: with
/// all of them (and no_new_privs) the sandbox is whole, and without any one of
/// them something the daemon does fails.
#[test]
fn every_capability_the_unit_keeps_is_needed_and_together_they_suffice() {
    assert!(nix::unistd::Uid::effective().is_root(), "CI runs as root");
    let root = workspace_of_others();
    let unrestricted = stdout(&root.run(&["check"]));
    let out = as_the_unit(&root, None, &["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let enforced = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("  yes ") || l.starts_with("  NO "))
            .map(|l| l[..20].to_string())
            .collect()
    };
    assert_eq!(
        enforced(&stdout(&out)),
        enforced(&unrestricted),
        "{}",
        stdout(&out)
    );
    let out = as_the_unit(
        &root,
        None,
        &[
            "sandbox",
            "--",
            "bash",
            "-c",
            "echo t >> scores.csv && cat closed/f",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("WARN"), "{}", stderr(&out));
    assert!(
        !tree_survives_timeout(&root, None),
        "the whole tree dies with the full set"
    );
    for (cap, what) in [
        ("setuid", "setresuid"),
        ("setgid", "setgroups"),
        ("sys_admin", "PID and IPC namespace"),
    ] {
        let out = as_the_unit(&root, Some(cap), &["check"]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "without {cap}: {}",
            stdout(&out)
        );
        assert!(
            stdout(&out).contains(what) || stderr(&out).contains(what),
            "without {cap}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    for (cap, what) in [
        ("chown", "cannot give .tmp"),
        ("fowner", "could not be opened"),
        ("dac_override", "could not be opened"),
    ] {
        let fresh = workspace_of_others();
        let out = as_the_unit(&fresh, Some(cap), &["sandbox", "--", "true"]);
        assert!(
            stderr(&out).contains(what),
            "without {cap}: {}",
            stderr(&out)
        );
    }
    // Shown once is enough: under the full suite another test's daemon may reap
    // stale call cgroups (and so this tree) at its start, a false "died".
    assert!(
        (0..3).any(|_| tree_survives_timeout(&workspace_of_others(), Some("kill"))),
        "without kill the tree is left running"
    );
}
