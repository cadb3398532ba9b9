//! Attacks on the operator features of issues 10 and 12, each one a bug found
//! against the real binary: what a hostile model could get remembered, and what a
//! fault could do to the operator's files.

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

/// A harnessd killed with -9 while it was PID 1 of its PID namespace (a container
/// entrypoint, `unshare --pid`) leaves `harnessd-1-0`; its successor is PID 1 too.
/// The reaping took a live pid to mean "not stale", so the successor kept the
/// leftover (escaped processes included) and then failed to make its own
/// `harnessd-1-0`, running every tool call of its life with no call cgroup: no
/// memory cap for the call's tree, no process cap, nothing killed at its end.
#[test]
fn a_successor_with_the_dead_daemons_pid_reaps_its_cgroups_and_keeps_its_own() {
    let parents = crate::cgroup_cleanup::call_cgroup_parents();
    assert!(
        !parents.is_empty(),
        "no cgroup hierarchy with memory and pids"
    );
    // `-0` is the name the successor's first cgroup takes; `-7` one it does not,
    // so whether it was reaped can be seen after the successor made its own.
    let stale: Vec<_> = parents
        .iter()
        .flat_map(|p| [p.join("harnessd-1-0"), p.join("harnessd-1-7")])
        .collect();
    for d in &stale {
        std::fs::create_dir(d).unwrap_or_else(|e| panic!("planting {}: {e}", d.display()));
    }
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", crate::common::bin()])
        .arg("--root")
        .arg(&root.dir)
        .arg("check")
        .output()
        .unwrap();
    let left: Vec<_> = stale
        .iter()
        .filter(|d| d.exists() && d.ends_with("harnessd-1-7"))
        .collect();
    for d in &stale {
        let _ = std::fs::remove_dir(d);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let cgroup = text.lines().find(|l| l.contains(" cgroup ")).unwrap_or("");
    assert!(left.is_empty(), "not reaped: {left:?}");
    assert!(
        cgroup.trim_start().starts_with("yes"),
        "{text}{}",
        stderr(&out)
    );
}

/// `check` probes the sandbox through a real call, in a call cgroup, and exited
/// without removing it: every `check` (an operator's routine, a monitoring probe)
/// left one `harnessd-<pid>-0` in the host's cgroup tree, for the next daemon
/// start to sweep.
#[test]
fn check_leaves_no_call_cgroup_behind() {
    let parents = crate::cgroup_cleanup::call_cgroup_parents();
    let root = TestRoot::new("http://127.0.0.1:9");
    let child = root
        .command(&["check"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let left = crate::cgroup_cleanup::cgroups_of(&parents, pid);
    for d in &left {
        let _ = std::fs::remove_dir(d);
    }
    if !text
        .lines()
        .any(|l| l.trim_start().starts_with("yes cgroup"))
    {
        // Said out loud, as in cgroup_cleanup: nothing was made to be left.
        eprintln!("check made no call cgroup on this machine: {text}");
    }
    assert!(left.is_empty(), "left behind by check: {left:?}");
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

/// The control API refuses the log and the transcripts to anyone but the daemon's
/// user, root and the operators group (403), yet both were created 0644 in a
/// 0755 `transcripts/`: any local account read every prompt, answer and tool
/// input straight from the files. (The full tool outputs were already 0600.)
#[test]
fn the_log_and_transcripts_are_not_readable_by_other_accounts() {
    use std::os::unix::fs::PermissionsExt;
    // Every kind of file harnessd writes under transcripts/: the log and its
    // rotated files, the transcript, each call's `.out` and, after a compaction,
    // the saved `history-<n>.json` (the whole conversation).
    let api = FakeApi::start(vec![
        Reply::tool("tu_1", "list_dir", json!({"path": "."})),
        Reply::tool("tu_2", "list_dir", json!({"path": "."})),
        Reply::tool("tu_3", "get_time", json!({})),
        Reply::error(400, "invalid_request_error", "prompt is too long"),
        Reply::text("Summary: a private summary."),
        Reply::text("the secret answer"),
    ]);
    let root = TestRoot::new(&api.url);
    root.set_config("context", "keep_recent_messages", "2");
    root.set_config("audit", "rotate_mb", "0.003");
    let out = root.run(&["run", "a private prompt"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut kinds = std::collections::BTreeSet::new();
    for path in files_under(&root.dir.join("transcripts")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == ".gitignore" {
            continue; // init's, no data
        }
        let kind = match name.split_once('-') {
            Some((k, _)) if k == "events" || k == "history" => k.to_string(),
            _ => name.rsplit('.').next().unwrap().to_string(),
        };
        kinds.insert(kind);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode & 0o007,
            0,
            "{} is {mode:o}: readable by every account",
            path.display()
        );
    }
    for kind in ["events", "history", "json", "jsonl", "out"] {
        assert!(kinds.contains(kind), "no {kind} file among {kinds:?}");
    }
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}
