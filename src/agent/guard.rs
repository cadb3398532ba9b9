//! The task guard: a panic inside a task ends that task, never the process (docs/operating.md,
//! `error`). `run_task` — the one entry both `harnessd run` and the daemon's
//! scheduler use — runs the task's future through [`catch`]; a caught [`Panic`] says
//! what panicked and where. The [`Ledger`] tracks how far each call of the current
//! turn got, so the calls a panic leaves open are answered truthfully: a result that
//! was produced is kept, a call that may have started is "state unknown", the rest are
//! "not executed".
//!
//! This module decides nothing else about the task: `run_task` finishes it as every
//! other stop does. [`install_panic_hook`] (called once by `main`) sends panic reports
//! through `tracing` instead of raw stderr and notes where each panic happened, which
//! [`catch`] picks up. The test-only switch `HARNESSD_TEST_PANIC_ON_TOOL` (debug builds
//! only) lives here too.

use std::any::Any;
use std::cell::Cell;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::Instant;

use futures::FutureExt;

use super::TaskEnv;
use super::calls;
use crate::events::{CallTrail, Event, EventError, MAX_FIELD_CHARS, TrailError};
use crate::llm::{Block, ToolUse};
use crate::tools::ToolResult;

/// What a caught panic said, and where it happened when the hook saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Panic {
    /// The panic message, control characters escaped, cut to [`MAX_FIELD_CHARS`].
    message: String,
    /// `file:line:column`, when the panic hook noted it.
    location: Option<String>,
}

impl std::fmt::Display for Panic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Some(at) => write!(f, "internal error: panic at {at}: {}", self.message),
            None => write!(f, "internal error: panic: {}", self.message),
        }
    }
}

/// What the hook noted about the last panic on this thread: (message, location).
struct Noted {
    message: String,
    location: String,
}

thread_local! {
    /// Written by the panic hook on the panicking thread, taken by [`catch`] on the same
    /// thread as the unwind reaches it (a future is polled, and unwinds, on one thread).
    static LAST_PANIC: Cell<Option<Noted>> = const { Cell::new(None) };
}

impl Panic {
    fn caught(payload: &(dyn Any + Send)) -> Panic {
        let message = clean(&payload_text(payload));
        // A stale note (a panic caught elsewhere on this thread, or one re-raised with
        // `resume_unwind`, which skips the hook) is told apart by its message.
        let location = LAST_PANIC
            .try_with(Cell::take)
            .ok()
            .flatten()
            .filter(|n| n.message == message)
            .map(|n| n.location);
        Panic { message, location }
    }
}

fn payload_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// The message as it may be recorded and printed: a panic message can quote model text
/// (a slicing error quotes the string it sliced), so control and bidi characters are
/// escaped and the length is capped like an event field.
fn clean(message: &str) -> String {
    let escaped = crate::text::escape_line(message);
    crate::text::truncate_middle(&escaped, MAX_FIELD_CHARS, 0).0
}

/// Runs `task` to its end; a panic inside it comes back as `Err` instead of unwinding
/// further.
pub(super) async fn catch<F: Future>(task: F) -> Result<F::Output, Panic> {
    // AssertUnwindSafe: after a panic the caller reads only the transcript and the
    // ledger. Both are whole between statements (a message is pushed or not; the
    // ledger's lock is never held while code that can panic runs), and the open calls
    // a half-done turn leaves are exactly what the caller then answers.
    AssertUnwindSafe(task)
        .catch_unwind()
        .await
        .map_err(|payload| Panic::caught(&*payload))
}

/// Sends panic reports through `tracing` (stderr or journald, and the log file), one
/// event per panic, with a backtrace only when `RUST_BACKTRACE` asks for one, and notes
/// each panic's location for [`catch`]. Unwinding is unchanged: the guard in
/// `run_task` catches task panics; anything else still ends its thread.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = clean(&payload_text(info.payload()));
        let location = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
        if let Some(location) = &location {
            let noted = Noted {
                message: message.clone(),
                location: location.clone(),
            };
            // Fails only while the thread is being torn down; nothing to note then.
            let _ = LAST_PANIC.try_with(|n| n.set(Some(noted)));
        }
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("unnamed");
        let location = location.as_deref().unwrap_or("unknown");
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            tracing::error!(thread, location, "panic: {message}\n{backtrace}");
        } else {
            tracing::error!(thread, location, "panic: {message}");
        }
    }));
}

/// How far one call of the current turn got.
#[derive(Debug, Clone)]
enum Progress {
    /// `tool_requested` is recorded; the call has not been handed to its tool.
    Requested(Instant),
    /// Handed to its tool: it may have run, in part or whole.
    Started(Instant),
    /// Answered (its `tool_finished` is recorded) with this result.
    Answered {
        /// The `tool_result` content.
        content: String,
        /// Whether it is an error.
        is_error: bool,
    },
}

