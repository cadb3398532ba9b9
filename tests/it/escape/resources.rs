//! Resource exhaustion: each must be contained by the limits.

use serde_json::{Value, json};

use std::time::Duration;

use crate::common::{FakeApi, Reply, TestRoot, last_results, stderr, stdout};

use super::{Targets, bash};

/// The attacks of this family: (id, tool, input), each printing ESCAPED only if it worked.
pub(super) fn attacks(_t: &Targets) -> Vec<(&'static str, &'static str, Value)> {
    vec![
        // Resource exhaustion: each must be contained.
        (
            "fork_bomb",
            "run_bash",
            json!({"command": "bomb() { bomb | bomb & }; bomb; sleep 2", "timeout_secs": 3}),
        ),
        (
            "memory_bomb",
            "run_bash",
            bash(
                "for i in 1 2 3 4 5 6; do python3 -c 'b = bytearray(2 * 1024**3); print(\"ESCAPED\")' & done; wait",
            ),
        ),
        (
            "disk_fill",
            "run_bash",
            bash(
                "dd if=/dev/zero of=fill bs=1M count=64 2>/dev/null; [ $(stat -c %s fill) -gt 16777216 ] && echo ESCAPED; true",
            ),
        ),
    ]
}

#[test]
fn no_background_process_survives_a_timeout() {
    let heartbeat = |name: &str| format!("(while true; do date +%s%N > {name}; sleep 0.05; done)");
    let command = format!(
        "{} & nohup bash -c '{}' >/dev/null 2>&1 & setsid bash -c '{}' & (bash -c '{} &' &) ; sleep 60",
        heartbeat("hb-plain"),
        heartbeat("hb-nohup"),
        heartbeat("hb-setsid"),
        heartbeat("hb-double"),
    );
    let api = FakeApi::start(vec![
        Reply::tool("t", "run_bash", json!({"command": command})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| s["sandbox"]["timeout_secs"] = json!(2));
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let results = last_results(&api.requests()[1].body);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("timed out")
    );
    for name in ["hb-plain", "hb-nohup", "hb-setsid", "hb-double"] {
        crate::tools::assert_heartbeat_stopped(&root.workspace().join(name));
    }
}

#[test]
fn fork_bomb_is_contained_and_the_loop_goes_on() {
    // A uid of its own: RLIMIT_NPROC counts every process of the uid, so a bomb
    // under the shared `nobody` would starve the other tests' tools.
    let bomb = json!({"command": "bomb() { bomb | bomb & }; bomb; sleep 3", "timeout_secs": 2});
    let api = FakeApi::start(vec![
        Reply::tool("bomb", "run_bash", bomb),
        Reply::tool("after", "run_bash", json!({"command": "echo alive"})),
        Reply::text("done"),
    ]);
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["sandbox"]["user"] = json!("61999");
        s["sandbox"]["max_processes"] = json!(16);
    });
    let started = std::time::Instant::now();
    let out = root.run(&["run", "--yes", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(30));
    let reqs = api.requests();
    assert_eq!(reqs.len(), 3);
    let bombed = last_results(&reqs[1].body);
    assert!(
        bombed[0]["content"].as_str().unwrap().contains("timed out"),
        "{}",
        bombed[0]
    );
    let after = last_results(&reqs[2].body);
    assert!(
        after[0]["content"].as_str().unwrap().contains("alive"),
        "the next tool ran: {}",
        after[0]
    );
}

#[test]
fn a_calls_children_share_one_memory_and_process_cap() {
    let root = TestRoot::new("http://127.0.0.1:9");
    let check = root.run(&["check", "--json"]);
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    let cgroup = report["enforced"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "cgroup")
        .cloned()
        .unwrap();
    if cgroup["enforced"] != true {
        // Without a writable cgroup tree the caps are per process (RLIMIT_AS) and
        // per uid (RLIMIT_NPROC); the escape suite covers those.
        eprintln!("no call cgroup here: {}", cgroup["detail"]);
        return;
    }
    root.edit_settings(|s| {
        s["sandbox"]["memory_mb"] = json!(256);
        s["sandbox"]["max_processes"] = json!(40);
        s["sandbox"]["user"] = json!("61003");
    });
    // Each child stays under its own 256 MiB address-space limit; four of them
    // together would not fit the call's 256 MiB.
    let bomb = "for i in 1 2 3 4; do python3 -c 'b = bytearray(150 * 1024**2); import time; time.sleep(1); print(\"held\")' & done; wait";
    let out = root.run(&["sandbox", "--", "bash", "-c", bomb]);
    let held = stdout(&out).matches("held").count();
    assert!(
        held < 4,
        "four children held 600 MiB inside a 256 MiB call: {}",
        stdout(&out)
    );
    // Processes: 40 for the whole call, whatever uid budget remains.
    let out = root.run(&[
        "sandbox",
        "--",
        "bash",
        "-c",
        "n=0; for i in $(seq 80); do (sleep 2) 2>/dev/null & n=$((n+1)); done; wait; echo started",
    ]);
    let err = stderr(&out);
    assert!(
        err.contains("fork") || err.contains("Resource temporarily unavailable"),
        "80 processes started in a 40-process call: {err}"
    );
}
