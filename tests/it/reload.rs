//! Hot reload of a running `harnessd run`: a policy edit made while the task runs
//! decides the very next tool call, whichever way the file is written; an invalid
//! edit is kept out and the old policy goes on deciding.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, wait_until};

const DENY_TWO: &str = "run_bash(echo two*)";

fn settings_with_deny(root: &TestRoot) -> String {
    let text = std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["tools"]["deny"]
        .as_array_mut()
        .unwrap()
        .push(json!(DENY_TWO));
    serde_json::to_string_pretty(&v).unwrap()
}

/// Runs a task whose first call runs `echo one`; once it has finished, `edit`
/// changes the policy (the fake API holds its next response meanwhile); the second
/// call is `echo two`. Returns the root, the second call's result and stderr.
fn edit_during_task(
    setup: impl FnOnce(&TestRoot),
    edit: impl FnOnce(&TestRoot, u32),
) -> (TestRoot, Value, String) {
    let mut second = Reply::tool("two", "run_bash", json!({"command": "echo two"}));
    second.delay = Duration::from_millis(1500);
    let api = FakeApi::start(vec![
        Reply::tool("one", "run_bash", json!({"command": "echo one"})),
        second,
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("run_bash(echo *)"))
    });
    setup(&root);
    let child = root
        .command(&["run", "x"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_until("the first tool call", || {
        !root.events_of("tool_finished").is_empty()
    });
    edit(&root, pid);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = api.requests();
    assert_eq!(reqs.len(), 3);
    assert!(
        last_results(&reqs[1].body)[0]["content"]
            .as_str()
            .unwrap()
            .contains("one")
    );
    let second = last_results(&reqs[2].body)[0].clone();
    (root, second, stderr(&out))
}

fn assert_denied_by_new_rule(root: &TestRoot, second: &Value) {
    assert_eq!(second["is_error"], true, "{second}");
    assert!(
        second["content"].as_str().unwrap().contains(DENY_TWO),
        "{second}"
    );
    let loaded: Vec<Value> = root
        .events_of("config_loaded")
        .into_iter()
        .filter(|e| e["trigger"] != "start")
        .collect();
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert_eq!(loaded[0]["file"], "policies/settings.json");
    let changes = loaded[0]["changes"].to_string();
    assert!(
        changes.contains("settings.tools.deny: added") && changes.contains(DENY_TWO),
        "{changes}"
    );
}

#[test]
fn edit_in_place_applies_to_the_next_tool_call() {
    let (root, second, err) = edit_during_task(
        |_| {},
        |root, _| {
            std::fs::write(
                root.dir.join("policies/settings.json"),
                settings_with_deny(root),
            )
            .unwrap();
        },
    );
    assert_denied_by_new_rule(&root, &second);
    assert!(err.contains("config reloaded (watch)"), "{err}");
}

#[test]
fn rename_over_the_file_is_seen() {
    let (root, second, _) = edit_during_task(
        |_| {},
        |root, _| {
            let tmp = root.dir.join("policies/.settings.json.swp");
            std::fs::write(&tmp, settings_with_deny(root)).unwrap();
            std::fs::rename(&tmp, root.dir.join("policies/settings.json")).unwrap();
        },
    );
    assert_denied_by_new_rule(&root, &second);
}

#[test]
fn truncate_then_write_never_puts_half_a_policy_in_force() {
    let (root, second, _) = edit_during_task(
        |_| {},
        |root, _| {
            let path = root.dir.join("policies/settings.json");
            let full = settings_with_deny(root);
            std::fs::write(&path, "").unwrap();
            // Caught half-way: longer than the debounce, so a reload sees the empty file.
            std::thread::sleep(Duration::from_millis(300));
            std::fs::write(&path, &full[..full.len() / 2]).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            std::fs::write(&path, &full).unwrap();
        },
    );
    assert_denied_by_new_rule(&root, &second);
    let rejected = root.events_of("config_rejected");
    assert!(rejected.len() >= 2, "{rejected:?}");
    assert!(
        rejected
            .iter()
            .any(|e| e["error"].as_str().unwrap().contains("empty")),
        "{rejected:?}"
    );
}

#[test]
fn delete_and_recreate_is_seen() {
    let (root, second, _) = edit_during_task(
        |_| {},
        |root, _| {
            let path = root.dir.join("policies/settings.json");
            let full = settings_with_deny(root);
            std::fs::remove_file(&path).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            std::fs::write(&path, full).unwrap();
        },
    );
    assert_denied_by_new_rule(&root, &second);
    assert!(
        !root.events_of("config_rejected").is_empty(),
        "the missing file was reported"
    );
}

#[test]
fn symlinked_directory_swapped_atomically_is_seen() {
    let (root, second, _) = edit_during_task(
        |root| {
            // policies -> policies-v1, as a ConfigMap mount looks.
            std::fs::rename(root.dir.join("policies"), root.dir.join("policies-v1")).unwrap();
            std::os::unix::fs::symlink("policies-v1", root.dir.join("policies")).unwrap();
        },
        |root, _| {
            let v2 = root.dir.join("policies-v2");
            std::fs::create_dir(&v2).unwrap();
            std::fs::write(v2.join("settings.json"), settings_with_deny(root)).unwrap();
            let tmp = root.dir.join("policies.tmp");
            std::os::unix::fs::symlink("policies-v2", &tmp).unwrap();
            std::fs::rename(&tmp, root.dir.join("policies")).unwrap();
        },
    );
    assert_denied_by_new_rule(&root, &second);
}

#[test]
fn invalid_edit_is_rejected_and_the_old_policy_keeps_deciding() {
    let (root, second, err) = edit_during_task(
        |_| {},
        |root, _| {
            std::fs::write(
                root.dir.join("policies/settings.json"),
                "{\n  \"tools\": {\"deny\": [\"run_bsh\"]}\n}\n",
            )
            .unwrap();
        },
    );
    assert!(
        second.get("is_error").is_none(),
        "the old policy still allows it: {second}"
    );
    assert!(second["content"].as_str().unwrap().contains("two"));
    let rejected = root.events_of("config_rejected");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let error = rejected[0]["error"].as_str().unwrap();
    assert!(
        error.contains("policies/settings.json:2:")
            && error.contains("tools.deny[0]")
            && error.contains("run_bsh"),
        "{error}"
    );
    assert!(err.contains("previous version stays in force"), "{err}");
}

/// An `mcp` section that does not validate is kept out like any bad edit, its
/// error naming the file, the line and the server's key.
#[test]
fn an_invalid_mcp_section_is_rejected_by_the_reload() {
    let (root, second, _) = edit_during_task(
        |_| {},
        |root, _| {
            let path = root.dir.join("policies/settings.json");
            let mut v: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            v["mcp"] = json!({"servers": {"git": {"command": []}}});
            v["tools"]["deny"]
                .as_array_mut()
                .unwrap()
                .push(json!(DENY_TWO));
            std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        },
    );
    assert!(
        second["content"].as_str().unwrap().contains("two"),
        "the old policy still decides: {second}"
    );
    let rejected = root.events_of("config_rejected");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let error = rejected[0]["error"].as_str().unwrap();
    let text = std::fs::read_to_string(root.dir.join("policies/settings.json")).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("\"command\": []"))
        .unwrap()
        + 1;
    assert!(
        error.starts_with(&format!("policies/settings.json:{line}:"))
            && error.contains("key `mcp.servers.git.command`"),
        "{error}"
    );
}

