//! `harnessd check` and `harnessd init`: good files, and bad ones named precisely.

use crate::common::{TestRoot, stderr, stdout};

fn root() -> TestRoot {
    TestRoot::new("http://127.0.0.1:9")
}

/// `warned` names each `(list, entry)` of `named` under `key` (`KEY.list entry
/// "entry"`) and none of `quiet`.
fn assert_entries_warned(
    warned: &[String],
    key: &str,
    named: &[(&str, &str)],
    quiet: &[(&str, &str)],
) {
    let names = |list: &str, entry: &str| {
        warned
            .iter()
            .any(|w| w.contains(&format!("{key}.{list} entry {entry:?}")))
    };
    for (list, entry) in named {
        assert!(
            names(list, entry),
            "no warning names {key}.{list} {entry:?}: {warned:#?}"
        );
    }
    for (list, entry) in quiet {
        assert!(
            !names(list, entry),
            "{key}.{list} {entry:?} warned: {warned:#?}"
        );
    }
}

/// A fresh root passes `check`. The repository's own files are not read here: they
/// are a working root an operator may edit; `.ci/run` checks that the committed
/// ones are what `init` writes.
#[test]
fn fresh_init_passes_check() {
    let r = root();
    let out = r
        .command(&["check"])
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("run_bash"));
    assert!(
        stderr(&out).contains("warning"),
        "absent key is warned about"
    );
    let out = r.run(&["check", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tools = report["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 9);
    assert_eq!(tools[0]["tool"], "read_file");
    assert_eq!(tools[0]["tier"], "allow");
}

#[test]
fn malformed_toml_names_file_line_and_column() {
    let r = root();
    let path = r.dir.join("config/config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("max_turns = 12", "max_turns = = 12")).unwrap();
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let line = text
        .lines()
        .position(|l| l.starts_with("max_turns"))
        .unwrap()
        + 1;
    let err = stderr(&out);
    assert!(
        err.contains(&format!("config/config.toml:{line}:")),
        "{err}"
    );
}

#[test]
fn unknown_key_in_config_is_named_with_its_line() {
    let r = root();
    r.set_config("loop", "max_turn", "5");
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("config/config.toml:") && err.contains("max_turn"),
        "{err}"
    );
}

#[test]
fn invalid_limit_is_rejected_with_key() {
    let r = root();
    r.set_config("loop", "max_turns", "0");
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("key `loop.max_turns`: must be greater than 0"),
        "{}",
        stderr(&out)
    );
    let out = r.run(&["run", "x"]);
    assert_eq!(out.status.code(), Some(2), "run refuses a bad config too");
}

#[test]
fn malformed_json_names_file_line_and_column() {
    let r = root();
    let path = r.dir.join("policies/settings.json");
    std::fs::write(
        &path,
        "{\n  \"output\": {\n    \"max_chars\": 10,\n  }\n}\n",
    )
    .unwrap();
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    // At the comma itself (line 3), not where serde_json noticed it (the `}`).
    assert!(
        err.contains("policies/settings.json:3:20: key `output`: trailing comma"),
        "{err}"
    );
}

#[test]
fn missing_comma_in_json_points_after_the_value_not_at_the_next_line() {
    let r = root();
    let path = r.dir.join("policies/settings.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("\"network\""))
        .unwrap()
        + 1;
    let column = text.lines().nth(line - 1).unwrap().len();
    std::fs::write(
        &path,
        text.replace("\"network\": false,", "\"network\": false"),
    )
    .unwrap();
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let expected = format!("policies/settings.json:{line}:{column}: key `sandbox`: expected `,`");
    assert!(err.contains(&expected), "want {expected}: {err}");
    assert!(!err.contains('?'), "no placeholder key: {err}");
}

