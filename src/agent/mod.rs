//! The turn loop: send system + tools + the whole history, run the tool calls the
//! model asks for, send every result back in one user message, repeat until the
//! model ends its turn or a limit stops the task (docs/operating.md).
//!
//! The loop owns the history and its invariants (every `tool_use` answered exactly
//! once, in order; the assistant message appended exactly as received). It never
//! touches the filesystem for a tool: calls go through `calls` to the executor.
//! [`run_task`] runs the task behind `guard`: a panic ends that task with `error`,
//! never its caller or the process.
//!
//! This file holds the public API and the loop's top level; each step lives in
//! its own file: `resume` (where a task starts from), `turn` (one request, its
//! response and its calls), `request` (the Messages request of a config
//! snapshot), `limits` (turns, budgets, no progress), `calls` (one turn's tool
//! calls), `compact` (context compaction), `finish` (the task's end) and `guard`
//! (panics).

mod calls;
mod compact;
mod delegate;
mod finish;
mod guard;
mod hooks;
mod limits;
mod mcp_calls;
pub mod reconcile;
mod request;
mod resume;
mod transcript;
mod turn;

use crate::protocol::Source;
pub use crate::protocol::{StopReason, TaskStatus};
pub use calls::advertised;
pub use delegate::{Delegates, Tree};
pub use guard::install_panic_hook;
pub use resume::queued_transcript;
pub use transcript::{
    LockError, RunLock, SaveInFlight, Spent, Transcript, TranscriptHead, TurnRecord, Unsaved,
    prompt_head_of,
};
pub use turn::SUMMARY_REQUEST;

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::approval::Approver;
use crate::config::{ConfigSource, Loaded};
use crate::events::{Event, EventError, EventLog};
use crate::exec::Executor;
use crate::llm::{AnthropicClient, Block, Hold, Message, Role, ToolUse, Usage};

/// The services every task shares: `run` builds one for its task, the daemon's
/// scheduler keeps one and gives each task a [`TaskEnv`] of its own. Cheap to clone.
#[derive(Clone)]
pub struct TaskServices {
    /// Config and policy in force: read once at the start of each turn (and by
    /// each tool call for its policy), so a reload applies from the next turn.
    pub config: Arc<dyn ConfigSource>,
    /// The model client.
    pub client: AnthropicClient,
    /// The audit log.
    pub events: EventLog,
    /// Spawns tool processes.
    pub executor: Executor,
    /// Answers `ask` calls.
    pub approver: Arc<dyn Approver>,
    /// Receives the model's text as it streams, as `{"type": "text_delta",
    /// "task_id", "turn", "text"}` values (not audit events); sent by the loop,
    /// received by `run`'s progress printer. `None`: nobody watches.
    pub live_text: Option<tokio::sync::mpsc::UnboundedSender<Value>>,
    /// Transcripts whose last save failed, kept whole until a save succeeds (see
    /// [`Unsaved`]).
    pub unsaved: Unsaved,
    /// MCP servers: the pins, the launcher, the daemon's shared servers.
    pub mcp: crate::mcp::Hub,
    /// Trace export: each run's root span is opened here, before its first record.
    pub telemetry: crate::telemetry::Telemetry,
    /// The child tasks running now, so one can be cancelled on its own.
    pub delegates: Delegates,
}

impl TaskServices {
    /// The environment of one task, stopped by `cancel`.
    pub fn for_task(&self, cancel: CancellationToken) -> TaskEnv {
        TaskEnv {
            services: self.clone(),
            cancel,
            stopping: CancellationToken::new(),
            spool_used: Arc::default(),
            mcp: self.mcp.for_task(),
            tree: Tree::root(),
        }
    }
}

impl TaskEnv {
    /// The same environment, where a cancellation that comes with `stopping`
    /// cancelled (the daemon's shutdown, past its grace) leaves the task
    /// `interrupted`, to be resumed, instead of ending it `cancelled`.
    pub fn stopped_by(self, stopping: CancellationToken) -> TaskEnv {
        TaskEnv { stopping, ..self }
    }
}

