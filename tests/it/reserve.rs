//! The reserve (docs/events.md, docs/sandbox.md): space in `transcripts/` kept for the record. The
//! workspace and `transcripts/` share one small tmpfs this test mounts (it runs as
//! root, as CI does); tools print or write far more than it holds, and the log still
//! records how the task ended, verifies, and takes the next task.
//!
//! Where a tmpfs cannot be mounted (not root, no CAP_SYS_ADMIN), the same tasks run
//! on the ordinary filesystem, which then checks only that the records are complete,
//! and the test says so on stderr: never a silent skip.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

/// One tmpfs holding the root's workspace and transcripts (bind mounts of two of
/// its directories), unmounted on drop.
struct SharedDisk {
    mounts: Vec<PathBuf>,
}

impl SharedDisk {
    /// Mounts a tmpfs of `size` under the root and binds its `workspace` and
    /// `transcripts` over the root's; `Err` says why it could not.
    fn mount(root: &TestRoot, size: &str) -> Result<SharedDisk, String> {
        let disk = root.dir.join("disk");
        std::fs::create_dir_all(&disk).unwrap();
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new(args[0])
                .args(&args[1..])
                .output()
                .map_err(|e| format!("cannot run {}: {e}", args[0]))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
            }
        };
        let d = disk.to_str().unwrap();
        run(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size}"),
            "tmpfs",
            d,
        ])?;
        let mut shared = SharedDisk {
            mounts: vec![disk.clone()],
        };
        for name in ["workspace", "transcripts"] {
            let inner = disk.join(name);
            let outer = root.dir.join(name);
            std::fs::create_dir_all(&outer).unwrap();
            std::fs::create_dir_all(&inner).unwrap();
            run(&[
                "cp",
                "-a",
                &format!("{}/.", outer.display()),
                inner.to_str().unwrap(),
            ])?;
            run(&[
                "mount",
                "--bind",
                inner.to_str().unwrap(),
                outer.to_str().unwrap(),
            ])?;
            shared.mounts.insert(0, outer);
        }
        Ok(shared)
    }
}

