//! Running the daemon's tasks: each accepted task (or resume) is recorded and
//! saved `queued`, waits for its turn in the slot queue ([`super::scheduler`]),
//! then runs through the same loop as `harnessd run`, its changes of status filed
//! in the [`Registry`].
//!
//! One run per task: a resume first claims the task in the registry (a check and a
//! status change under one lock), and every run holds the task's [`RunLock`], which
//! also keeps other processes off its transcript. The lock is taken when the task
//! starts, once it has its slot: a queued task holds no descriptor.
//!
//! The queue is durable: a queued task (a resume too) has its `queued` transcript on
//! disk. When the daemon stops, no queued task starts ([`Scheduler::drain`]); they
//! stay queued, on disk as in the record, for the next start.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::loose_ends::Owed;
use super::registry::{ClaimError, Registry, now};
use super::scheduler::{Slot, SlotQueue, Waiter};
use super::shutdown::Shutdown;
use crate::agent::{
    LockError, RunLock, StopReason, TaskOutcome, TaskServices, TaskSpec, TaskStatus, Transcript,
    new_task_id, queued_transcript, run_task,
};
use crate::events::{Event, EventError, EventLog};
use crate::llm::Usage;
use crate::protocol::{Source, Task};

/// Why a task was not accepted; nothing was queued.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// `task_queued` could not be written.
    #[error("the audit log cannot be written, so no task is accepted: {0}")]
    Record(#[from] EventError),
    /// The task's `queued` transcript could not be saved.
    #[error("the task's transcript cannot be saved, so no task is accepted: {0}")]
    Transcript(std::io::Error),
    /// The daemon is stopping: it takes no task (a resume neither).
    #[error("the daemon is stopping, so no task is accepted; submit it again once it is back")]
    Stopping,
}

/// Why a cancel was not taken; nothing was recorded.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// `task_cancelled` could not be written.
    #[error("the audit log cannot be written, so the task is not cancelled: {0}")]
    Record(#[from] EventError),
    /// The task is not running and the daemon stops: no run is left to end it
    /// (a queued one stays queued, on disk, for the next start).
    #[error(
        "task {0} is not running and the daemon is stopping: a queued task stays queued for \
         the next start; cancel it then"
    )]
    Stopping(String),
}

/// How a queued task's wait ended.
enum Turn {
    /// It has a slot: it starts.
    Slot(Slot),
    /// Cancelled by the user while queued: it is ended (`cancelled`) at once.
    Cancelled,
    /// The daemon is stopping: it does not start and stays queued.
    Stopping,
}

/// A task claimed for a resume ([`Scheduler::claim`]): the registry shows it
/// queued, so no other resume can claim it. Hand it to [`Scheduler::resume`], or to
/// [`Scheduler::release`] if the resume does not go ahead.
pub struct Claim {
    previous: Task,
    cancel: CancellationToken,
}

/// Takes a task's run lock on a blocking thread (it creates and locks a file).
pub async fn lock_run(dir: std::path::PathBuf, task_id: String) -> Result<RunLock, LockError> {
    let path = dir.join(format!("{task_id}.lock"));
    tokio::task::spawn_blocking(move || RunLock::acquire(&dir, &task_id))
        .await
        .unwrap_or_else(|e| {
            Err(LockError::Io {
                path,
                source: std::io::Error::other(e),
            })
        })
}

/// Starts and tracks tasks.
#[derive(Clone)]
pub struct Scheduler {
    /// The registry the API reads.
    pub registry: Registry,
    /// What every task runs with; each gets its own cancellation token besides.
    services: TaskServices,
    /// `daemon.max_concurrent_tasks` slots and the tasks waiting for one; closed
    /// when the daemon stops, so that no queued task starts.
    slots: SlotQueue,
    /// The daemon's shutdown: every task run is spawned on its tracker.
    daemon: Shutdown,
    /// Every task run, waited for (within the grace) by [`Scheduler::drain`].
    running: TaskTracker,
    /// Parent of every task's cancellation token: cancelling it stops them all.
    stop_tasks: CancellationToken,
    /// Tasks whose `task_finished` the log could not take, written once it can.
    owed: Owed,
    /// Held (shared) by a submit, a resume or a cancel from its check to its
    /// effect, and (exclusively) by [`Scheduler::stop_starting`] and
    /// [`Scheduler::seal`]: once the daemon stops no task is accepted and a cancel
    /// of a queued task is refused rather than lost, and once it is sealed
    /// (`true`, just before `daemon_stopping`) none of them writes a line.
    gate: Arc<RwLock<bool>>,
}