/// What a task runs with: the shared services and its own cancellation.
pub struct TaskEnv {
    /// The services shared with every other task.
    pub services: TaskServices,
    /// Cancels this task: its model request and its tools' process trees.
    pub cancel: CancellationToken,
    /// Cancelled when the daemon stops ([`TaskEnv::stopped_by`]); never for `run`.
    pub stopping: CancellationToken,
    /// Bytes of tool output this task keeps on disk, against
    /// `output.max_spool_mb`: drawn by every call (concurrent ones too, through
    /// clones of the one counter), so the budget spans the task's turns. A resumed
    /// task starts from what its directory already holds.
    pub spool_used: Arc<std::sync::atomic::AtomicU64>,
    /// The MCP servers this task started: stopped when the task's environment is
    /// dropped (its end).
    pub mcp: crate::mcp::TaskServers,
    /// The task's place in its tree of delegation: what the whole tree spent, what
    /// its own children spent, the tools it is narrowed to.
    pub tree: Tree,
}

/// A task to run.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// The task's id, from [`new_task_id`] or the resumed transcript.
    pub task_id: String,
    /// What the user asked; unused when resuming.
    pub prompt: String,
    /// Overrides `loop.max_turns`.
    pub max_turns: Option<u32>,
    /// `cli` or `api`.
    pub source: Source,
    /// Who asked for this run (submit or resume): `uid:N (name)` or `cli`.
    pub by: String,
    /// Continue this transcript instead of starting from `prompt`; a transcript
    /// still `queued` (see [`queued_transcript`]) is started as a new task instead.
    pub resume: Option<Transcript>,
    /// A resume whose `task_resumed` is already on the record: the daemon writes
    /// (and syncs) it before answering 202, so the run does not write it again.
    pub resume_recorded: bool,
}

/// How a task ended.
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// The answer (the last assistant message's text).
    pub answer: String,
    /// Model requests made, resumed ones included.
    pub turns: u32,
    /// Tokens summed over the task's requests.
    pub usage: Usage,
    /// The task's cost in US dollars; `None` when unknown.
    pub usd: Option<f64>,
    /// The error, when stop_reason is `error`.
    pub error: Option<String>,
    /// Stopped by the daemon's shutdown (`stop_reason` is then `cancelled`): the
    /// transcript is saved `interrupted` and `task_interrupted` recorded instead of
    /// `task_finished`, so `resume` continues it.
    pub interrupted: bool,
}

/// A new task id: time-ordered and unique enough for one root.
pub fn new_task_id() -> String {
    let now = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    format!("t-{now}-{:06x}", fastrand::u32(..0x100_0000))
}

/// Why the loop stops: the task ends, or the audit log failed. One type, so `?`
/// carries either out of any step of a turn.
enum Halt {
    /// The task stops: why, and for `error`, the error.
    Stop(StopReason, Option<String>),
    /// The audit log failed: nothing more may happen unrecorded.
    Log(EventError),
}

impl Halt {
    /// The task stops for `reason`, which is not an error.
    fn stop(reason: StopReason) -> Halt {
        Halt::Stop(reason, None)
    }
}

impl From<EventError> for Halt {
    fn from(e: EventError) -> Halt {
        Halt::Log(e)
    }
}

/// Mutable state of a running task. It lives outside the guarded future, so after a
/// panic the transcript and the ledger are still here to finish the task with.
struct TaskRun<'a> {
    env: &'a TaskEnv,
    spec: &'a TaskSpec,
    /// The config snapshot of the current turn (of the task's start before the
    /// first): every step of one turn reads this one, never the live config.
    loaded: Arc<Loaded>,
    transcript: Transcript,
    turn: u32,
    started: Instant,
    /// How far the current turn's calls got; read only after a panic.
    ledger: guard::Ledger,
    /// Input tokens of the last response, when over
    /// `context.compress_threshold_tokens`: compact before the next request.
    compact_due: Option<u64>,
    /// Every `tool_use` id of the task so far: the history it started from and each
    /// response since. Kept apart from the messages so a compaction that summarises
    /// old turns away does not make their ids usable again.
    used_ids: std::collections::HashSet<String>,
    /// The last response's share of the memory budget (`daemon.memory_mb`), kept
    /// until the transcript holding it is saved (its copies are made by then), and
    /// never while another request waits for room: dropped before each send.
    hold: Hold,
    /// The skills and `AGENTS.md` read at this run's start: the system prompt's
    /// additions and what `load_skill` answers from, whatever the files do later.
    knowledge: Arc<crate::knowledge::Knowledge>,
    /// The save started after a turn's calls ([`TaskRun::save_soon`]), still being
    /// written while the next request goes out; every later save waits for it
    /// first, so saves land in order and none is lost unnoticed.
    saving: Option<SaveInFlight>,
}

