//! What a rule grants through the real loop (docs/policy.md): an allowed program's own
//! options cannot run other text, a deny rule catches the folded spellings and the
//! wrappers it looks through, and what it cannot see is asked — headless, denied.
//! Each reproduces a finding against the binary run headless (`run`, no TTY, no
//! `--yes`), with the directory it aimed at checked afterwards.

use serde_json::json;

use crate::common::{TestRoot, stdout};
use crate::hostile_commands::one_turn;

/// A root with `important/keep` and `d/keep` in the workspace and these extra
/// `tools.allow` rules.
fn with_allow(rules: &'static [&'static str]) -> impl FnOnce(&TestRoot) {
    move |root: &TestRoot| {
        let ws = root.workspace();
        for d in ["important", "d"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
            std::fs::write(ws.join(d).join("keep"), "x").unwrap();
        }
        root.edit_settings(|s| {
            let allow = s["tools"]["allow"].as_array_mut().unwrap();
            allow.extend(rules.iter().map(|r| json!(r)));
        });
    }
}

/// The root of [`with_allow`] with `run_bash` allowed as a whole (and no longer
/// asked), beside the shipped `deny run_bash(rm -rf *)`.
fn whole_tool_bash(root: &TestRoot) {
    with_allow(&[])(root);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["run_bash"]);
        s["tools"]["ask"] = json!(["write_file", "edit_file", "run_python"]);
    });
}

/// `sed -n '1e rm -rf important'` under `allow run_bash(sed -n *)` deleted
/// `important/` with `provable: true`; `awk 'BEGIN{system(…)}'` under
/// `allow run_bash(awk *)` ran its command.
#[test]
fn an_allowed_program_cannot_run_what_its_arguments_say() {
    let attacks = [
        "sed -n '1e rm -rf important' scores.csv",
        "awk 'BEGIN{system(\"touch pwned-awk\")}'",
        "sort --compress-program=./x scores.csv",
        "git -c alias.x='!touch pwned-git' x",
    ];
    let (root, results, decisions) = one_turn(
        with_allow(&[
            "run_bash(sed -n *)",
            "run_bash(awk *)",
            "run_bash(sort *)",
            "run_bash(git *)",
        ]),
        &attacks,
    );
    for (i, d) in decisions.iter().enumerate() {
        assert_ne!(d["tier"], "allow", "{:?}: {d}", attacks[i]);
        assert_eq!(d["provable"], false, "{d}");
        let programs = d["programs"].as_array().expect("programs recorded");
        assert!(
            programs
                .iter()
                .any(|p| p.as_str().unwrap().ends_with(": runs")),
            "{d}"
        );
    }
    assert!(results.iter().all(|r| r["is_error"] == true), "{results:?}");
    let ws = root.workspace();
    assert!(ws.join("important/keep").exists(), "sed e ran");
    assert!(!ws.join("pwned-awk").exists(), "awk system() ran");
    assert!(!ws.join("pwned-git").exists(), "git -c alias ran");
}

/// With `allow run_bash` and `deny run_bash(rm -rf *)`: spellings that deleted
/// their directory or that `policy test` allowed.
#[test]
fn a_deny_rule_catches_folded_spellings_and_looked_through_wrappers() {
    let spellings = [
        "rm -Rf d",
        "ionice -c3 rm -rf d",
        "find d -delete",
        "taskset 1 rm -rf d",
        "chrt -o 0 rm -rf d",
        "flock /tmp/l rm -rf d",
        "setpriv --reuid=0 rm -rf d",
        "strace -o /dev/null rm -rf d",
        "script -qc 'rm -rf d' /dev/null",
    ];
    let (root, results, decisions) = one_turn(whole_tool_bash, &spellings);
    for (i, d) in decisions.iter().enumerate() {
        assert_eq!(d["tier"], "deny", "{:?}: {d}", spellings[i]);
    }
    assert!(results.iter().all(|r| r["is_error"] == true), "{results:?}");
    assert!(root.workspace().join("d/keep").exists(), "d was deleted");
}