/// Everything a scheduler needs.
pub struct SchedulerParts {
    /// What its tasks run with.
    pub services: TaskServices,
    /// The registry it records its tasks in, shared with the API and approvals.
    pub registry: Registry,
    /// The daemon's shutdown, which the task runs are spawned on.
    pub shutdown: Shutdown,
}

impl Scheduler {
    /// A scheduler with `max_concurrent_tasks` slots.
    pub fn new(parts: SchedulerParts) -> Scheduler {
        let slots = parts
            .services
            .config
            .current()
            .config
            .daemon
            .max_concurrent_tasks as usize;
        Scheduler {
            registry: parts.registry,
            services: parts.services,
            slots: SlotQueue::new(slots),
            stop_tasks: parts.shutdown.child(),
            daemon: parts.shutdown,
            running: TaskTracker::new(),
            owed: Owed::default(),
            gate: Arc::default(),
        }
    }

    /// Starts no more queued tasks (they stay queued, on disk, for the next start),
    /// lets running tasks finish within `grace`, then stops the rest, which are left
    /// `interrupted` (resumable), and waits for them.
    pub async fn drain(&self, grace: Duration) {
        self.stop_starting().await;
        self.running.close();
        if tokio::time::timeout(grace, self.running.wait())
            .await
            .is_err()
        {
            tracing::info!(
                target: crate::text::NOTICE,
                "grace period over: interrupting running tasks (resume continues them)"
            );
            self.stop_tasks.cancel();
            self.running.wait().await;
        }
        let queued = self
            .registry
            .counts()
            .get(TaskStatus::Queued.as_str())
            .copied()
            .unwrap_or(0);
        if queued > 0 {
            tracing::info!(
                target: crate::text::NOTICE,
                "harnessd: {queued} queued task(s) stay queued for the next start"
            );
        }
    }

    /// Queues a new task (with `model`, `api.model` is overridden for it alone);
    /// returns its id once the task is on disk: `task_queued`
    /// recorded and its `queued` transcript saved, so it survives a crash (the next
    /// start queues it again, [`Scheduler::requeue`]). `Err`: one of the two could
    /// not be written, and nothing was queued.
    pub async fn submit(
        &self,
        prompt: String,
        max_turns: Option<u32>,
        model: Option<String>,
        by: String,
        traceparent: Option<String>,
    ) -> Result<String, SubmitError> {
        // Held until the task is queued: the queue does not close in between.
        let _open = self.gate.read().await;
        if self.stopping() {
            return Err(SubmitError::Stopping);
        }
        let mut spec = TaskSpec {
            task_id: new_task_id(),
            prompt,
            max_turns,
            source: Source::Api,
            by: by.clone(),
            resume: None,
            resume_recorded: false,
        };
        // Recorded (and synced) before the task exists anywhere: a task the log
        // cannot hold is refused, never accepted and lost.
        let queued = Event::TaskQueued {
            prompt: spec.prompt.clone(),
            source: spec.source,
            by: by.clone(),
        };
        if let Err(e) = self
            .services
            .events
            .record(Some(&spec.task_id), queued)
            .await
        {
            // The line may be in the file all the same (written, then its sync
            // failed): it is closed too, now if the log takes it, else at the start's
            // check of open tasks. A failed write left no line to close.
            if e.line_may_remain() {
                self.not_accepted(&spec.task_id, format!("the audit log failed: {e}"))
                    .await;
            }
            return Err(e.into());
        }
        let loaded = self.services.config.current();
        let model = model.unwrap_or_else(|| loaded.config.api.model.clone());
        let transcript = Transcript {
            traceparent,
            ..queued_transcript(&spec, model, by)
        };
        if let Err(e) = transcript
            .save_async(loaded.paths.transcripts.clone())
            .await
        {
            self.not_accepted(
                &spec.task_id,
                format!("the task's transcript cannot be saved: {e}"),
            )
            .await;
            return Err(SubmitError::Transcript(e));
        }
        // The log takes lines again: tasks that ended while it could not get their
        // `task_finished` now.
        self.owed
            .settle(&loaded.paths.transcripts, &self.services.events)
            .await;
        // Started from the transcript just saved, so the registry, the file and the
        // run agree on `created`; a `queued` transcript starts as a new task.
        spec.resume = Some(transcript);
        Ok(self.start(spec))
    }

