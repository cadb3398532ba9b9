//! Skills: listed in the system prompt, loaded by `load_skill` from what the task
//! read at its start (and recorded by sha256), judged by the policy like every
//! tool; a malformed or linked skill not offered and named by `check` and
//! `harnessd skills` with file and line; a skill added under a running daemon
//! offered to the next task.

use std::path::Path;

use serde_json::{Value, json};

use crate::audit::sha256_hex;
use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, chown_tree, last_results, stderr, stdout};

/// The system prompt's text of a request.
fn system(body: &Value) -> String {
    body["system"][0]["text"].as_str().unwrap().to_string()
}

fn text(result: &Value) -> &str {
    result["content"].as_str().unwrap()
}

fn write_skill(root: &TestRoot, dir: &str, content: &str) {
    let dir = root.dir.join("skills").join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), content).unwrap();
}

/// The body of the root's audit-log skill, as written: after the front matter.
fn audit_log_body(root: &Path) -> (String, String) {
    let bytes = std::fs::read(root.join("skills/audit-log/SKILL.md")).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let body = text.splitn(3, "---\n").nth(2).unwrap().to_string();
    (body, sha256_hex(&bytes))
}

#[test]
fn a_skill_is_listed_loaded_from_what_the_task_read_and_recorded() {
    let api = FakeApi::start(vec![
        // Tools may write skills/ here, so a call can change the file mid-task.
        Reply::tool(
            "w",
            "run_bash",
            json!({"command": "printf 'changed\\n' > ../skills/audit-log/SKILL.md"}),
        ),
        Reply::tools(&[
            ("s1", "load_skill", json!({"name": "audit-log"})),
            ("s2", "load_skill", json!({"name": "no-such-skill"})),
            ("s3", "load_skill", json!({})),
            ("s4", "load_skill", json!({"name": "audit-log", "x": 1})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["allowed_paths"]["write"] = json!(["workspace", "skills"]);
    });
    // `check` chooses the tools' uid, which must own the file to change it.
    root.run(&["check"]);
    chown_tree(&root.dir.join("skills"), root.tool_uid());
    let (body, sha) = audit_log_body(&root.dir);
    let out = root.run(&["run", "--yes", "what was denied?"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert_eq!(reqs.len(), 3);
    let prompt = system(&reqs[0].body);
    let listed = prompt
        .lines()
        .find(|l| l.starts_with("- audit-log: "))
        .unwrap_or_else(|| panic!("audit-log not listed: {prompt}"));
    assert!(listed.contains("harnessd events"), "{listed}");
    assert!(prompt.find("# Skills").unwrap() > 0, "after the operator's");
    let tools: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"load_skill"), "{tools:?}");
    // The file changed before the call: the task still loads what it read.
    assert_eq!(
        std::fs::read_to_string(root.dir.join("skills/audit-log/SKILL.md")).unwrap(),
        "changed\n"
    );
    let results = last_results(&reqs[2].body);
    assert_ne!(results[0]["is_error"], true, "{}", text(&results[0]));
    assert!(text(&results[0]).ends_with(&body), "{}", text(&results[0]));
    let skill_dir = root.dir.canonicalize().unwrap().join("skills/audit-log");
    assert!(text(&results[0]).contains(&skill_dir.display().to_string()));
    assert_eq!(results[1]["is_error"], true);
    assert!(
        text(&results[1]).contains("the skills offered are: audit-log"),
        "{}",
        text(&results[1])
    );
    assert_eq!(results[2]["is_error"], true);
    assert!(text(&results[2]).contains("missing field `name`"));
    assert!(text(&results[3]).contains("unknown field `x`"));
    let started = &root.events_of("task_started")[0];
    assert_eq!(
        started["skills"],
        json!([{"name": "audit-log", "sha256": sha}])
    );
    // Recorded like every call: decided by a rule, its output kept.
    let decided = root.events_of("policy_decision");
    let s1 = decided.iter().find(|e| e["tool_use_id"] == "s1").unwrap();
    assert_eq!(
        (s1["tier"].as_str(), s1["rule"].as_str()),
        (Some("allow"), Some("load_skill"))
    );
    assert_eq!(s1["subject"], "audit-log");
    let finished = root.events_of("tool_finished");
    let s1 = finished.iter().find(|e| e["tool_use_id"] == "s1").unwrap();
    let kept = std::fs::read_to_string(root.dir.join(s1["output_file"].as_str().unwrap()));
    assert_eq!(kept.unwrap(), text(&results[0]));
    // A tree tools write reaches skills/: check says what that allows.
    let out = root
        .command(&["check"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("allowed_paths.write \"skills\" reaches skills/"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn malformed_and_linked_skills_are_named_with_file_and_line_and_not_offered() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    write_skill(&root, "no-front", "# Just a heading\n");
    write_skill(
        &root,
        "bad-yaml",
        "---\nname: bad-yaml\ndescription: [open\n---\nbody\n",
    );
    write_skill(
        &root,
        "wrong-name",
        "---\ndescription: d\nname: other\n---\nbody\n",
    );
    write_skill(
        &root,
        "fine",
        "---\nname: fine\ndescription: A fine skill.\n---\nbody\n",
    );
    let outside = root.dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(
        outside.join("SKILL.md"),
        "---\nname: linked\ndescription: d\n---\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, root.dir.join("skills/linked")).unwrap();

    let out = root
        .command(&["check"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning, not an error: {}",
        stderr(&out)
    );
    let err = stderr(&out);
    for want in [
        "warning: skill not offered: skills/no-front/SKILL.md:1: no front matter",
        "warning: skill not offered: skills/bad-yaml/SKILL.md:3: front matter:",
        "warning: skill not offered: skills/wrong-name/SKILL.md:3: name \"other\" differs",
        "warning: skill not offered: skills/linked: not a directory (a symbolic link",
    ] {
        assert!(err.contains(want), "{want}\n{err}");
    }
    assert!(!err.contains("skills/fine"), "{err}");

    let out = root.run(&["skills"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listing = stdout(&out);
    let line = |name: &str| {
        listing
            .lines()
            .find(|l| l.split_whitespace().any(|w| w == name))
            .unwrap_or_else(|| panic!("{name} missing: {listing}"))
            .to_string()
    };
    assert!(line("fine").starts_with("offered "), "{listing}");
    assert!(line("audit-log").starts_with("offered "), "{listing}");
    assert!(line("no-front").starts_with("not offered "), "{listing}");
    assert!(
        line("wrong-name").contains("skills/wrong-name/SKILL.md:3:"),
        "{listing}"
    );
    let out = root.run(&["skills", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bad = report["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "bad-yaml")
        .unwrap();
    assert_eq!(
        (bad["state"].as_str(), bad["line"].as_u64()),
        (Some("not_offered"), Some(3))
    );
    assert_eq!(bad["file"], "skills/bad-yaml/SKILL.md");

    let out = root.run(&["run", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let prompt = system(&api.requests()[0].body);
    assert!(prompt.contains("- fine: A fine skill."), "{prompt}");
    for name in ["no-front", "bad-yaml", "wrong-name", "other", "linked"] {
        assert!(
            !prompt.contains(&format!("- {name}:")),
            "{name} offered: {prompt}"
        );
    }
    let started = root.events_of("task_started");
    let offered: Vec<&str> = started[0]["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["audit-log", "fine"]);
}

#[test]
fn a_skill_added_while_serve_runs_is_offered_to_the_next_task() {
    let api = FakeApi::start(vec![Reply::text("one"), Reply::text("two")]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let first = d.submit("first");
    d.wait_finished(&first);
    write_skill(
        &root,
        "late",
        "---\nname: late\ndescription: Added late.\n---\nbody\n",
    );
    let second = d.submit("second");
    d.wait_finished(&second);
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2);
    assert!(!system(&reqs[0].body).contains("- late:"));
    assert!(
        system(&reqs[1].body).contains("- late: Added late."),
        "{}",
        system(&reqs[1].body)
    );
    let started = root.events_of("task_started");
    let names = |e: &Value| -> Vec<String> {
        e["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&started[0]), ["audit-log"]);
    assert_eq!(names(&started[1]), ["audit-log", "late"]);
}

#[test]
fn a_deny_rule_naming_a_skill_holds_and_policy_test_judges_the_name() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("d", "load_skill", json!({"name": "audit-log"})),
            ("a", "load_skill", json!({"name": "other"})),
        ]),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    write_skill(
        &root,
        "other",
        "---\nname: other\ndescription: d\n---\nother body\n",
    );
    root.edit_settings(|s| {
        s["tools"]["deny"] = json!(["load_skill(audit-log)"]);
    });
    let out = root.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = last_results(&api.requests()[1].body);
    assert_eq!(results[0]["is_error"], true);
    assert!(
        text(&results[0]).contains("denied by policy (rule `load_skill(audit-log)`)"),
        "{}",
        text(&results[0])
    );
    assert!(!text(&results[0]).contains("Reading the audit log"));
    assert_ne!(results[1]["is_error"], true);
    assert!(text(&results[1]).ends_with("other body\n"));
    let out = root.run(&["policy", "test", "load_skill", "audit-log"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let out = root.run(&["policy", "test", "load_skill", "other"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
