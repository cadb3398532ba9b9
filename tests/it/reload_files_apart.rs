//! Hot reload of a running `harnessd serve`, file by file: each of the two files is
//! judged on its own (a valid edit of one takes effect while the other is
//! invalid), every rejected content is recorded once, a symlinked file edited in
//! place is noticed, and a reload puts in force only what `check` accepts.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, last_results, wait_until};

/// An unknown tool name on line 2: refused by the settings' own validation.
const BAD_SETTINGS: &str = "{\n  \"tools\": {\"deny\": [\"run_bsh\"]}\n}\n";

fn watch_events(root: &TestRoot, kind: &str) -> Vec<Value> {
    root.events_of(kind)
        .into_iter()
        .filter(|e| e["trigger"] == "watch")
        .collect()
}

fn daemon_log(d: &Daemon) -> String {
    std::fs::read_to_string(&d.log).unwrap_or_default()
}

#[test]
fn a_valid_config_edit_takes_effect_while_settings_json_is_invalid() {
    let api = FakeApi::start(vec![Reply::text("done")]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    std::fs::write(root.dir.join("policies/settings.json"), BAD_SETTINGS).unwrap();
    wait_until("the settings' rejection", || {
        !watch_events(&root, "config_rejected").is_empty()
    });
    root.set_config("api", "model", "\"claude-edited-while-settings-bad\"");
    wait_until("config.toml loaded", || {
        !watch_events(&root, "config_loaded").is_empty()
    });
    let loaded = watch_events(&root, "config_loaded");
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert_eq!(loaded[0]["file"], "config/config.toml");
    assert!(
        loaded[0]["changes"]
            .to_string()
            .contains("claude-edited-while-settings-bad"),
        "{}",
        loaded[0]
    );
    // Applied: the next task asks for the new model.
    let id = d.submit("hello");
    assert_eq!(d.wait_finished(&id)["stop_reason"], "end_turn");
    assert_eq!(
        api.requests()[0].body["model"],
        "claude-edited-while-settings-bad"
    );
    // The settings file stayed rejected: recorded once, not again with the edit.
    let rejected = watch_events(&root, "config_rejected");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0]["file"], "policies/settings.json");
}

#[test]
fn every_rejected_content_is_recorded_once() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    let d = Daemon::start(&root);
    let path = root.dir.join("policies/settings.json");
    std::fs::write(&path, BAD_SETTINGS).unwrap();
    wait_until("the first rejection", || {
        watch_events(&root, "config_rejected").len() == 1
    });
    // The same content written again (a plain rewrite, a second editor save).
    std::fs::write(&path, BAD_SETTINGS).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(watch_events(&root, "config_rejected").len(), 1);
    // Another bad content, with the very same error: recorded too.
    std::fs::write(&path, format!("{BAD_SETTINGS}\n")).unwrap();
    wait_until("the second content's rejection", || {
        watch_events(&root, "config_rejected").len() == 2
    });
    std::thread::sleep(Duration::from_millis(400));
    let rejected = watch_events(&root, "config_rejected");
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert_eq!(rejected[0]["error"], rejected[1]["error"]);
    assert_ne!(rejected[0]["sha256"], rejected[1]["sha256"]);
    assert_eq!(rejected[0]["sha256"].as_str().unwrap().len(), 64);
    // Each told once on the daemon's stderr, as an error naming file, line and key.
    let log = daemon_log(&d);
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("config rejected (watch)"))
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    for line in lines {
        assert!(
            line.contains("ERROR")
                && line.contains("policies/settings.json:2:")
                && line.contains("tools.deny[0]"),
            "{line}"
        );
    }
}