impl Drop for SharedDisk {
    fn drop(&mut self) {
        for m in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}

/// A root where `run_bash` runs without asking, on the shared tmpfs when it can be
/// mounted.
fn shared_root(api: &FakeApi) -> (TestRoot, Option<SharedDisk>) {
    let root = TestRoot::new(&api.url);
    root.edit_settings(|s| {
        s["tools"]["allow"] = json!(["run_bash"]);
        s["tools"]["ask"] = json!([]);
        s["tools"]["deny"] = json!([]);
        // The workspace writes below need files past the default 256 MiB cap.
        s["sandbox"]["timeout_secs"] = json!(120);
    });
    let disk = match std::env::var_os("HARNESSD_TEST_NO_MOUNT") {
        Some(_) => Err("HARNESSD_TEST_NO_MOUNT is set".to_string()),
        None => SharedDisk::mount(&root, "300m"),
    };
    match disk {
        Ok(d) => (root, Some(d)),
        Err(why) => {
            eprintln!(
                "reserve: cannot mount a tmpfs ({why}); the tasks run on the ordinary \
                 filesystem, which checks only that their records are complete"
            );
            (root, None)
        }
    }
}

/// The log is whole and chained, and a second task runs to its end.
fn log_still_takes_tasks(root: &TestRoot) {
    let out = root.run(&["audit", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let out = root.run(&["run", "and now something small"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = root.run(&["audit", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

/// ~64 MiB on stdout and as much on stderr (each under the 64 MiB flood cap).
fn flood(tag: &str) -> Value {
    let n = 67_000_000;
    json!({"command": format!(
        "head -c {n} /dev/zero | tr '\\0' a; head -c {n} /dev/zero | tr '\\0' {tag} >&2"
    )})
}

#[test]
fn tool_output_never_spools_into_the_reserve_and_the_task_end_is_recorded() {
    let api = FakeApi::start(vec![
        Reply::tools(&[
            ("toolu_1", "run_bash", flood("b")),
            ("toolu_2", "run_bash", flood("c")),
            ("toolu_3", "run_bash", flood("d")),
            ("toolu_4", "run_bash", flood("e")),
        ]),
        Reply::text("printed"),
        Reply::text("small"),
    ]);
    let (root, disk) = shared_root(&api);
    let out = root.run(&["run", "print a lot"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let finished = root.events_of("task_finished");
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0]["stop_reason"], "end_turn", "{}", finished[0]);
    let calls = root.events_of("tool_finished");
    assert_eq!(calls.len(), 4, "{calls:?}");
    for c in &calls {
        // Counted whole, never killed for what was not kept.
        assert_eq!(c["exit_code"], 0, "{c}");
        assert_eq!(c["output_bytes"], 134_000_000u64, "{c}");
    }
    let reserve = root.dir.join("transcripts/.reserve");
    let meta = std::fs::metadata(&reserve).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.len(), 64 * 1024 * 1024);
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    if disk.is_some() {
        let cut: Vec<&Value> = calls
            .iter()
            .filter(|c| c["spool_cut"].is_object())
            .collect();
        assert!(!cut.is_empty(), "300 MiB cannot hold 536 MB: {calls:?}");
        assert_eq!(cut[0]["spool_cut"]["reason"], "reserve", "{}", cut[0]);
        // The floor held: as much as the reserve is still free besides it.
        let free = free_bytes(&root.dir.join("transcripts"));
        assert!(free >= 60 * 1024 * 1024, "{free}");
    }
    log_still_takes_tasks(&root);
    drop(disk);
}

/// A fake model, with its two flags: its first answer sets `asked`, then waits
/// until `go` is set (the test fills the disk meanwhile) and asks for a call whose
/// line (over 4 KiB) cannot fit in the slack of the log's last page; every later
/// request gets a plain answer.
fn held_model() -> (FakeApi, Arc<AtomicBool>, Arc<AtomicBool>) {
    let (asked, go) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let count = AtomicUsize::new(0);
    let (a, g) = (asked.clone(), go.clone());
    let api = FakeApi::with_responder(Box::new(move |_| {
        if count.fetch_add(1, Ordering::SeqCst) > 0 {
            return Reply::text("small");
        }
        a.store(true, Ordering::SeqCst);
        while !g.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let command = format!(": {}; echo ran > marker", "x".repeat(4000));
        Reply::tool("toolu_late", "run_bash", json!({ "command": command }))
    }));
    (api, asked, go)
}

#[test]
fn a_full_disk_under_the_log_releases_the_reserve_to_record_the_end() {
    let (api, asked, go) = held_model();
    let (root, disk) = shared_root(&api);
    let Some(disk) = disk else {
        eprintln!(
            "reserve: without a tmpfs the disk cannot be filled; only the records are checked"
        );
        let out = root.run(&["run", "go on"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        log_still_takes_tasks(&root);
        return;
    };
    let child = root
        .command(&["run", "go on"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::common::wait_until("the model request", || asked.load(Ordering::SeqCst));
    assert!(
        root.dir.join("transcripts/.reserve").exists(),
        "no reserve held"
    );
    let filler = root.dir.join("disk/filler");
    fill(&filler);
    go.store(true, Ordering::SeqCst);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        !root.workspace().join("marker").exists(),
        "the call ran unrecorded"
    );
    // The end is on the record, in the space the reserve gave up.
    let finished = root.events_of("task_finished");
    assert_eq!(finished.len(), 1, "{finished:?}\n{}", stderr(&out));
    assert_eq!(finished[0]["stop_reason"], "error", "{}", finished[0]);
    let error = finished[0]["error"].as_str().unwrap();
    assert!(
        error.contains("No space left") || error.contains("disk"),
        "{error}"
    );
    assert!(
        !root.dir.join("transcripts/.reserve").exists(),
        "the reserve was not given up"
    );
    // Space returns: the next start holds the reserve again and runs.
    std::fs::remove_file(&filler).unwrap();
    log_still_takes_tasks(&root);
    assert!(root.dir.join("transcripts/.reserve").exists());
    drop(disk);
}

/// Fills the filesystem holding `path` until a write fails for lack of space.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(28), "expected ENOSPC, got {e}");
                break;
            }
        }
    }
    let small = vec![b'x'; 512];
    while f.write(&small).is_ok_and(|n| n > 0) {}
}

/// Bytes free on the filesystem of `dir`.
fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    stdout(&out)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap()
}

#[test]
fn check_warns_when_the_workspace_shares_the_audit_logs_filesystem() {
    let api = FakeApi::start(vec![]);
    let root = TestRoot::new(&api.url);
    let warning = "workspace and transcripts/ share a filesystem: a tool can fill the audit \
                   log's disk; put the workspace on its own filesystem or a project quota";
    // `init` puts both in the root: one filesystem.
    let out = root.run(&["check"]);
    assert!(stderr(&out).contains(warning), "{}", stderr(&out));
    // The workspace on a filesystem of its own: no warning.
    let ws = root.workspace();
    let own = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
        .arg(&ws)
        .status();
    if own.is_ok_and(|s| s.success()) {
        let out = root.run(&["check"]);
        let _ = Command::new("umount").arg("-l").arg(&ws).status();
        assert!(
            !stderr(&out).contains("share a filesystem"),
            "{}",
            stderr(&out)
        );
    } else {
        eprintln!("reserve: cannot mount a tmpfs; only the shared case of check is tested");
    }
}

#[test]
fn the_daemon_refuses_work_while_the_reserve_is_released_and_retakes_it_when_space_returns() {
    let (api, asked, go) = held_model();
    let (root, disk) = shared_root(&api);
    let Some(disk) = disk else {
        eprintln!("reserve: without a tmpfs the disk cannot be filled; nothing to check here");
        return;
    };
    let reserve = root.dir.join("transcripts/.reserve");
    let d = Daemon::start(&root);
    assert!(reserve.exists(), "no reserve held");
    let id = d.submit("go on");
    crate::common::wait_until("the model request", || asked.load(Ordering::SeqCst));
    let filler = root.dir.join("disk/filler");
    fill(&filler);
    go.store(true, Ordering::SeqCst);
    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "error", "{t}");
    assert!(!reserve.exists(), "the reserve was not given up");
    assert!(!root.workspace().join("marker").exists(), "the call ran");
    // Released: nothing new is recorded, so nothing new starts.
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 503, "{health}");
    assert!(
        health["reason"]
            .as_str()
            .is_some_and(|r| r.contains("reserve")),
        "{health}"
    );
    let (status, body) = d.request("POST", "/v1/tasks", Some(r#"{"prompt": "more"}"#));
    assert_eq!(status, 507, "{body}");
    // Space returns: the writer takes the reserve back by itself, and the health
    // with it, with no request needed.
    std::fs::remove_file(&filler).unwrap();
    crate::common::wait_until("the reserve held again", || reserve.exists());
    crate::common::wait_until("healthz 200", || {
        d.request("GET", "/healthz", None).0 == 200
    });
    let id2 = d.submit("again");
    assert_eq!(d.wait_finished(&id2)["stop_reason"], "end_turn");
    let ends = root.events_of("task_finished");
    assert_eq!(ends.len(), 2, "{ends:?}");
    drop(d);
    let out = root.run(&["audit", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    drop(disk);
}