#[test]
fn unknown_key_and_bad_rule_in_settings_are_named() {
    let r = root();
    r.edit_settings(|s| s["sandbox"]["netwrok"] = serde_json::json!(true));
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("policies/settings.json:") && err.contains("netwrok"),
        "{err}"
    );

    let r = root();
    r.edit_settings(|s| s["tools"]["deny"] = serde_json::json!(["run_bsh(rm *)"]));
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("tools.deny[0]") && err.contains("run_bsh"),
        "{err}"
    );
}

/// An unparseable rule deep in `"allow": [...]` is named at its own line and
/// column, where the operator's editor can jump, not at the list's key.
#[test]
fn a_bad_rule_points_at_its_own_line_and_column() {
    let r = root();
    r.edit_settings(|s| {
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!("run_bash(ls"))
    });
    let text = std::fs::read_to_string(r.dir.join("policies/settings.json")).unwrap();
    let (line, column) = text
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.find("\"run_bash(ls\"").map(|c| (i + 1, c + 1)))
        .unwrap();
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let at = format!("policies/settings.json:{line}:{column}: key `tools.allow[");
    assert!(err.contains(&at), "want {at}: {err}");
}

/// `model = ""` is an error of the file at its line, like any other, not a task
/// that fails at its first request.
#[test]
fn an_empty_model_is_a_config_error_at_its_line() {
    let r = root();
    r.set_config("api", "model", "\"\"");
    let text = std::fs::read_to_string(r.dir.join("config/config.toml")).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("model = \"\""))
        .unwrap()
        + 1;
    for args in [&["check"][..], &["run", "x"]] {
        let out = r.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let at = format!("config/config.toml:{line}:1: key `api.model`");
        assert!(stderr(&out).contains(&at), "want {at}: {}", stderr(&out));
    }
}

#[test]
fn missing_files_are_a_config_error_that_says_so() {
    let r = root();
    std::fs::remove_file(r.dir.join("policies/settings.json")).unwrap();
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("settings.json") && err.contains("harnessd init"),
        "{err}"
    );
    let empty = r.dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = std::process::Command::new(crate::common::bin())
        .args(["check", "--root"])
        .arg(&empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("config/config.toml"));
}

#[test]
fn init_keeps_existing_files() {
    let r = root();
    let path = r.dir.join("config/config.toml");
    let custom = std::fs::read_to_string(&path).unwrap();
    let out = std::process::Command::new(crate::common::bin())
        .arg("init")
        .arg(&r.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), custom);
}