/// How far each call of the current turn got, by `tool_use` id. Written by
/// `calls::execute_calls`, read after a panic; cleared at the start of every turn.
/// The lock is held for one map operation, never across an await.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    calls: Mutex<HashMap<String, Progress>>,
}

impl Ledger {
    fn set(&self, id: &str, progress: Progress) {
        // A poisoned lock only means a panic elsewhere; the map is still whole.
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.insert(id.to_string(), progress);
    }

    fn get(&self, id: &str) -> Option<Progress> {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.get(id).cloned()
    }

    /// Forgets the previous turn's calls (ids may repeat across turns).
    pub(super) fn clear(&self) {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The call's `tool_requested` is recorded.
    pub(super) fn requested(&self, id: &str) {
        self.set(id, Progress::Requested(Instant::now()));
    }

    /// The call is being handed to its tool.
    pub(super) fn started(&self, id: &str) {
        self.set(id, Progress::Started(Instant::now()));
    }

    /// The call is answered and its `tool_finished` recorded.
    pub(super) fn answered(&self, id: &str, result: &ToolResult) {
        self.set(
            id,
            Progress::Answered {
                content: result.content.clone(),
                is_error: result.is_error,
            },
        );
    }
}

/// Answer to a call a panic stopped before it was handed to its tool.
pub(super) const NOT_EXECUTED: &str = "not executed: internal error: the task ended before \
this call ran, so nothing was done for it";

/// Answer to a call a panic stopped while it was being run (docs/operating.md, resume wording).
pub(super) const STATE_UNKNOWN: &str = "state unknown: an internal error ended the task while \
this call was being run; it may have run in part; check before repeating it";

/// Answers, in order, every call a panic left open, and closes each one the log left
/// open with a `tool_finished` (recording its `tool_requested` first if it had none),
/// so both the transcript and the log stay complete.
pub(super) async fn answer_open_calls(
    env: &TaskEnv,
    task_id: &str,
    uses: &[ToolUse],
    ledger: &Ledger,
) -> Result<Vec<Block>, EventError> {
    let mut blocks = Vec::with_capacity(uses.len());
    for ToolUse { id, name, input } in uses {
        let (message, since) = match ledger.get(id) {
            Some(Progress::Answered { content, is_error }) => {
                blocks.push(Block::tool_result(id, &content, is_error));
                continue;
            }
            Some(Progress::Started(at)) => (STATE_UNKNOWN, at),
            Some(Progress::Requested(at)) => (NOT_EXECUTED, at),
            None => {
                env.services
                    .events
                    .record(Some(task_id), Event::tool_requested(id, name, input))
                    .await?;
                (NOT_EXECUTED, Instant::now())
            }
        };
        let result = ToolResult::error(message);
        calls::finished(env, task_id, id, name, &result, since.elapsed(), None).await?;
        blocks.push(Block::tool_result(id, &result.content, true));
    }
    Ok(blocks)
}

/// Answer to a call the resumed transcript left open when the log shows it allowed to
/// run but not finished (docs/operating.md, Resume): it may have run, in part or whole.
pub(super) const RESUME_STATE_UNKNOWN: &str = "state unknown: it may have run in part; check \
before repeating it (the task was interrupted while this call was being run)";

/// Answer to a call the resumed transcript left open when the log shows it never
/// allowed to run.
pub(super) const RESUME_NOT_EXECUTED: &str = "not executed: the task was interrupted before \
this call ran; request it again if it is still needed";

/// Answers, in order, the calls a resumed transcript left open, each as far as the
/// audit log shows it got (`trails`; an unreadable log counts every call as possibly
/// run, since "not executed" must never be said of a call that may have run). A call
/// the log left open is closed with a `tool_finished` (and its `tool_requested` first
/// if it had none); one the log already closed gets no second `tool_finished`.
///
/// A `delegate` call that may have run, whose child had not ended, is not guessed
/// at: the child is continued ([`super::delegate::continue_open`]) and its outcome
/// is the call's answer; one whose child had ended is answered with the child's
/// answer, and what the child spent counts for the task.
pub(super) async fn answer_resumed_calls(
    env: &TaskEnv,
    task_id: &str,
    loaded: &crate::config::Loaded,
    uses: &[ToolUse],
    trails: Result<HashMap<String, CallTrail>, TrailError>,
) -> Result<Vec<Block>, EventError> {
    let trails = trails.unwrap_or_else(|e| {
        tracing::warn!("task {task_id}: {e}; its open calls are answered \"state unknown\"");
        HashMap::new()
    });
    let mut blocks = Vec::with_capacity(uses.len());
    for ToolUse { id, name, input } in uses {
        let trail = trails.get(id).cloned().unwrap_or(CallTrail::MayHaveRun);
        if trail == CallTrail::MayHaveRun
            && let Some(result) =
                super::delegate::continue_open(env, task_id, loaded, name, id).await?
        {
            let zero = std::time::Duration::ZERO;
            calls::finished(env, task_id, id, name, &result, zero, None).await?;
            blocks.push(Block::tool_result(id, &result.content, result.is_error));
            continue;
        }
        if let CallTrail::Finished { ran: true, .. } = trail
            && let Some(result) = super::delegate::ended_child(env, task_id, loaded, name, id).await
        {
            blocks.push(Block::tool_result(id, &result.content, result.is_error));
            continue;
        }
        let (message, close) = match trail {
            CallTrail::Absent => {
                env.services
                    .events
                    .record(Some(task_id), Event::tool_requested(id, name, input))
                    .await?;
                (RESUME_NOT_EXECUTED.to_string(), true)
            }
            CallTrail::Requested => (RESUME_NOT_EXECUTED.to_string(), true),
            CallTrail::MayHaveRun => (RESUME_STATE_UNKNOWN.to_string(), true),
            CallTrail::Finished { ran: false, .. } => (RESUME_NOT_EXECUTED.to_string(), false),
            CallTrail::Finished {
                ran: true,
                exit_code,
            } => (ran_but_lost(exit_code), false),
        };
        let result = ToolResult::error(&message);
        if close {
            let zero = std::time::Duration::ZERO;
            calls::finished(env, task_id, id, name, &result, zero, None).await?;
        }
        blocks.push(Block::tool_result(id, &result.content, true));
    }
    Ok(blocks)
}

/// Answer to a call the log shows finished whose result the transcript lost.
pub(super) fn ran_but_lost(exit_code: Option<i32>) -> String {
    let how = exit_code.map_or(String::new(), |c| format!(" (exit code {c})"));
    format!(
        "state unknown: this call ran{how} but its result was lost when the task was \
         interrupted; check its effects before repeating it"
    )
}

/// The test-only switch: `HARNESSD_TEST_PANIC_ON_TOOL=<tool>` makes a call of `<tool>`
/// panic just before it is dispatched to its tool; `<tool>:policy` makes it panic where
/// the policy judges it (where the shell splitter once panicked on `ls \``). It exists
/// so the integration tests can drive a real panic through the real binary, and only
/// in builds with debug assertions (`cargo test`, `cargo build`): in a release build
/// [`fault_point`] is empty and the variable is never read. It is the one environment
/// variable read below `main` outside config, for that reason. Tool processes never see
/// the daemon's environment, so a model cannot set it.
#[cfg(debug_assertions)]
pub(super) const TEST_PANIC_VAR: &str = "HARNESSD_TEST_PANIC_ON_TOOL";

/// Where a call can be made to panic by the test-only switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FaultPoint {
    /// Where the policy judges the call.
    Policy,
    /// Just before the call is dispatched to its tool.
    Dispatch,
}

