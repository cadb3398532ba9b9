//! `approve --remember` writes a rule only when the rule stands for what was
//! approved and its record can be written: a command fed by a file or a pipe no
//! rule can name is refused, a log that cannot be written changes no policy, and
//! the shipped unit lets the settings file be rewritten. Each test reproduces a
//! bug found against the real binary.

use serde_json::json;

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, wait_until};

/// The approval id of the task's first `approval_requested`, once it comes.
fn first_approval(root: &TestRoot) -> String {
    wait_until("the approval", || {
        !root.events_of("approval_requested").is_empty()
    });
    root.events_of("approval_requested")[0]["approval_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Submits a task whose one call is `run_bash(command)`, answers its approval
/// with `--remember`, and checks it was refused (exit 1, `why` in the message, the
/// approval still pending, settings.json untouched) and that `probe` still asks.
fn assert_remember_refused(command: &str, probe: &str, why: &str) {
    let api = FakeApi::start(vec![
        Reply::tool("tu1", "run_bash", json!({"command": command})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let _daemon = Daemon::start(&root);
    let settings = root.dir.join("policies/settings.json");
    let before = std::fs::read_to_string(&settings).unwrap();
    let out = root.run(&["submit", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = first_approval(&root);
    let out = root.run(&["approve", &id, "--remember"]);
    let code = |cmd: &str| root.run(&["policy", "test", "run_bash", cmd]).status.code();
    assert_eq!(
        code(probe),
        Some(3),
        "a remembered rule must not allow {probe:?}: {}",
        stderr(&out)
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("still pending"), "{}", stderr(&out));
    assert!(stderr(&out).contains(why), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), before);
    let out = root.run(&["deny", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// `python3 < check.py` runs the code in check.py, but the rule's subject is the
/// argv alone (`python3`): remembering it would let the model feed python3 any
/// file without asking. Refused, the file untouched, the approval still pending.
#[test]
fn remember_refuses_a_command_whose_input_file_no_rule_can_name() {
    // `sort`, not `python3`: an interpreter given stdin is not provable at all
    // (the program table), so it would be refused before this check is reached.
    assert_remember_refused("sort < check.py", "sort < /etc/passwd", "`<`");
}

/// The same through a pipe: remembering `cat scores.csv | python3` must not leave
/// `python3` allowed alone, fed by whatever another allowed command prints.
#[test]
fn remember_refuses_a_pipeline_whose_input_no_rule_can_name() {
    assert_remember_refused("cat scores.csv | sort", "git status | sort", "pipes");
}

/// `approve --remember` renames a new settings.json into the settings file's
/// directory; under the shipped unit's `ProtectSystem=strict` that directory must
/// be among `ReadWritePaths`, or every remember fails with "Read-only file system"
/// on a production install while passing in every test run outside systemd.
#[test]
fn the_systemd_unit_lets_remember_write_the_settings_directory() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let unit = std::fs::read_to_string(root.dir.join("systemd/harnessd.service")).unwrap();
    assert!(unit.contains("\nProtectSystem=strict\n"), "{unit}");
    let writable: Vec<String> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("ReadWritePaths="))
        .flat_map(|v| {
            v.split_whitespace()
                .map(|p| p.trim_start_matches('-').to_string())
        })
        .collect();
    let config = std::fs::read_to_string(root.dir.join("config/config.toml")).unwrap();
    let settings = config
        .lines()
        .find_map(|l| l.strip_prefix("settings = "))
        .expect("paths.settings in the shipped config")
        .trim_matches('"');
    let dir = std::path::Path::new("/var/lib/harnessd")
        .join(settings)
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        writable.iter().any(|w| dir.starts_with(w)),
        "{} is read-only under the unit (ReadWritePaths: {writable:?}), so approve \
         --remember cannot write settings.json",
        dir.display()
    );
}

/// `approve --remember` while the audit log cannot be written (a full disk): the
/// rule took effect — written to settings.json and loaded — while its record
/// (`config_loaded` with trigger `remember`) failed, and once space was back
/// nothing ever recorded the change (a later reload finds the file unchanged).
/// No policy change without its record (no action without its record): refused, the file
/// untouched, the approval still pending; with space back, it works.
#[test]
fn remember_while_the_log_cannot_be_written_changes_no_policy() {
    let api = FakeApi::start(vec![
        Reply::tool("tu1", "run_python", json!({"code": "print(6 * 7)"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    let faults = crate::failpoints::Faults::new(&root);
    let _daemon = Daemon::start_with_env(&root, &[("HARNESSD_FAILPOINTS", &faults.env())]);
    let settings = root.dir.join("policies/settings.json");
    let before = std::fs::read_to_string(&settings).unwrap();
    let out = root.run(&["submit", "compute"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let id = first_approval(&root);
    faults.raise("events.append=enospc");
    let out = root.run(&["approve", &id, "--remember"]);
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        before,
        "a rule was written while its record could not be: {}",
        stderr(&out)
    );
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    faults.clear();
    let out = root.run(&["approve", &id, "--remember"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let loaded = root.events_of("config_loaded");
    assert!(
        loaded.iter().any(|e| e["trigger"] == "remember"),
        "{loaded:?}"
    );
}