impl TaskRun<'_> {
    /// Waits for the save in flight, if any; `Err` is why it failed (logged here).
    /// A failure leaves the transcript kept to be saved again.
    async fn settle_save(&mut self) -> Result<(), String> {
        let Some(saving) = self.saving.take() else {
            return Ok(());
        };
        saving.finished(&self.transcript).await.map_err(|e| {
            tracing::error!("cannot save transcript {}: {e}", self.spec.task_id);
            format!("cannot save the transcript: {e}")
        })
    }

    /// Saves the transcript; `Err` is why it could not be saved (also logged).
    /// A failed save in flight before it does not count once this one, which
    /// holds everything that one did, is on disk.
    async fn save(&mut self) -> Result<(), String> {
        let _ = self.settle_save().await;
        let dir = self.loaded.paths.transcripts.clone();
        let unsaved = &self.env.services.unsaved;
        // Owed from here until settled, so no checkpoint is written in between; a
        // failure keeps the transcript (it disagrees with the log until a save
        // succeeds: the daemon saves it again once the disk takes it).
        let saved = match unsaved.start_save(&self.transcript, dir) {
            Ok(saving) => saving.finished(&self.transcript).await,
            Err(e) => {
                unsaved.keep(&self.transcript);
                Err(e)
            }
        };
        match saved {
            Ok(()) => {
                unsaved.forget(&self.spec.task_id);
                Ok(())
            }
            Err(e) => {
                tracing::error!("cannot save transcript {}: {e}", self.spec.task_id);
                Err(format!("cannot save the transcript: {e}"))
            }
        }
    }

    /// Saves the transcript where the task cannot go on without it: on failure the
    /// task stops with `error` (its pending calls, if any, answered unexecuted), since
    /// nothing may happen that a resume could not see.
    async fn save_or_stop(&mut self, pending: &[ToolUse]) -> Result<(), Halt> {
        let saved = self.save().await;
        self.hold = Hold::default();
        let Err(error) = saved else {
            return Ok(());
        };
        self.stop_unsaved(pending, error).await
    }

    /// Waits for the save in flight before anything of a new response happens:
    /// if it failed, the task stops with `error` as if the save had been waited
    /// for, `pending` (the response's calls) answered unexecuted. What the failed
    /// save held is in the log and in the transcript kept in memory.
    async fn settle_or_stop(&mut self, pending: &[ToolUse]) -> Result<(), Halt> {
        match self.settle_save().await {
            Ok(()) => Ok(()),
            Err(error) => self.stop_unsaved(pending, error).await,
        }
    }

    /// The task stops with `error` because its transcript could not be saved.
    async fn stop_unsaved(&mut self, pending: &[ToolUse], error: String) -> Result<(), Halt> {
        if !pending.is_empty() {
            let why = "not executed: the task's transcript could not be saved, so the task \
                       stops here";
            self.unexecuted(pending, why).await?;
        }
        Err(Halt::Stop(StopReason::Error, Some(error)))
    }

    /// Starts a save that the task may go on without (after a turn's calls: its
    /// next request does not wait for the disk). Nothing is lost if it fails: the
    /// next save, which every call waits for ([`TaskRun::save_or_stop`]), holds it
    /// all, and a crash before then leaves calls whose results the log has, which
    /// the next start brings into the transcript. If the save before it failed,
    /// this one is made in full and the task stops if it fails too.
    async fn save_soon(&mut self) -> Result<(), Halt> {
        if self.settle_save().await.is_err() {
            return self.save_or_stop(&[]).await;
        }
        let dir = self.loaded.paths.transcripts.clone();
        match self.env.services.unsaved.start_save(&self.transcript, dir) {
            Ok(saving) => self.saving = Some(saving),
            Err(_) => return self.save_or_stop(&[]).await,
        }
        self.hold = Hold::default();
        Ok(())
    }

    /// Records `event` as this task's.
    fn record(&self, event: Event) -> impl Future<Output = Result<u64, EventError>> + '_ {
        self.env
            .services
            .events
            .record(Some(&self.spec.task_id), event)
    }

    /// Appends a user message with the given blocks.
    fn push_user(&mut self, blocks: Vec<Block>) {
        self.transcript.messages.push(Message::user(blocks));
    }

    /// Answers every call of `uses` with `why`, unexecuted, in one user message.
    async fn unexecuted(&mut self, uses: &[ToolUse], why: &str) -> Result<(), EventError> {
        let blocks = calls::answer_unexecuted(self.env, &self.spec.task_id, uses, why).await?;
        self.push_user(blocks);
        Ok(())
    }

    /// Everything from the task's first event to its stop.
    async fn drive(&mut self) -> Halt {
        if let Err(halt) = self.start().await {
            return halt;
        }
        let mut repeats = limits::Repeats::default();
        loop {
            if let Err(halt) = self.turn(&mut repeats).await {
                return halt;
            }
        }
    }
}