#[test]
fn a_symlinked_settings_file_edited_in_place_is_reloaded() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    // settings.json -> a file in a directory of its own, outside the root.
    let elsewhere = root.dir.with_extension("settings-elsewhere");
    let _ = std::fs::remove_dir_all(&elsewhere);
    std::fs::create_dir(&elsewhere).unwrap();
    let link = root.dir.join("policies/settings.json");
    let target = elsewhere.join("settings.json");
    std::fs::rename(&link, &target).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let _d = Daemon::start(&root);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    v["tools"]["deny"]
        .as_array_mut()
        .unwrap()
        .push(json!("run_bash(echo through-the-link*)"));
    // A plain write: truncate and rewrite the target, no rename, the link untouched.
    std::fs::write(&target, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    wait_until("the settings reloaded", || {
        !watch_events(&root, "config_loaded").is_empty()
    });
    let loaded = watch_events(&root, "config_loaded");
    assert_eq!(loaded[0]["file"], "policies/settings.json");
    assert!(
        loaded[0]["changes"]
            .to_string()
            .contains("through-the-link"),
        "{}",
        loaded[0]
    );
    // The link pointed at a file in yet another directory: followed there too.
    let second = root.dir.with_extension("settings-second");
    let _ = std::fs::remove_dir_all(&second);
    std::fs::create_dir(&second).unwrap();
    let second_target = second.join("settings.json");
    std::fs::copy(&target, &second_target).unwrap();
    let tmp = root.dir.join("policies/.settings.json.link");
    std::os::unix::fs::symlink(&second_target, &tmp).unwrap();
    std::fs::rename(&tmp, &link).unwrap();
    // The swap itself changed no content; wait until the watcher has seen it.
    std::thread::sleep(Duration::from_millis(400));
    v["tools"]["deny"]
        .as_array_mut()
        .unwrap()
        .push(json!("run_bash(echo after-the-swap*)"));
    std::fs::write(&second_target, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    wait_until("the new target's edit reloaded", || {
        watch_events(&root, "config_loaded").len() == 2
    });
    let loaded = watch_events(&root, "config_loaded");
    let _ = std::fs::remove_dir_all(&elsewhere);
    let _ = std::fs::remove_dir_all(&second);
    assert!(
        loaded[1]["changes"].to_string().contains("after-the-swap"),
        "{}",
        loaded[1]
    );
}

#[test]
fn a_sandbox_user_that_does_not_exist_is_rejected_by_reload_and_tools_still_run() {
    let api = FakeApi::start(vec![
        Reply::tool("t", "run_bash", json!({"command": "echo still-running"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("run_bash(echo *)"))
    });
    let d = Daemon::start(&root);
    root.edit_settings(|s| s["sandbox"]["user"] = json!("no-such-user-by-reload"));
    wait_until("the rejection", || {
        !watch_events(&root, "config_rejected").is_empty()
    });
    let rejected = watch_events(&root, "config_rejected");
    let error = rejected[0]["error"].as_str().unwrap();
    assert_eq!(rejected[0]["file"], "policies/settings.json");
    assert!(
        error.contains("key `sandbox.user`")
            && error.contains("no-such-user-by-reload")
            && error.contains("does not exist"),
        "{error}"
    );
    assert!(watch_events(&root, "config_loaded").is_empty());
    // The old policy is in force: a tool call still runs.
    let id = d.submit("run it");
    assert_eq!(d.wait_finished(&id)["stop_reason"], "end_turn");
    let result = last_results(&api.requests()[1].body)[0].clone();
    assert!(result.get("is_error").is_none(), "{result}");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("still-running"),
        "{result}"
    );
    // `check` refuses the same file.
    assert_eq!(root.run(&["check"]).status.code(), Some(2));
}

#[test]
fn a_settings_link_to_a_fifo_or_dev_zero_is_rejected_and_later_edits_still_reload() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    let _d = Daemon::start(&root);
    let fifo = root.dir.with_extension("settings-fifo");
    let _ = std::fs::remove_file(&fifo);
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let link = root.dir.join("policies/settings.json");
    let tmp = root.dir.join("policies/.settings.json.link");
    std::os::unix::fs::symlink(&fifo, &tmp).unwrap();
    std::fs::rename(&tmp, &link).unwrap();
    // Opening a FIFO with no writer blocks: the reload must refuse it, not wait.
    wait_until("the FIFO's rejection", || {
        !watch_events(&root, "config_rejected").is_empty()
    });
    std::os::unix::fs::symlink("/dev/zero", &tmp).unwrap();
    std::fs::rename(&tmp, &link).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // Reading /dev/zero never ends: a bounded read refuses it and the reload goes on.
    root.set_config("api", "model", "\"claude-after-the-fifo\"");
    wait_until("config.toml loaded", || {
        !watch_events(&root, "config_loaded").is_empty()
    });
    let _ = std::fs::remove_file(&fifo);
    let loaded = watch_events(&root, "config_loaded");
    assert_eq!(loaded[0]["file"], "config/config.toml", "{loaded:?}");
    let rejected = watch_events(&root, "config_rejected");
    assert!(
        rejected
            .iter()
            .all(|e| e["file"] == "policies/settings.json"),
        "{rejected:?}"
    );
}
