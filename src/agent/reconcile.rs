//! A transcript brought in line with the audit log (docs/events.md, "The log is the
//! truth"): after a save that failed (a full disk), the transcript on disk can lag
//! the log — still `running` or `queued` though the log shows the task finished, or
//! ending with `tool_use` blocks whose results were never saved. The log wins: a
//! task it shows finished is saved `finished`, never left to resume or run again,
//! and each open call is answered as far as the log and its kept `.out` file show.

use std::path::Path;

use super::Transcript;
use super::guard::{RESUME_NOT_EXECUTED, RESUME_STATE_UNKNOWN, ran_but_lost};
use crate::events::CallTrail;
use crate::events::since::Since;
use crate::llm::{Block, Message, Role};
use crate::protocol::TaskStatus;

/// Brings `t` in line with what the log says since its last checkpoint; `true`
/// when it changed (and must be saved). `outputs` is `transcripts/`, where each
/// task's `.out` files are; `max_chars` is `output.max_chars`.
///
/// Open calls are answered when the log shows the task finished (every call then
/// gets an answer: its kept output, or what the log says of it), or when every one
/// of them has its `tool_finished`; otherwise they are left to a resume, which
/// answers them from the whole log and closes them there.
pub fn in_line(t: &mut Transcript, since: &Since, outputs: &Path, max_chars: usize) -> bool {
    if t.status == TaskStatus::Finished {
        return false;
    }
    let seen = since.tasks.get(&t.task_id);
    let finished = seen.and_then(|s| s.finished.clone());
    let mut changed = answer_open_calls(t, since, outputs, max_chars, finished.is_some());
    // Saved `queued`, but the log shows its run began (`task_started`): the run was
    // stopped before it saved the transcript `running`. It is a running task whose
    // daemon died, to be left interrupted, never one to start a second time.
    let began = seen.is_some_and(|s| s.started) && !t.resume_queued;
    if finished.is_none() && began && t.status == TaskStatus::Queued {
        t.status = TaskStatus::Running;
        changed = true;
    }
    if let Some(f) = finished {
        t.status = TaskStatus::Finished;
        t.stop_reason = Some(f.stop_reason);
        t.error = f.error;
        t.usage = f.usage;
        t.usd = f.usd.or(t.usd);
        t.answer = Some(
            t.messages
                .iter()
                .rev()
                .find(|m| m.role == Role::Assistant)
                .map(Message::text)
                .unwrap_or_default(),
        );
        changed = true;
    }
    changed
}

/// Answers the `tool_use` blocks of a last assistant message; see [`in_line`].
fn answer_open_calls(
    t: &mut Transcript,
    since: &Since,
    outputs: &Path,
    max_chars: usize,
    finished: bool,
) -> bool {
    let Some(last) = t.messages.last().filter(|m| m.role == Role::Assistant) else {
        return false;
    };
    let uses = last.answerable_tool_uses();
    if uses.is_empty() {
        return false;
    }
    let out_dir = outputs.join(&t.task_id);
    let mut blocks = Vec::with_capacity(uses.len());
    for id in uses.iter().map(|u| &u.id) {
        let trail = since.call(&t.task_id, id);
        let done = matches!(trail, CallTrail::Finished { .. });
        if !finished && !done {
            return false;
        }
        let output = since
            .tasks
            .get(&t.task_id)
            .and_then(|s| s.outputs.get(id))
            .copied();
        let kept = read_kept(&out_dir.join(crate::tools::out_file_name(id)), max_chars);
        let (content, is_error) = match (kept, output, trail) {
            // The kept output, when it holds something or there was nothing to keep.
            (Ok((bytes, kept_len)), Some((total, failed)), _) if kept_len > 0 || total == 0 => {
                (kept_result(&bytes, kept_len, total, max_chars), failed)
            }
            (
                _,
                _,
                CallTrail::Finished {
                    ran: true,
                    exit_code,
                },
            ) => (ran_but_lost(exit_code), true),
            (_, _, CallTrail::MayHaveRun) => (RESUME_STATE_UNKNOWN.to_string(), true),
            _ => (RESUME_NOT_EXECUTED.to_string(), true),
        };
        blocks.push(Block::tool_result(id, &content, is_error));
    }
    t.messages.push(Message::user(blocks));
    true
}