#[test]
fn sighup_reloads_an_edit_the_watcher_cannot_see() {
    let outside = crate::common::fresh_dir("harnessd-hardlink-").join("settings.json");
    let (root, second, _) = edit_during_task(
        |root| {
            let _ = std::fs::remove_file(&outside);
            std::fs::hard_link(root.dir.join("policies/settings.json"), &outside).unwrap();
        },
        |root, pid| {
            // Written through a hard link in an unwatched directory: no file event.
            let new = settings_with_deny(root);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&outside)
                .unwrap();
            std::io::Write::write_all(&mut f, new.as_bytes()).unwrap();
            drop(f);
            std::thread::sleep(Duration::from_millis(300));
            assert!(
                root.events_of("config_loaded")
                    .iter()
                    .all(|e| e["trigger"] == "start")
            );
            unsafe { libc::kill(pid as i32, libc::SIGHUP) };
        },
    );
    let _ = std::fs::remove_dir_all(outside.parent().unwrap());
    assert_denied_by_new_rule(&root, &second);
    assert_eq!(
        root.events_of("config_loaded").last().unwrap()["trigger"],
        "sighup"
    );
}

#[test]
fn restart_only_keys_are_reported_not_applied() {
    let (root, _, err) = edit_during_task(
        |_| {},
        |root, _| {
            root.set_config("daemon", "socket", "\"run/other.sock\"");
            root.set_config("api", "timeout_secs", "60");
            root.set_config("loop", "max_turns", "7");
        },
    );
    let loaded: Vec<Value> = root
        .events_of("config_loaded")
        .into_iter()
        .filter(|e| e["trigger"] != "start")
        .collect();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0]["file"], "config/config.toml");
    assert_eq!(
        loaded[0]["restart_needed"],
        json!([
            "daemon.socket",
            "api (provider, base_url, key, timeout_secs, max_retries, max_response_mb)"
        ])
    );
    assert!(
        loaded[0]["changes"]
            .to_string()
            .contains("config.loop.max_turns: 12 → 7"),
        "{}",
        loaded[0]
    );
    assert!(err.contains("needs a restart: daemon.socket, api"), "{err}");
    let _ = Path::new("");
}