    /// Closes the record of a task whose `task_queued` (or a resume's
    /// `task_resumed`) may be on the log although it was not accepted (its
    /// transcript could not be saved, or the line's sync failed): the log says it
    /// ended (with `error`, naming `why`) rather than leaving it open forever.
    async fn not_accepted(&self, task_id: &str, why: String) {
        let error = format!("not accepted: {why}");
        let event = Event::TaskFinished {
            stop_reason: StopReason::Error,
            turns: 0,
            usage: Usage::default(),
            usd: Some(0.0),
            duration_ms: 0,
            error: Some(error.clone()),
        };
        if self
            .services
            .events
            .record(Some(task_id), event)
            .await
            .is_err()
        {
            // Written once the log takes lines again, so a clean stop still leaves
            // nothing open behind it.
            self.owed.push(task_id, error);
        }
    }

    /// Queues again the tasks a previous daemon accepted and never started (their
    /// transcripts still `queued`), oldest first by `created`, each with a
    /// `task_requeued` event; returns how many. They then run as new tasks, or, a
    /// resume that was still queued, continue as that resume.
    pub async fn requeue(&self, mut queued: Vec<Transcript>) -> Result<usize, EventError> {
        queued.sort_by(|a, b| a.created.cmp(&b.created).then(a.task_id.cmp(&b.task_id)));
        let n = queued.len();
        for t in queued {
            self.services
                .events
                .record(
                    Some(&t.task_id),
                    Event::TaskRequeued {
                        created: t.created.clone(),
                    },
                )
                .await?;
            let spec = TaskSpec {
                task_id: t.task_id.clone(),
                // The prompt is the first user message (see `queued_transcript`).
                prompt: t.messages.first().map(|m| m.text()).unwrap_or_default(),
                max_turns: t.max_turns,
                source: t.source.unwrap_or(Source::Api),
                by: t.by.clone().unwrap_or_else(|| "unknown".into()),
                // A queued resume's `task_resumed` is on the record already.
                resume_recorded: t.resume_queued,
                resume: Some(t),
            };
            self.start(spec);
        }
        Ok(n)
    }

    /// Writes the `task_finished` lines the log refused earlier, if it takes them
    /// now.
    pub async fn settle_owed(&self) {
        let dir = self.services.config.current().paths.transcripts.clone();
        self.owed.settle(&dir, &self.services.events).await;
    }

    /// The transcripts whose save failed, to be saved again.
    pub fn unsaved(&self) -> &crate::agent::Unsaved {
        &self.services.unsaved
    }

    /// The audit log the tasks write to.
    pub fn events(&self) -> &EventLog {
        &self.services.events
    }

    /// Claims task `id` for a resume (see [`Claim`]).
    pub fn claim(&self, id: &str) -> Result<Claim, ClaimError> {
        if let Some(parent) = crate::protocol::tree::parent_task_id(id) {
            return Err(ClaimError::Child {
                task_id: id.to_string(),
                parent: parent.to_string(),
            });
        }
        let cancel = self.stop_tasks.child_token();
        let previous = self.registry.claim(id, cancel.clone())?;
        Ok(Claim { previous, cancel })
    }

    /// Gives up a claim: the task is as it was before it.
    pub fn release(&self, claim: Claim) {
        self.registry.restore(claim.previous);
    }