/// What a result can show of a kept `.out` file, and the file's length: the whole
/// file when it is small, else its first and last `4 × max_chars` bytes (a result
/// shows at most `max_chars` characters, from both ends), so a 256 MiB spool is not
/// read whole at start. Opened without following a link and without blocking on a
/// FIFO; anything but a regular file is an error (the caller then answers from the
/// log alone).
fn read_kept(path: &std::path::Path, max_chars: usize) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut file = crate::events::segments::open_regular(path)?;
    let len = file.metadata()?.len();
    let end = u64::try_from(max_chars.saturating_mul(4)).unwrap_or(u64::MAX);
    if len <= end.saturating_mul(2) {
        let mut bytes = Vec::new();
        file.take(len).read_to_end(&mut bytes)?;
        return Ok((bytes, len));
    }
    let mut bytes = Vec::new();
    (&mut file).take(end).read_to_end(&mut bytes)?;
    bytes.extend_from_slice(b"\n[...]\n");
    file.seek(SeekFrom::Start(len - end))?;
    file.take(end).read_to_end(&mut bytes)?;
    Ok((bytes, len))
}

/// A result filled from a kept `.out` file (`kept_len` bytes long) of `total`
/// bytes in all: cut to `max_chars` as a tool result is, and saying so when part
/// was not kept.
fn kept_result(bytes: &[u8], kept_len: u64, total: u64, max_chars: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut content = crate::text::truncate_middle(&text, max_chars, 0).0;
    if kept_len < total {
        content.push_str(&format!(
            "\n[filled in from the kept output after the transcript could not be saved: \
             {kept_len} of {total} bytes were kept]"
        ));
    }
    content
}

#[cfg(test)]
mod tests {
    use super::{in_line, read_kept};
    use crate::agent::{TaskSpec, queued_transcript};
    use crate::events::since::since_checkpoint;
    use crate::protocol::{Source, TaskStatus};

    #[test]
    fn a_queued_transcript_whose_start_is_on_the_log_is_running_not_queued_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        let spec = TaskSpec {
            task_id: "t-1".into(),
            prompt: "p".into(),
            max_turns: None,
            source: Source::Api,
            by: "x".into(),
            resume: None,
            resume_recorded: false,
        };
        let queued = queued_transcript(&spec, "m".into(), "x".into());
        let line = |seq: u64, kind: &str, rest: &str| {
            format!(r#"{{"seq":{seq},"ts":"t","type":"{kind}","task_id":"t-1"{rest}}}"#)
        };
        let queued_line = line(1, "task_queued", r#","prompt":"p","source":"api","by":"x""#);
        let requeued = line(2, "task_requeued", r#","created":"c""#);
        let started = line(
            3,
            "task_started",
            r#","prompt":"p","model":"m","source":"api""#,
        );
        let check = |lines: &[&String], resume_queued: bool| {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            std::fs::write(&log, text).unwrap();
            let since = since_checkpoint(&log).unwrap();
            let mut t = queued.clone();
            t.resume_queued = resume_queued;
            let changed = in_line(&mut t, &since, dir.path(), 100);
            assert_eq!(changed, t.status != TaskStatus::Queued);
            t.status
        };
        // Killed between its `task_started` and the save of its transcript.
        assert_eq!(check(&[&queued_line, &started], false), TaskStatus::Running);
        assert_eq!(
            check(&[&queued_line, &requeued, &started], false),
            TaskStatus::Running
        );
        // Queued again since it began: it is to run.
        let again = line(4, "task_requeued", r#","created":"c""#);
        assert_eq!(
            check(&[&queued_line, &started, &again], false),
            TaskStatus::Queued
        );
        assert_eq!(check(&[&queued_line, &requeued], false), TaskStatus::Queued);
        // A queued resume's run records nothing when it begins: still to run.
        assert_eq!(check(&[&queued_line, &started], true), TaskStatus::Queued);
    }

    #[test]
    fn a_kept_output_is_read_only_as_far_as_a_result_shows_and_never_through_a_link_or_fifo() {
        let dir = std::env::temp_dir().join(format!("harnessd-kept-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.out");
        let file = std::fs::File::create(&big).unwrap();
        // Sparse: 1 GiB long, a few pages on disk.
        file.set_len(1 << 30).unwrap();
        let (bytes, len) = read_kept(&big, 100).unwrap();
        assert_eq!(len, 1 << 30);
        assert!(bytes.len() <= 2 * 400 + 16, "{} bytes read", bytes.len());

        let small = dir.join("small.out");
        std::fs::write(&small, "hello").unwrap();
        assert_eq!(read_kept(&small, 100).unwrap(), (b"hello".to_vec(), 5));

        let link = dir.join("link.out");
        std::os::unix::fs::symlink(&small, &link).unwrap();
        assert!(read_kept(&link, 100).is_err(), "a link was followed");

        let fifo = dir.join("fifo.out");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Returns at once (an error), rather than waiting for a writer.
        assert!(read_kept(&fifo, 100).is_err(), "a FIFO was read");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