/// What the run starts knowing — the root's skills (when `load_skill` is offered)
/// and the workspace's `AGENTS.md` — read on a blocking thread, through the
/// knowledge module: the loop reads no tool's files itself.
async fn read_knowledge(loaded: &Loaded) -> crate::knowledge::Knowledge {
    let (root, workspace) = (loaded.paths.root.clone(), loaded.paths.workspace.clone());
    let with_skills = advertised(loaded, crate::tools::ToolName::LoadSkill);
    tokio::task::spawn_blocking(move || {
        crate::knowledge::Knowledge::load(&root, &workspace, with_skills)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Runs one task to its end, recording everything. The transcript is saved after
/// every turn and at the end, whatever the ending.
///
/// This is the task guard, for `run` and the daemon alike: a panic anywhere in the task
/// ends it with `error`, its open calls answered and `task_finished` recorded, and is
/// never passed on to the caller. `Err` means only that the audit log failed.
pub async fn run_task(env: &TaskEnv, spec: &TaskSpec) -> Result<TaskOutcome, EventError> {
    let loaded = env.services.config.current();
    let transcript = resume::initial_transcript(&loaded, spec);
    // What the task spent before this run (its children's included) counts
    // against the budgets of its tree from the start.
    env.tree.spend(&transcript.usage, transcript.usd);
    // The budget counts what the task keeps on disk: a resumed task's earlier
    // output files count too.
    let output_dir = loaded.paths.transcripts.join(&spec.task_id);
    env.spool_used.store(
        crate::tools::kept_output_bytes(&output_dir),
        std::sync::atomic::Ordering::SeqCst,
    );
    // A resumed task's history counts: its ids were used too.
    let used_ids = transcript
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(Message::answerable_tool_uses)
        .map(|u| u.id)
        .collect();
    let knowledge = Arc::new(read_knowledge(&loaded).await);
    let mut run = TaskRun {
        env,
        spec,
        knowledge,
        loaded,
        turn: transcript.turns.len() as u32,
        transcript,
        started: Instant::now(),
        ledger: guard::Ledger::default(),
        compact_due: None,
        used_ids,
        hold: Hold::default(),
        saving: None,
    };
    let (reason, error, panic) = match guard::catch(run.drive()).await {
        Ok(Halt::Stop(reason, error)) => (reason, error, None),
        Ok(Halt::Log(e)) => {
            // The audit log failed: nothing more may happen unrecorded, but the
            // end itself is still worth a try: a full disk gives up its reserve for
            // exactly this line (docs/events.md). If it fails too, the caller owes it.
            let error = e.to_string();
            return match run.finish(StopReason::Error, Some(error)).await {
                Ok(outcome) => Ok(outcome),
                Err(_) => Err(e),
            };
        }
        Err(panic) => (StopReason::Error, Some(panic.to_string()), Some(panic)),
    };
    match guard::catch(run.conclude(reason, error, panic.is_some())).await {
        Ok(outcome) => outcome,
        Err(late) => {
            let error = match &panic {
                Some(first) => format!("{first}; then, ending the task: {late}"),
                None => late.to_string(),
            };
            run.finish_after_late_panic(error).await
        }
    }
}

#[cfg(test)]
mod tests {
    /// Each step of a turn reads the turn's one snapshot (`TaskRun::loaded`): the
    /// live config is read at the task's start, at the start of each turn, and by
    /// each call for the policy that judges it — nowhere else in the loop.
    #[test]
    fn the_live_config_is_read_once_per_turn() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/agent");
        // Split so that this test's own source does not count.
        let read = concat!(".config", ".current()");
        let mut reads: Vec<(String, usize)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                // A chain rustfmt wrapped counts too.
                let text: String = text.split_whitespace().collect();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, text.matches(read).count())
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        reads.sort();
        let expected = [("calls.rs", 1), ("mod.rs", 1), ("turn.rs", 1)];
        let expected: Vec<(String, usize)> =
            expected.iter().map(|(f, n)| (f.to_string(), *n)).collect();
        assert_eq!(reads, expected);
    }
}