    /// Queues a claimed task to continue from its transcript, once its
    /// `task_resumed` is on the record (synced, with `audit.sync = "before_action"`)
    /// and the transcript is saved `queued` for the resume: like a new task, a
    /// resume accepted survives a crash or a stop and runs at the next start. `lock`
    /// is the run lock the caller read the transcript under; it is let go once the
    /// transcript is saved (a queued task holds no descriptor), and the run takes it
    /// again when it starts. `Err`: the line or the transcript could not be written;
    /// the claim is given up and nothing runs.
    /// `by` is who asked, recorded in `task_resumed`.
    pub async fn resume(
        &self,
        claim: Claim,
        mut transcript: Transcript,
        lock: RunLock,
        by: String,
    ) -> Result<String, SubmitError> {
        let _open = self.gate.read().await;
        if self.stopping() {
            self.release(claim);
            return Err(SubmitError::Stopping);
        }
        // The run's span opens at acceptance, so `task_resumed` can name its trace.
        let trace_id = self
            .services
            .telemetry
            .begin_task(
                &transcript.task_id,
                &transcript.model,
                transcript.traceparent.as_deref(),
            )
            .map(|t| t.trace_id);
        let event = Event::TaskResumed {
            turns_so_far: transcript.turns.len() as u32,
            source: Source::Api,
            by: by.clone(),
            trace_id,
        };
        if let Err(e) = self
            .services
            .events
            .record(Some(&transcript.task_id), event)
            .await
        {
            self.release(claim);
            // A line written but not synced may stay: the refused resume is closed.
            if e.line_may_remain() {
                let why = format!("the resume was refused: the audit log failed: {e}");
                self.not_accepted(&transcript.task_id, why).await;
            }
            return Err(e.into());
        }
        transcript.status = TaskStatus::Queued;
        transcript.resume_queued = true;
        transcript.stop_reason = None;
        transcript.answer = None;
        transcript.error = None;
        let dir = self.services.config.current().paths.transcripts.clone();
        if let Err(e) = transcript.save_async(dir).await {
            self.release(claim);
            let why = format!("the resume was refused: its transcript cannot be saved: {e}");
            self.not_accepted(&transcript.task_id, why).await;
            return Err(SubmitError::Transcript(e));
        }
        drop(lock);
        let spec = TaskSpec {
            task_id: transcript.task_id.clone(),
            prompt: String::new(),
            max_turns: None,
            source: Source::Api,
            by,
            resume: Some(transcript),
            resume_recorded: true,
        };
        let id = spec.task_id.clone();
        self.enqueue(spec, claim.cancel);
        Ok(id)
    }

    /// Starts no more queued tasks: the daemon stops. Those waiting stay queued,
    /// with nothing recorded and their transcripts `queued`, for the next start to
    /// queue again; the running ones go on (the caller gives them their grace).
    async fn stop_starting(&self) {
        let _closing = self.gate.write().await;
        self.slots.close();
    }

    /// Refuses every submit, resume and cancel from now on, once those under way
    /// are done, so that none writes a line after `daemon_stopping`.
    pub async fn seal(&self) {
        *self.gate.write().await = true;
    }

    /// Cancels task `id` once its `task_cancelled` (naming `by`) is on the record;
    /// the task as it is now (`None`: no such task). A queued task is refused
    /// once the daemon stops: its run has returned and it stays queued on disk, so
    /// a cancel answered then would be lost and the task run after the next start.
    pub async fn cancel(&self, id: &str, by: String) -> Result<Option<Task>, CancelError> {
        let sealed = self.gate.read().await;
        let runs = self.registry.get(id).is_some_and(|t| {
            matches!(t.status, TaskStatus::Running | TaskStatus::AwaitingApproval)
        });
        if *sealed || (self.stopping() && !runs) {
            return Err(CancelError::Stopping(id.to_string()));
        }
        self.services
            .events
            .record(Some(id), Event::TaskCancelled { by })
            .await?;
        // A child's run is its parent's: its token is kept by the loop.
        self.services.delegates.cancel(id);
        Ok(self.registry.cancel(id))
    }

    /// Whether the daemon is stopping ([`Scheduler::stop_starting`]).
    fn stopping(&self) -> bool {
        self.slots.is_closed()
    }

    /// Puts a task at the back of the slot queue, in the caller's order (the
    /// requeued ones oldest first), and spawns its run, which waits for its turn.
    fn enqueue(&self, spec: TaskSpec, cancel: CancellationToken) {
        // Refused once the daemon stops: the waiter is told at once, and the task
        // stays queued.
        let turn = self.slots.join();
        let this = self.clone();
        let run = self
            .running
            .track_future(async move { this.run(spec, cancel, turn).await });
        self.daemon.spawn(run);
    }