/// Under a whole-tool `allow run_bash` with a deny pattern, text the deny rule
/// cannot see runs only after a human says so: headless, it is refused, and
/// `policy test` says why it was raised.
#[test]
fn what_a_deny_rule_cannot_see_is_asked() {
    let unseen = [
        "echo 'rm -rf d' | sh",
        "bash <<< 'rm -rf d'",
        "python3 -c 'import shutil; shutil.rmtree(\"d\")'",
        "/usr/bin/r[m] -rf d",
    ];
    let (root, results, decisions) = one_turn(whole_tool_bash, &unseen);
    for (i, d) in decisions.iter().enumerate() {
        assert_eq!(d["tier"], "ask", "{:?}: {d}", unseen[i]);
        assert!(
            d["raised"]
                .as_str()
                .is_some_and(|r| r.starts_with("raised to ask")),
            "{d}"
        );
    }
    assert!(results.iter().all(|r| r["is_error"] == true), "{results:?}");
    assert!(root.workspace().join("d/keep").exists(), "d was deleted");
    // A literal program no deny rule names keeps the whole-tool tier.
    let out = root.run(&["policy", "test", "run_bash", "ls *.csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = root.run(&["policy", "test", "run_bash", "ls | bash"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(stdout(&out).contains("raised to ask"), "{}", stdout(&out));
}

/// `policy test` names the profile: a pattern allow runs read-only, an
/// `allow_write` rule with writes, and the entries a command met.
#[test]
fn policy_test_prints_the_profile_and_the_program_entries() {
    let root = TestRoot::new("http://127.0.0.1:9");
    root.edit_settings(|s| {
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("run_bash(find *)"));
        s["tools"]["allow_write"] = json!(["run_bash(sort -o *)"]);
    });
    let out = root.run(&[
        "policy",
        "test",
        "run_bash",
        "find . -fprintf .git/config x",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("profile: read_only"), "{text}");
    assert!(
        text.contains("find -fprint/-fprint0/-fprintf/-fls: writes"),
        "{text}"
    );
    let out = root.run(&[
        "policy",
        "test",
        "--json",
        "run_bash",
        "sort -o out scores.csv",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["profile"], "write", "{report}");
    let out = root.run(&["policy", "test", "run_bash", "sed -n '1e id' scores.csv"]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("sed e command: runs"),
        "{}",
        stdout(&out)
    );
}

/// `check` warns about an allow rule broad enough to cover a program's *runs*
/// options (`sed -n *` covers `sed -n 1e …`), and about `allow_write` for a program
/// that runs workspace code; the shipped rules draw no such warning.
#[test]
fn check_warns_about_rules_for_programs_that_run_their_arguments() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let shipped = root.run(&["check"]);
    assert!(
        !crate::common::stderr(&shipped).contains("can run other text"),
        "{}",
        crate::common::stderr(&shipped)
    );
    root.edit_settings(|s| {
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("run_bash(sed -n *)"));
        s["tools"]["allow_write"] = json!(["run_bash(make *)"]);
    });
    let out = root.run(&["check"]);
    let err = crate::common::stderr(&out);
    assert!(
        err.contains("\"run_bash(sed -n *)\": `sed` can run other text (e command"),
        "{err}"
    );
    assert!(
        err.contains("\"run_bash(make *)\": `make` runs code the workspace holds"),
        "{err}"
    );
}

/// Under `allow run_bash(find *)`, `find -fprintf .git/config …` rewrote the
/// repository's config with an fsmonitor command that the shipped
/// `allow run_bash(git status*)` then ran. Both calls now run read-only: the
/// kernel refuses the write, and git runs no fsmonitor under the read-only profile.
#[test]
fn an_allowed_find_cannot_rewrite_git_config_for_an_allowed_git_status() {
    let plant = "find .git -maxdepth 0 -fprintf .git/config \
                 '[core]\\n\\tfsmonitor = \"touch pwned-fsmon\"\\n'";
    let (root, results, decisions) = one_turn(
        |root| {
            with_allow(&["run_bash(find *)"])(root);
            let ws = root.workspace();
            let git = |args: &[&str]| {
                let ok = std::process::Command::new("git")
                    .args(args)
                    .current_dir(&ws)
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "git {args:?}");
            };
            git(&["init", "-q"]);
            // Tools run as another uid: the checkout stays the operator's, as in
            // the finding.
            crate::common::chown_tree(&ws.join("important"), 0);
        },
        &[plant, "git status --short"],
    );
    let ws = root.workspace();
    let config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    assert!(
        !config.contains("fsmonitor"),
        "find rewrote .git/config: {config}"
    );
    assert!(
        !ws.join("pwned-fsmon").exists(),
        "git ran the planted fsmonitor"
    );
    for d in &decisions {
        assert_eq!(
            (&d["tier"], &d["profile"]),
            (&json!("allow"), &json!("read_only")),
            "{d}"
        );
    }
    assert_eq!(
        results[0]["is_error"], true,
        "the write must fail: {results:?}"
    );
    let status = results[1]["content"].as_str().unwrap();
    assert!(
        status.contains("exit_code: 0"),
        "git status must work: {status}"
    );
}