/// Panics if `HARNESSD_TEST_PANIC_ON_TOOL` names this tool and point.
#[cfg(debug_assertions)]
#[track_caller] // the panic names the call site in `calls.rs`, as a real one would
pub(super) fn fault_point(tool: &str, at: FaultPoint) {
    let Ok(spec) = std::env::var(TEST_PANIC_VAR) else {
        return;
    };
    let (name, point) = match spec.split_once(':') {
        Some((name, "policy")) => (name, FaultPoint::Policy),
        _ => (spec.as_str(), FaultPoint::Dispatch),
    };
    if name == tool && point == at {
        panic!("test panic injected by {TEST_PANIC_VAR}={spec}");
    }
}

/// Release builds: no switch, nothing read.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(super) fn fault_point(_tool: &str, _at: FaultPoint) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn catch_returns_the_panic_message() {
        let caught = catch(async { panic!("boom \u{1b}[2K{}", 7) }).await;
        let panic = caught.unwrap_err();
        assert_eq!(panic.message, "boom \\x1b[2K7");
        assert!(panic.to_string().starts_with("internal error: panic"));
        assert_eq!(catch(async { 5 }).await, Ok(5));
    }

    #[test]
    fn a_long_panic_message_is_cut_like_an_event_field() {
        let panic = Panic::caught(&"x".repeat(10_000));
        assert!(panic.message.chars().count() < MAX_FIELD_CHARS + 40);
        assert!(panic.message.contains("chars omitted"));
    }

    #[test]
    fn bidi_overrides_are_escaped() {
        assert_eq!(clean("a\u{202e}b"), "a\\u202eb");
    }

    #[test]
    fn the_ledger_keeps_the_last_progress_of_a_call() {
        let ledger = Ledger::default();
        ledger.requested("a");
        ledger.started("a");
        assert!(matches!(ledger.get("a"), Some(Progress::Started(_))));
        ledger.answered("a", &ToolResult::error("e"));
        assert!(matches!(
            ledger.get("a"),
            Some(Progress::Answered { is_error: true, .. })
        ));
        ledger.clear();
        assert!(ledger.get("a").is_none());
    }
}