/// A file rewritten every 20 ms (faster than the
/// debounce) is still loaded, within about a second and again and again, not never.
#[test]
fn continuous_rewrites_do_not_starve_the_reload() {
    let mut slow = Reply::text("done");
    slow.delay = Duration::from_secs(5);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    let child = root
        .command(&["run", "x"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the run to start", || {
        !root.events_of("model_request").is_empty()
    });
    let path = root.dir.join("policies/settings.json");
    let tmp = root.dir.join("policies/.settings.json.tmp");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = Instant::now();
    // When each new `config_loaded` (not the start's) was first seen.
    let mut seen: Vec<Duration> = Vec::new();
    let mut i = 0u32;
    while start.elapsed() < Duration::from_secs(3) {
        let mut v: Value = serde_json::from_str(&text).unwrap();
        v["tools"]["deny"]
            .as_array_mut()
            .unwrap()
            .push(json!(format!("run_bash(echo n{i})")));
        // Renamed over, so every reload sees a whole, valid file.
        std::fs::write(&tmp, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        i += 1;
        let loaded = root
            .events_of("config_loaded")
            .iter()
            .filter(|e| e["trigger"] == "watch")
            .count();
        if loaded > seen.len() {
            seen.resize(loaded, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        seen.first()
            .is_some_and(|t| *t <= Duration::from_millis(1500)),
        "a reload within ~1 s of the first rewrite ({i} rewrites): {seen:?}"
    );
    assert!(
        seen.len() >= 3,
        "reloads keep coming during 3 s of rewrites: {seen:?}"
    );
    assert!(
        root.events_of("config_rejected").is_empty(),
        "every rewrite was valid"
    );
}

/// Starts a `run` whose one model request takes `secs`: the reloads a test makes
/// happen while it runs, so the run must outlast them even on a loaded machine.
fn slow_run(secs: u64) -> (TestRoot, std::process::Child, FakeApi) {
    let mut slow = Reply::text("done");
    slow.delay = Duration::from_secs(secs);
    let api = FakeApi::start(vec![slow]);
    let root = TestRoot::new(&api.url);
    let child = root
        .command(&["run", "x"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the run to start", || {
        !root.events_of("model_request").is_empty()
    });
    (root, child, api)
}

fn loaded_by(root: &TestRoot, trigger: &str) -> Vec<Value> {
    root.events_of("config_loaded")
        .into_iter()
        .filter(|e| e["trigger"] == trigger)
        .collect()
}

/// `systemctl reload` with nothing changed used to leave no line
/// and no event, so the operator could not tell it had happened.
#[test]
fn sighup_with_unchanged_files_records_config_loaded_with_no_changes_and_logs_a_line() {
    let (root, child, _api) = slow_run(10);
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    wait_until("config_loaded by sighup", || {
        loaded_by(&root, "sighup").len() == 2
    });
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let loaded = loaded_by(&root, "sighup");
    let files: Vec<&str> = loaded.iter().map(|e| e["file"].as_str().unwrap()).collect();
    assert_eq!(files, ["config/config.toml", "policies/settings.json"]);
    for e in &loaded {
        assert_eq!(e["changes"], json!([]), "{e}");
        assert_eq!(e["sha256"].as_str().unwrap().len(), 64);
    }
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("(sighup)")).collect();
    assert_eq!(
        lines,
        ["config reloaded (sighup): no change, the version in force stays"]
    );
}

/// Restoring a good file after a rejected edit logged nothing, so
/// the operator was left with the rejection as the last word.
#[test]
fn a_valid_file_after_a_rejected_one_is_logged_as_accepted() {
    // Two reloads must happen while the run lasts: 15 s leaves room for a loaded
    // CI machine (6 s did not, once).
    let (root, child, _api) = slow_run(15);
    let path = root.dir.join("policies/settings.json");
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, "{\n  \"tools\": {\"deny\": [\"run_bsh\"]}\n}\n").unwrap();
    wait_until("the rejection", || {
        !root.events_of("config_rejected").is_empty()
    });
    std::fs::write(&path, &good).unwrap();
    wait_until("config_loaded after the rejection", || {
        !loaded_by(&root, "watch").is_empty()
    });
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let loaded = loaded_by(&root, "watch");
    assert!(
        loaded.iter().all(|e| e["changes"] == json!([])),
        "{loaded:?}"
    );
    let err = stderr(&out);
    assert!(err.contains("config rejected (watch)"), "{err}");
    assert!(
        err.contains("config accepted (watch): no change, the version in force stays"),
        "{err}"
    );
}