/// The everyday read-only commands work under `allow` pattern rules, that is under
/// the read-only profile, through the real loop: the kernel refuses writes, not
/// reads (`ps` needs `/proc`, which is not allowed under either profile; see
/// docs/sandbox.md).
#[test]
fn everyday_read_only_commands_work_under_allow_rules() {
    let commands = [
        "git status --short",
        "git log --oneline",
        "ls -la",
        "cat scores.csv",
        "grep -r alice .",
        "find . -name scores.csv",
        "sort -S 64k big.txt",
        "du -sh .",
        "df .",
        "wc -l big.txt",
    ];
    let (_root, results, decisions) = one_turn(
        |root| {
            with_allow(&[
                "run_bash(cat *)",
                "run_bash(grep *)",
                "run_bash(find *)",
                "run_bash(sort *)",
                "run_bash(du *)",
                "run_bash(df *)",
                "run_bash(wc *)",
                "run_bash(git log*)",
            ])(root);
            let ws = root.workspace();
            let lines: String = (0..200_000).map(|i| format!("{}\n", 999_999 - i)).collect();
            std::fs::write(ws.join("big.txt"), lines).unwrap();
            let git = |args: &[&str]| {
                let ok = std::process::Command::new("git")
                    .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                    .args(args)
                    .current_dir(&ws)
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "git {args:?}");
            };
            git(&["init", "-q"]);
            git(&["add", "scores.csv"]);
            git(&["commit", "-qm", "scores"]);
        },
        &commands,
    );
    for (i, d) in decisions.iter().enumerate() {
        assert_eq!(
            (&d["tier"], &d["profile"]),
            (&json!("allow"), &json!("read_only")),
            "{:?}: {d}",
            commands[i]
        );
        let content = results[i]["content"].as_str().unwrap();
        assert!(
            content.starts_with("exit_code: 0"),
            "{:?} failed under the read-only profile: {content}",
            commands[i]
        );
    }
    let log = results[1]["content"].as_str().unwrap();
    assert!(log.contains("scores"), "{log}");
}

/// `chattr +A` on a file the tool owns worked under either profile (the
/// FS_IOC_SETFLAGS ioctl needs only a descriptor opened for reading): refused now.
#[test]
fn a_tool_cannot_set_inode_flags_with_chattr() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let out = root.run(&[
        "sandbox",
        "--",
        "bash",
        "-c",
        "echo x > own && chattr +A own; echo rc=$?; lsattr own",
    ]);
    let text = format!("{}{}", stdout(&out), crate::common::stderr(&out));
    assert!(text.contains("rc=1"), "{text}");
    assert!(text.contains("Operation not permitted"), "{text}");
    let flags = text.lines().find(|l| l.ends_with(" own")).unwrap_or("");
    assert!(!flags.contains('A'), "{text}");
}