/// The warning lines of `check`'s stderr.
fn warnings(out: &std::process::Output) -> Vec<String> {
    stderr(out)
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn check_warns_about_settings_that_weaken_the_boundary() {
    let r = root();
    r.edit_settings(|s| {
        s["allowed_paths"]["write"] = serde_json::json!(["workspace", ".", "transcripts", "run"]);
        s["allowed_paths"]["read"] = serde_json::json!(["/usr", "/", "/proc"]);
        s["sandbox"]["network"] = serde_json::json!(true);
        s["sandbox"]["require"] = serde_json::json!("best_effort");
    });
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let warned = warnings(&out);
    assert_entries_warned(
        &warned,
        "allowed_paths",
        &[
            ("write", "."),
            ("write", "transcripts"),
            ("write", "run"),
            ("read", "/"),
            ("read", "/proc"),
        ],
        &[("write", "workspace"), ("read", "/usr")],
    );
    assert!(warned.iter().any(|w| w.contains("sandbox.network")));
    assert!(warned.iter().any(|w| w.contains("best_effort")));
    let all = stdout(&out) + &stderr(&out);
    assert!(all.contains("hard link"), "{all}");

    let out = r.run(&["check", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["warnings"].as_array().unwrap().len() >= 7,
        "{report}"
    );
}

#[test]
fn check_warns_about_read_access_to_homes_and_the_key_file() {
    let r = root();
    std::fs::write(r.dir.join("config/key"), "sk-not-a-real-key").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        r.dir.join("config/key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    r.set_config("api", "api_key_file", "\"config/key\"");
    r.edit_settings(|s| {
        s["allowed_paths"]["read"] = serde_json::json!(["/home", "/root", "/sys/kernel", "config"]);
    });
    let out = r.run(&["check"]);
    let warned = warnings(&out);
    for entry in ["/home", "/root", "/sys/kernel", "config"] {
        assert!(
            warned
                .iter()
                .any(|w| w.contains(&format!("allowed_paths.read entry {entry:?}"))),
            "no warning names {entry:?}: {warned:#?}"
        );
    }
    assert!(
        warned.iter().any(|w| w.contains("API key file")),
        "{warned:#?}"
    );
}

#[test]
fn shipped_settings_raise_no_boundary_warning_but_state_the_hard_link_gap() {
    let r = root();
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let warned = warnings(&out);
    assert!(
        !warned.iter().any(|w| w.contains("allowed_paths")),
        "{warned:#?}"
    );
    let all = stdout(&out) + &stderr(&out);
    assert!(
        all.contains("a hard link placed inside an allowed tree"),
        "{all}"
    );
}

/// A bad `sandbox.user` under `require: full` printed `ok … valid` and
/// exited 0, while every tool would then be refused.
#[test]
fn check_on_a_bad_sandbox_user_with_require_full_exits_2_naming_it() {
    let r = root();
    r.edit_settings(|s| s["sandbox"]["user"] = serde_json::json!("no-such-user-hd"));
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(!text.contains("ok:"), "{text}");
    let settings = std::fs::read_to_string(r.dir.join("policies/settings.json")).unwrap();
    let line = settings
        .lines()
        .position(|l| l.contains("no-such-user-hd"))
        .unwrap()
        + 1;
    assert!(
        err.contains(&format!("error: policies/settings.json:{line}:"))
            && err.contains("key `sandbox.user`")
            && err.contains("layer privilege_drop cannot be enforced")
            && err.contains("\"no-such-user-hd\" does not exist"),
        "{err}"
    );
    let json = r.run(&["check", "--json"]);
    assert_eq!(json.status.code(), Some(2));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["enforced"]["tools_refused"], true);
    assert!(report["error"].as_str().unwrap().contains("sandbox.user"));
}

/// One line per layer, and no line that contradicts another: the fallback of a
/// best_effort sandbox is part of the privilege_drop line, which says NO.
#[test]
fn check_prints_one_line_per_layer_and_values_as_written() {
    let r = root();
    r.edit_settings(|s| {
        s["sandbox"]["user"] = serde_json::json!("no-such-user-hd");
        s["sandbox"]["require"] = serde_json::json!("best_effort");
    });
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let mut names = Vec::new();
    for line in text
        .lines()
        .skip_while(|l| !l.starts_with("enforced"))
        .skip(1)
    {
        let Some(rest) = line.strip_prefix("  ") else {
            break;
        };
        names.push(rest[4..].split_whitespace().next().unwrap().to_string());
    }
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(names.len(), unique.len(), "a layer on two lines: {text}");
    let drop = text.lines().find(|l| l.contains("privilege_drop")).unwrap();
    if nix_is_root() {
        assert!(drop.starts_with("  NO  privilege_drop"), "{drop}");
    }
    assert!(text.contains("require best_effort"), "as written: {text}");
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A rule of a megabyte (a remembered call's command can be long) is named by its
/// line and key, and quoted by its start: the error once printed it whole, twice, on
/// one line.
#[test]
fn a_huge_bad_rule_is_quoted_by_its_start() {
    let r = root();
    r.edit_settings(|s| {
        s["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!("x".repeat(1 << 20)))
    });
    let text = std::fs::read_to_string(r.dir.join("policies/settings.json")).unwrap();
    let line = text.lines().position(|l| l.contains("xxxx")).unwrap() + 1;
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let at = format!("policies/settings.json:{line}:7: key `tools.allow[");
    assert!(
        err.contains(&at),
        "want {at}: {}",
        &err[..err.len().min(2000)]
    );
    assert!(
        err.contains("\"… names unknown tool"),
        "{}",
        &err[..err.len().min(2000)]
    );
    assert!(err.len() < 4000, "{} bytes of error", err.len());
}

#[test]
fn check_warns_about_a_servers_paths_that_weaken_the_boundary_as_about_the_tools() {
    let r = root();
    std::fs::write(r.dir.join("config/key"), "sk-not-a-real-key").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        r.dir.join("config/key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    r.set_config("api", "api_key_file", "\"config/key\"");
    r.edit_settings(|s| {
        s["mcp"]["servers"]["srv"] = serde_json::json!({
            "command": ["/bin/true"],
            "write": ["policies", "transcripts", "run", "workspace"],
            "read": ["config/key", "/proc", "/usr"],
        });
    });
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let warned = warnings(&out);
    assert_entries_warned(
        &warned,
        "mcp.servers.srv",
        &[
            ("write", "policies"),
            ("write", "transcripts"),
            ("write", "run"),
            ("read", "config/key"),
            ("read", "/proc"),
        ],
        &[("write", "workspace"), ("read", "/usr")],
    );
}

#[test]
fn check_warns_about_a_server_running_code_from_a_tree_tools_write() {
    let r = root();
    let ws = r.dir.join("workspace");
    std::fs::write(ws.join("server.py"), "print()\n").unwrap();
    std::fs::create_dir_all(ws.join("lib")).unwrap();
    std::fs::write(ws.join("lib/main.js"), "\n").unwrap();
    let abs = ws.join("lib/main.js").display().to_string();
    r.edit_settings(|s| {
        s["mcp"]["servers"]["rel"] =
            serde_json::json!({"command": ["python3", "workspace/server.py"]});
        s["mcp"]["servers"]["abs"] = serde_json::json!({"command": ["node", abs, "stdio"]});
        s["mcp"]["servers"]["module"] =
            serde_json::json!({"command": ["python3", "-m", "mcp_server_time"]});
    });
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let warned = warnings(&out);
    let named = |key: &str| {
        warned
            .iter()
            .any(|w| w.contains(key) && w.contains("tools may write"))
    };
    assert!(named("mcp.servers.rel.command[1]"), "{warned:#?}");
    assert!(named("mcp.servers.abs.command[1]"), "{warned:#?}");
    assert!(
        !warned
            .iter()
            .any(|w| w.contains("mcp.servers.module.command[")),
        "{warned:#?}"
    );
    assert!(!named("mcp.servers.abs.command[2]"), "{warned:#?}");
}

#[test]
fn check_warns_about_a_remote_server_sent_the_api_key_file() {
    let r = root();
    r.set_config("api", "api_key_file", "\"config/key\"");
    std::fs::write(r.dir.join("config/key"), "sk-not-a-real-key").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        r.dir.join("config/key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let key = r.dir.join("config/key").display().to_string();
    r.edit_settings(|s| {
        s["mcp"]["servers"]["r"] = serde_json::json!({
            "url": "https://mcp.example.com/mcp",
            "headers_file": {"Authorization": key},
        });
    });
    let out = r.run(&["check"]);
    let warned = warnings(&out);
    assert!(
        warned
            .iter()
            .any(|w| w.contains("mcp.servers.r.headers_file.Authorization is the API key file")),
        "{warned:#?}"
    );
}

/// `check` lists each hook at its point with what its sandbox allows, naming its
/// variables but never their values.
#[test]
fn check_lists_the_hooks_with_their_sandbox_and_no_secret() {
    let r = root();
    r.edit_settings(|s| {
        s["hooks"] = serde_json::json!({
            "pre_tool": [{"name": "opa", "command": ["/bin/echo", "{}"], "tools": ["run_bash"],
                          "network": [8181], "may_allow": true, "env": {"OPA_TOKEN": "HOOK_SECRET"},
                          "timeout_secs": 5}],
            "task_finished": [{"name": "ticket", "command": ["/bin/true"]}]
        });
    });
    let out = r
        .command(&["check"])
        .env("HOOK_SECRET", "s3cr3t-value")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with("hook ") && l.contains(&format!(" {name}: ")))
            .unwrap_or_else(|| panic!("no hook line for {name}: {text}"))
            .to_string()
    };
    let opa = line("opa");
    for part in [
        "pre_tool opa: `/bin/echo {}`",
        "tools run_bash",
        "network TCP to 8181",
        "may_allow true",
        "env OPA_TOKEN",
        "timeout 5 s",
    ] {
        assert!(opa.contains(part), "{part:?} not in {opa}");
    }
    let ticket = line("ticket");
    assert!(
        ticket.starts_with("hook       task_finished ticket:"),
        "{ticket}"
    );
    assert!(
        ticket.contains("network none") && ticket.contains("tools all"),
        "{ticket}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&r.run(&["check", "--json"]))).unwrap();
    let hooks = json["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 2);
    assert_eq!(hooks[0]["network"], serde_json::json!([8181]));
    assert_eq!(hooks[1]["point"], "task_finished");
    assert!(
        !text.contains("s3cr3t-value") && !text.contains("HOOK_SECRET"),
        "{text}"
    );
}

/// A hook whose program sits where tools write (so a tool could answer for it),
/// one that cannot be found and one with the whole network are warned about.
#[test]
fn check_warns_about_a_hook_tools_could_replace_or_that_cannot_start() {
    let r = root();
    std::fs::write(r.workspace().join("gate.py"), "print('{}')\n").unwrap();
    r.edit_settings(|s| {
        s["hooks"]["pre_tool"] = serde_json::json!([
            {"name": "gate", "command": ["python3", "workspace/gate.py"]},
            {"name": "gone", "command": ["/opt/nowhere/hook"], "network": true}
        ]);
    });
    let out = r.run(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let warned = warnings(&out);
    let has = |part: &str| warned.iter().any(|w| w.contains(part));
    assert!(
        has("hooks.pre_tool[0] (gate).command[1] \"workspace/gate.py\""),
        "{warned:#?}"
    );
    assert!(
        has("hooks.pre_tool[1] (gone): \"/opt/nowhere/hook\" is not found"),
        "{warned:#?}"
    );
    assert!(
        has("hooks.pre_tool[1] (gone) has network: true"),
        "{warned:#?}"
    );
    assert!(
        !has("hooks.pre_tool[0] (gate): "),
        "python3 is found: {warned:#?}"
    );
}

/// Where tools get a cgroup each, `check` warns when nothing says the kernel
/// favours cgroup moves (each join then waits for a grace period after an idle
/// spell), and says nothing of it otherwise: judged from the same files the
/// kernel's mode is read from here.
#[test]
fn check_warns_when_a_cgroup_join_may_wait_for_a_grace_period() {
    let r = root();
    let out = r.run(&["check", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cgroups = report["enforced"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["name"] == "cgroup" && l["enforced"] == true);
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let release = read("/proc/sys/kernel/osrelease");
    let kconfig = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok();
    let favoured = harnessd::exec::favours_moves(
        &read("/proc/cmdline"),
        &read("/proc/self/mountinfo"),
        kconfig.as_deref(),
    );
    let warned = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .any(|w| w.contains("cgroup_favordynmods=true") && w.contains("RCU grace period"));
    assert_eq!(
        warned,
        cgroups && !favoured,
        "cgroups {cgroups}, favoured {favoured}: {report}"
    );
    if warned {
        let text = r.run(&["check"]);
        assert!(
            warnings(&text)
                .iter()
                .any(|w| w.contains("cgroup_favordynmods=true")),
            "{}",
            stderr(&text)
        );
    }
}
