//! The systemd unit `harnessd init` writes (SPEC §2): it passes `systemd-analyze
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
    let dir = std::env::temp_dir().join(format!("harnessd-unit-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
    for path in get("ReadWritePaths").unwrap().split_whitespace() {
        let path = path.strip_prefix('-').unwrap_or(path);
        let rel = path
            .strip_prefix(&format!("{ROOT}/"))
            .expect("inside the root");
        assert!(root.dir.join(rel).is_dir(), "init does not create {rel}");
        assert!(
            ["workspace", "transcripts", "run", "policies"].contains(&rel),
            "{rel} writable"
        );
    }
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
    assert!(steps.len() >= 8, "{steps:#?}");
    let prefix: PathBuf = root.dir.join("host");
    let host_only = ["useradd ", "chown ", "systemctl "];
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
        std::io::Write::write_all(&mut stdin, b"sk-ant-pasted\n").unwrap();
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
