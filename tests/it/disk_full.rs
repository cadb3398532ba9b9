//! A full disk under the audit log (no action without its record; docs/events.md, docs/api.md), through a real
//! small filesystem: `transcripts/` is a tmpfs this test mounts (it runs as root, as
//! CI does), filled while a task waits on the model. The line that cannot be written
//! is cut back, the tool it would have run does not run, the task stops with
//! `error`, `/healthz` is 503 and new tasks are refused with 507 until space returns.
//!
//! Where a tmpfs cannot be mounted (not root, no CAP_SYS_ADMIN), the same test runs
//! with the event writer's failpoint (`events.append=enospc`, debug builds) as the
//! full disk, and says so on stderr: never a silent skip.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::common::daemon::Daemon;
use crate::common::{TestRoot, wait_until};
use crate::failpoints::{Faults, Held, held_root};

/// A tmpfs mounted on a directory, unmounted on drop.
pub(crate) struct Mount {
    dir: PathBuf,
}

impl Mount {
    /// Mounts a tmpfs of `size` on `dir`; `Err` says why it could not be.
    pub(crate) fn tmpfs(dir: &Path, size: &str) -> Result<Mount, String> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Mount {
            dir: dir.to_path_buf(),
        })
    }
}

/// What makes the disk full: a real small filesystem, or the failpoint.
enum Full {
    /// The tmpfs and the file that fills it.
    Tmpfs { _mount: Mount, filler: PathBuf },
    /// The failpoint file (`HARNESSD_FAILPOINTS=@<file>`).
    Failpoint(Faults),
}

impl Full {
    fn set_up(root: &TestRoot) -> Full {
        let transcripts = root.dir.join("transcripts");
        let _ = std::fs::remove_dir_all(&transcripts);
        // HARNESSD_TEST_NO_MOUNT=1 runs the fallback on a machine that can mount.
        let mount = match std::env::var_os("HARNESSD_TEST_NO_MOUNT") {
            Some(_) => Err("HARNESSD_TEST_NO_MOUNT is set".to_string()),
            None => Mount::tmpfs(&transcripts, "256k"),
        };
        match mount {
            Ok(mount) => Full::Tmpfs {
                _mount: mount,
                filler: transcripts.join("filler"),
            },
            Err(why) => {
                eprintln!(
                    "disk_full: cannot mount a tmpfs ({why}); the full disk is the \
                     events.append=enospc failpoint instead"
                );
                Full::Failpoint(Faults::new(root))
            }
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Full::Tmpfs { .. } => Vec::new(),
            Full::Failpoint(f) => vec![("HARNESSD_FAILPOINTS", f.env())],
        }
    }

    fn fill(&self) {
        match self {
            Full::Tmpfs { filler, .. } => fill(filler),
            Full::Failpoint(f) => f.raise("events.append=enospc"),
        }
    }

    fn free(&self) {
        match self {
            Full::Tmpfs { filler, .. } => std::fs::remove_file(filler).unwrap(),
            Full::Failpoint(f) => f.clear(),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // Lazy: the daemon may still hold the log open while it is being killed.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Fills the filesystem holding `path` until a write fails for lack of space.
pub(crate) fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![b'x'; 4096];
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
}

/// Every line of events.jsonl parses and seq strictly increases (no duplicate).
fn check_log(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "partial last line");
    let events: Vec<Value> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("line {} does not parse ({e}): {l:?}", i + 1))
        })
        .collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seq not strictly increasing: {seqs:?}"
    );
    events
}

#[test]
fn a_full_disk_stops_the_action_and_refuses_tasks_until_space_returns() {
    // write_file runs without asking: only the record can stop it.
    let Held {
        asked,
        go,
        api: _api,
        root,
    } = held_root();
    let full = Full::set_up(&root);
    let log = root.dir.join("transcripts/events.jsonl");
    let env = full.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let d = Daemon::start_with_env(&root, &env);

    let id = d.submit("write the marker");
    wait_until("the model request", || asked.load(Ordering::SeqCst));
    full.fill();
    go.store(true, Ordering::SeqCst);

    let t = d.wait_finished(&id);
    assert_eq!(t["stop_reason"], "error", "{t}");
    assert!(
        !root.workspace().join("marker.txt").exists(),
        "the tool ran although its record could not be written"
    );
    // A prompt whose line cannot fit in what is left of the log's last page.
    let big = json!({"prompt": "p".repeat(6000)}).to_string();
    let (status, body) = d.request("POST", "/v1/tasks", Some(&big));
    assert_eq!(status, 507, "{body}");
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 503, "{health}");
    assert_eq!(health["status"], "degraded");
    assert!(
        health["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{health}"
    );
    check_log(&log);

    full.free();
    let id2 = d.submit("again");
    let (status, health) = d.request("GET", "/healthz", None);
    assert_eq!(status, 200, "{health}");
    assert_eq!(d.wait_finished(&id2)["stop_reason"], "end_turn");
    let events = check_log(&log);
    assert!(
        events
            .iter()
            .all(|e| !(e["type"] == "tool_finished" && e["is_error"] == false)),
        "no tool ran"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "task_queued" && e["task_id"] == id2.as_str())
            .count(),
        1
    );
    // The task the full disk stopped got its `task_finished` once space returned.
    let finished: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "task_finished" && e["task_id"] == id.as_str())
        .collect();
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0]["stop_reason"], "error");
    drop(d);
    drop(full);
}