    fn start(&self, spec: TaskSpec) -> String {
        let id = spec.task_id.clone();
        let cancel = self.stop_tasks.child_token();
        let created = spec
            .resume
            .as_ref()
            .map(|t| t.created.clone())
            .unwrap_or_else(now);
        self.registry.insert(
            Task {
                task_id: id.clone(),
                status: TaskStatus::Queued,
                stop_reason: None,
                usage: spec.resume.as_ref().map(|t| t.usage).unwrap_or_default(),
                prompt: Task::prompt_start(&spec.prompt).or_else(|| {
                    // A resumed or queued task: its prompt is its first message.
                    let t = spec.resume.as_ref()?;
                    Task::prompt_start(&t.messages.first()?.text())
                }),
                usd: spec.resume.as_ref().map_or(Some(0.0), |t| t.usd),
                answer: None,
                error: None,
                parent_task_id: None,
                created,
                updated: now(),
            },
            cancel.clone(),
        );
        self.enqueue(spec, cancel);
        id
    }

    /// Waits for the task's turn in the slot queue.
    async fn wait_turn(&self, turn: Waiter, cancel: &CancellationToken) -> Turn {
        let permit = tokio::select! {
            // Err: the queue was closed before this task's turn, the daemon stops.
            p = turn => p.ok(),
            () = cancel.cancelled() => None,
        };
        // A user's cancel, taken before the queue closed ([`Scheduler::cancel`]),
        // ends the task even if the daemon now stops. The daemon's cancellation of
        // every task, past the grace, reaches the queued ones too, but they are not
        // the user's to end.
        if cancel.is_cancelled() && !self.stop_tasks.is_cancelled() {
            return Turn::Cancelled;
        }
        match permit {
            // A slot handed out just as the daemon began to stop is not used.
            Some(permit) if !self.stopping() => Turn::Slot(permit),
            _ => Turn::Stopping,
        }
    }

    /// Runs a task once it has its slot (or was cancelled while queued), under its
    /// run lock, taken only then: a queued task holds no descriptor. A task still
    /// queued when the daemon stops does not start and leaves no record.
    async fn run(self, spec: TaskSpec, cancel: CancellationToken, turn: Waiter) {
        let id = spec.task_id.clone();
        let permit = match self.wait_turn(turn, &cancel).await {
            Turn::Slot(permit) => Some(permit),
            // Cancelled while queued (no permit): run_task still records the task and
            // writes its transcript, then stops before any model request.
            Turn::Cancelled => None,
            Turn::Stopping => return,
        };
        let dir = self.services.config.current().paths.transcripts.clone();
        let lock = match lock_run(dir, id.clone()).await {
            Ok(lock) => lock,
            Err(e) => return self.fail(&id, e.to_string()),
        };
        let env = self
            .services
            .for_task(cancel.clone())
            .stopped_by(self.stop_tasks.clone());
        self.registry.set_status(&id, TaskStatus::Running);
        // run_task is the task guard: a panic in the task comes back as an `error`
        // outcome, so this entry always reaches `finished` and the daemon serves on.
        match run_task(&env, &spec).await {
            Ok(outcome) if outcome.interrupted => {
                self.registry.set_status(&id, TaskStatus::Interrupted);
            }
            Ok(outcome) => self.registry.finish(&id, &outcome),
            Err(e) => {
                tracing::error!("task {id}: the audit log failed: {e}");
                self.owed.push(&id, e.to_string());
                self.fail(&id, e.to_string());
            }
        }
        drop(permit);
        // Released only now: the final transcript is saved and the run is over.
        drop(lock);
    }

    /// Ends a task that could not run to a recorded end with `error`.
    fn fail(&self, id: &str, error: String) {
        self.registry.finish(
            id,
            &TaskOutcome {
                stop_reason: StopReason::Error,
                answer: String::new(),
                turns: 0,
                usage: Usage::default(),
                usd: None,
                error: Some(error),
                interrupted: false,
            },
        );
    }
}
