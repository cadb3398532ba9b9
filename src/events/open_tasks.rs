//! Reading the audit log back (read-only): which tasks it shows begun and never
//! ended, for the start-up check that every task the log shows accepted gets its
//! `task_finished` (no action without its record; docs/api.md).
//!
//! Streamed one line at a time; only the lines of task lifecycle events are
//! parsed, so a start reads a large log at about the speed of the disk.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;

use super::TrailError;

/// The fields of a log line this reader looks at.
#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    task_id: Option<String>,
}

/// Whether the log's last line is `daemon_stopping`: the daemon that wrote it
/// stopped cleanly, with every task it began closed, so a start need not read the
/// whole log for open tasks. Only the last 64 KiB are read; a missing or empty log
/// counts as clean (nothing is open in it), anything else as not.
pub fn ended_cleanly(log: &Path) -> Result<bool, TrailError> {
    use std::io::{Read, Seek, SeekFrom};
    let io = |source| TrailError::Io {
        path: log.to_path_buf(),
        source,
    };
    let mut file = match super::segments::open_live(log) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(io(e)),
    };
    let len = file.metadata().map_err(io)?.len();
    if len == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))
        .map_err(io)?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).map_err(io)?;
    let last = tail
        .strip_suffix(b"\n")
        .unwrap_or(&tail)
        .rsplit(|&b| b == b'\n')
        .next()
        .unwrap_or_default();
    Ok(serde_json::from_slice::<Line>(last).is_ok_and(|l| l.kind == "daemon_stopping"))
}

/// The tasks whose last lifecycle line (`task_queued`, `task_requeued`,
/// `task_started`, `task_resumed`) has no `task_finished` after it, in the order
/// they were first seen. A missing log is an empty one; a line that does not parse
/// (a torn write) says nothing.
pub fn open_tasks(log: &Path) -> Result<Vec<String>, TrailError> {
    let io = |source| TrailError::Io {
        path: log.to_path_buf(),
        source,
    };
    let file = match super::segments::open_live(log) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    // id → the line where it was first seen, for an oldest-first answer.
    let mut open: HashMap<String, u64> = HashMap::new();
    let mut reader = std::io::BufReader::new(file);
    let mut buf = Vec::new();
    let mut n: u64 = 0;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io)? == 0 {
            break;
        }
        n += 1;
        // Cheap filter before parsing: every lifecycle type starts so.
        if !buf.windows(6).any(|w| w == b"\"task_") {
            continue;
        }
        let Ok(Line {
            kind,
            task_id: Some(id),
        }) = serde_json::from_slice::<Line>(&buf)
        else {
            continue;
        };
        match kind.as_str() {
            "task_queued" | "task_requeued" | "task_started" | "task_resumed" => {
                open.entry(id).or_insert(n);
            }
            "task_finished" => {
                open.remove(&id);
            }
            _ => {}
        }
    }
    let mut ids: Vec<(u64, String)> = open.into_iter().map(|(id, n)| (n, id)).collect();
    ids.sort_unstable();
    Ok(ids.into_iter().map(|(_, id)| id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_is_open_from_its_first_lifecycle_line_to_its_task_finished() {
        let path = std::env::temp_dir().join(format!(
            "harnessd-open-{}-{}.jsonl",
            std::process::id(),
            fastrand::u64(..)
        ));
        let lines = [
            json!({"type": "task_queued", "task_id": "done"}),
            json!({"type": "task_queued", "task_id": "lost"}),
            json!({"type": "task_started", "task_id": "done"}),
            json!({"type": "task_finished", "task_id": "done"}),
            json!({"type": "task_started", "task_id": "cli"}),
            json!({"type": "task_resumed", "task_id": "done"}),
            json!({"type": "tool_finished", "task_id": "other"}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, format!("{text}{{\"type\": \"task_fin")).unwrap();
        let open = open_tasks(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(open, ["lost", "cli", "done"]);
        assert!(
            open_tasks(Path::new("/nonexistent/events.jsonl"))
                .unwrap()
                .is_empty()
        );
        assert!(ended_cleanly(Path::new("/nonexistent/events.jsonl")).unwrap());
    }

    #[test]
    fn a_log_ended_cleanly_when_its_last_line_is_daemon_stopping() {
        let path = std::env::temp_dir().join(format!(
            "harnessd-clean-{}-{}.jsonl",
            std::process::id(),
            fastrand::u64(..)
        ));
        let stopped = json!({"type": "daemon_stopping", "reason": "SIGTERM"});
        let queued = json!({"type": "task_queued", "task_id": "t"});
        std::fs::write(&path, format!("{queued}\n{stopped}\n")).unwrap();
        assert!(ended_cleanly(&path).unwrap());
        std::fs::write(&path, format!("{stopped}\n{queued}\n")).unwrap();
        assert!(!ended_cleanly(&path).unwrap());
        std::fs::write(&path, format!("{stopped}\n{{\"type\": \"daemon_sto")).unwrap();
        assert!(!ended_cleanly(&path).unwrap(), "a torn last line");
        std::fs::remove_file(&path).unwrap();
    }
}
