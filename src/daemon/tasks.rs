//! The daemon's tasks: a registry of every task it knows (active ones whole, ended
//! ones as a small summary whose answer stays in the transcript) and the scheduler that runs at most `daemon.max_concurrent_tasks`
//! at once, each through the same loop as `harnessd run`.
//!
//! One run per task: a resume first claims the task in the registry (a check and a
//! status change under one lock), and every run holds the task's [`RunLock`], which
//! also keeps other processes off its transcript. The lock is taken when the task
//! starts, once it has its slot: a queued task holds no descriptor.
//!
//! The queue is durable: a queued task (a resume too) has its `queued` transcript on
//! disk. When the daemon stops, no queued task starts ([`Scheduler::stop_starting`]);
//! they stay queued, on disk as in the record, for the next start.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::loose_ends::Owed;
use crate::agent::{
    LockError, RunLock, StopReason, TaskOutcome, TaskServices, TaskSpec, Transcript, new_task_id,
    queued_transcript, run_task,
};
use crate::daemon::index::{Ended, Stamp, short_error};
use crate::events::{Event, EventError, EventLog};
use crate::llm::Usage;
use crate::protocol::Source;
use crate::protocol::Task;
pub use crate::protocol::TaskStatus;

struct Entry {
    info: Task,
    /// Cancels this task (its model request, its tool's process tree).
    cancel: CancellationToken,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Whether a task with this status has ended (no run drives it).
fn ended(status: TaskStatus) -> bool {
    matches!(status, TaskStatus::Finished | TaskStatus::Interrupted)
}

/// What a listing shows of a task: no answer (it may be megabytes; it is read
/// from the transcript when the task is asked for) and the error's start.
fn summary(mut info: Task) -> Task {
    info.answer = None;
    if let Some(e) = info.error.as_mut() {
        *e = short_error(e).into();
    }
    info
}

/// The registry's two parts.
#[derive(Default)]
struct Tasks {
    /// Queued, running and awaiting approval: the full entry, with its token.
    active: HashMap<String, Entry>,
    /// Finished and interrupted: a compact summary each, keyed by id.
    ended: HashMap<Box<str>, Ended>,
}

impl Tasks {
    /// The task as the API shows it; an ended one without its answer.
    fn info(&self, id: &str) -> Option<Task> {
        match self.active.get(id) {
            Some(e) => Some(e.info.clone()),
            None => self.ended.get(id).map(|e| e.task(id)),
        }
    }

    /// Each task's id, status and (creation time, id) sort key.
    fn keys(&self) -> impl Iterator<Item = (&str, TaskStatus, Stamp)> {
        let active = self.active.values().map(|e| {
            (
                e.info.task_id.as_str(),
                e.info.status,
                Stamp::parse(&e.info.created),
            )
        });
        let ended = self
            .ended
            .iter()
            .map(|(id, e)| (&**id, e.status, e.created.clone()));
        active.chain(ended)
    }

    /// The creation time of a known task.
    fn created(&self, id: &str) -> Option<Stamp> {
        match self.active.get(id) {
            Some(e) => Some(Stamp::parse(&e.info.created)),
            None => self.ended.get(id).map(|e| e.created.clone()),
        }
    }

    /// Files `info` where its status belongs.
    fn put(&mut self, info: Task, cancel: CancellationToken) {
        if ended(info.status) {
            self.active.remove(&info.task_id);
            let summary = Ended::of(&info);
            self.ended.insert(info.task_id.into_boxed_str(), summary);
        } else {
            self.ended.remove(info.task_id.as_str());
            self.active
                .insert(info.task_id.clone(), Entry { info, cancel });
        }
    }
}

/// Which tasks `GET /v1/tasks` asks for.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only tasks with this status.
    pub status: Option<TaskStatus>,
    /// At most this many.
    pub limit: usize,
    /// Only tasks older than this.
    pub before: Option<Cursor>,
}

/// Where a page starts: after a task, or before a time.
#[derive(Debug, Clone)]
pub enum Cursor {
    /// Tasks listed after this one (older, or as old with a smaller id).
    Task(String),
    /// Tasks created before this time, in the registry's RFC 3339 form.
    Time(String),
}

/// One page of the task list, newest first.
#[derive(Debug, Clone)]
pub struct Page {
    /// The tasks, ended ones without their answer.
    pub tasks: Vec<Task>,
    /// The cursor of the following page, when there is one.
    pub next: Option<String>,
}

/// Why a page cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// `before` names a task the daemon does not know.
    #[error("before: no task {0:?}")]
    UnknownCursor(String),
}

/// Every task the daemon knows: active ones whole, ended ones as a small summary.
/// Cheap to clone; the lock is held only for short, non-async sections.
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<Mutex<Tasks>>,
}

impl Registry {
    fn with<T>(&self, f: impl FnOnce(&mut Tasks) -> T) -> Option<T> {
        self.inner.lock().ok().map(|mut m| f(&mut m))
    }

    fn insert(&self, info: Task, cancel: CancellationToken) {
        self.with(|m| m.put(info, cancel));
    }

    /// Records a task found on disk (from a transcript).
    pub fn insert_recorded(&self, info: Task) {
        self.insert(info, CancellationToken::new());
    }

    /// Claims `id` for a resume: in one step under the lock, checks that it is
    /// interrupted or stopped (not with an answer) and marks it queued, with `cancel`
    /// as its token. Returns the entry as it was, for [`Registry::restore`].
    fn claim(&self, id: &str, cancel: CancellationToken) -> Result<Task, ClaimError> {
        self.with(|m| {
            if let Some(e) = m.active.get(id) {
                return Err(ClaimError::Busy {
                    task_id: id.to_string(),
                    status: e.info.status,
                });
            }
            let e = m
                .ended
                .get(id)
                .ok_or_else(|| ClaimError::NotFound(id.to_string()))?;
            if e.stop_reason == Some(StopReason::EndTurn) {
                return Err(ClaimError::Answered(id.to_string()));
            }
            let previous = e.task(id);
            let mut info = previous.clone();
            info.status = TaskStatus::Queued;
            info.stop_reason = None;
            info.answer = None;
            info.error = None;
            info.updated = now();
            m.put(info, cancel);
            Ok(previous)
        })
        .unwrap_or_else(|| Err(ClaimError::NotFound(id.to_string())))
    }

    /// Puts back an entry a claim changed, when the resume did not go ahead.
    fn restore(&self, info: Task) {
        self.insert(info, CancellationToken::new());
    }

    /// Changes an active task's status.
    pub fn set_status(&self, id: &str, status: TaskStatus) {
        self.with(|m| {
            if let Some(e) = m.active.get_mut(id) {
                e.info.status = status;
                e.info.updated = now();
                if ended(status) {
                    let info = e.info.clone();
                    m.put(info, CancellationToken::new());
                }
            }
        });
    }

    /// Adds one model response's tokens to an active task, so listings show
    /// the tokens used so far while it runs.
    pub fn add_usage(&self, id: &str, usage: &Usage) {
        self.with(|m| {
            if let Some(e) = m.active.get_mut(id) {
                e.info.usage.add(usage);
            }
        });
    }

    /// Moves a task to the index of ended ones; its answer is left to the
    /// transcript, where the run saved it.
    fn finish(&self, id: &str, outcome: &TaskOutcome) {
        self.with(|m| {
            if let Some(Entry { mut info, .. }) = m.active.remove(id) {
                info.status = TaskStatus::Finished;
                info.stop_reason = Some(outcome.stop_reason);
                info.usage = outcome.usage;
                info.usd = outcome.usd;
                info.answer = None;
                info.error = outcome.error.clone();
                info.updated = now();
                m.put(info, CancellationToken::new());
            }
        });
    }

    /// One task; an ended one without its answer (see [`Registry::ended`]).
    pub fn get(&self, id: &str) -> Option<Task> {
        self.with(|m| m.info(id)).flatten()
    }

    /// Whether `id` is a known task that has ended: its answer and whole error
    /// are in its transcript only.
    pub fn ended(&self, id: &str) -> bool {
        self.with(|m| m.ended.contains_key(id)).unwrap_or(false)
    }

    /// One page of tasks, newest first (by creation, then id); only that page is
    /// copied out of the registry.
    pub fn page(&self, q: &ListQuery) -> Result<Page, PageError> {
        self.with(|m| {
            // (created, id) of the cursor: every listed task sorts strictly below.
            let bound: Option<(Stamp, &str)> = match &q.before {
                None => None,
                Some(Cursor::Time(t)) => Some((Stamp::parse(t), "")),
                Some(Cursor::Task(id)) => {
                    let t = m
                        .created(id)
                        .ok_or_else(|| PageError::UnknownCursor(id.clone()))?;
                    Some((t, id.as_str()))
                }
            };
            let mut hits: Vec<(Stamp, &str)> = m
                .keys()
                .filter(|(_, status, _)| q.status.is_none_or(|s| *status == s))
                .map(|(id, _, created)| (created, id))
                .filter(|k| bound.as_ref().is_none_or(|b| (&k.0, k.1) < (&b.0, b.1)))
                .collect();
            hits.sort_unstable_by(|a, b| b.cmp(a));
            let more = hits.len() > q.limit;
            hits.truncate(q.limit);
            let next = more
                .then(|| hits.last().map(|(_, id)| id.to_string()))
                .flatten();
            Ok(Page {
                tasks: hits
                    .into_iter()
                    .filter_map(|(_, id)| m.info(id).map(summary))
                    .collect(),
                next,
            })
        })
        .unwrap_or_else(|| {
            Ok(Page {
                tasks: Vec::new(),
                next: None,
            })
        })
    }

    /// Cancels a task; `None` if there is no such task.
    pub fn cancel(&self, id: &str) -> Option<Task> {
        self.with(|m| {
            if let Some(e) = m.active.get(id) {
                e.cancel.cancel();
            }
            m.info(id)
        })
        .flatten()
    }

    /// Counts of tasks per status.
    pub fn counts(&self) -> HashMap<&'static str, i64> {
        let mut out = HashMap::new();
        self.with(|m| {
            for (_, status, _) in m.keys() {
                *out.entry(status.as_str()).or_insert(0) += 1;
            }
        });
        out
    }
}

/// Why a task cannot be resumed now.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// No such task.
    #[error("no task {0:?}")]
    NotFound(String),
    /// Queued or running (another resume may have just claimed it).
    #[error("task {task_id} is {}; only an interrupted or stopped task can be resumed", status.as_str())]
    Busy {
        /// The task.
        task_id: String,
        /// Its status now.
        status: TaskStatus,
    },
    /// It ended with the model's answer; there is nothing to continue.
    #[error("task {0} already ended with an answer")]
    Answered(String),
}

/// Why a task was not accepted; nothing was queued.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// `task_queued` could not be written.
    #[error("the audit log cannot be written, so no task is accepted: {0}")]
    Record(#[from] EventError),
    /// The task's `queued` transcript could not be saved.
    #[error("the task's transcript cannot be saved, so no task is accepted: {0}")]
    Transcript(std::io::Error),
}

/// A queued task's place in the slot queue: [`dispatch`] sends it a slot when its
/// turn comes, or drops it unsent when the daemon stops.
type Ticket = oneshot::Sender<OwnedSemaphorePermit>;

/// Hands out the slots in the order tasks joined the queue: one waiter on the
/// semaphore at a time, so the order is this channel's. A ticket whose task was
/// cancelled meanwhile gives its slot back at once (the send fails). Ends when the
/// semaphore is closed (the daemon stops); the tickets still queued are dropped
/// with the channel, which tells their tasks to stay queued.
async fn dispatch(slots: Arc<Semaphore>, mut queue: mpsc::UnboundedReceiver<Ticket>) {
    while let Some(ticket) = queue.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let _ = ticket.send(permit);
    }
}

/// How a queued task's wait ended.
enum Turn {
    /// It has a slot: it starts.
    Slot(OwnedSemaphorePermit),
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
    /// One permit per running task, `daemon.max_concurrent_tasks` in all; closed
    /// when the daemon stops, so that no queued task starts.
    slots: Arc<Semaphore>,
    /// The slot queue, served by [`dispatch`].
    queue: mpsc::UnboundedSender<Ticket>,
    /// Every running task; shutdown waits on it.
    pub tracker: TaskTracker,
    /// Parent of every task's cancellation token: cancelling it stops them all.
    pub shutdown: CancellationToken,
    /// Tasks whose `task_finished` the log could not take, written once it can.
    owed: Owed,
}

/// Everything a scheduler needs.
pub struct SchedulerParts {
    /// What its tasks run with.
    pub services: TaskServices,
    /// The registry it records its tasks in, shared with the API and approvals.
    pub registry: Registry,
}

impl Scheduler {
    /// A scheduler with `max_concurrent_tasks` slots; call it on the runtime (it
    /// spawns the queue's dispatcher).
    pub fn new(parts: SchedulerParts) -> Scheduler {
        let slots = parts
            .services
            .config
            .current()
            .config
            .daemon
            .max_concurrent_tasks as usize;
        let slots = Arc::new(Semaphore::new(slots));
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(dispatch(slots.clone(), waiting));
        Scheduler {
            registry: parts.registry,
            services: parts.services,
            slots,
            queue,
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            owed: Owed::default(),
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
    ) -> Result<String, SubmitError> {
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
        let transcript = queued_transcript(&spec, model, by);
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
        let cancel = self.shutdown.child_token();
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
        let event = Event::TaskResumed {
            turns_so_far: transcript.turns.len() as u32,
            source: Source::Api,
            by: by.clone(),
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
    pub fn stop_starting(&self) {
        self.slots.close();
    }

    /// Whether the daemon is stopping ([`Scheduler::stop_starting`]).
    fn stopping(&self) -> bool {
        self.slots.is_closed()
    }

    /// Puts a task at the back of the slot queue, in the caller's order (the
    /// requeued ones oldest first), and spawns its run, which waits for its turn.
    fn enqueue(&self, spec: TaskSpec, cancel: CancellationToken) {
        let (ticket, turn) = oneshot::channel();
        // Refused once the dispatcher has ended (the daemon stops): the ticket is
        // dropped with the error, and the task stays queued.
        let _ = self.queue.send(ticket);
        let this = self.clone();
        self.tracker
            .spawn(async move { this.run(spec, cancel, turn).await });
    }

    fn start(&self, spec: TaskSpec) -> String {
        let id = spec.task_id.clone();
        let cancel = self.shutdown.child_token();
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
                created,
                updated: now(),
            },
            cancel.clone(),
        );
        self.enqueue(spec, cancel);
        id
    }

    /// Waits for the task's turn in the slot queue.
    async fn wait_turn(
        &self,
        turn: oneshot::Receiver<OwnedSemaphorePermit>,
        cancel: &CancellationToken,
    ) -> Turn {
        let permit = tokio::select! {
            // Err: the dispatcher dropped the ticket, the daemon stops.
            p = turn => p.ok(),
            // The daemon's cancellation of every task, past the grace, reaches the
            // queued ones too (it comes after `stop_starting`), but they are not the
            // user's to end.
            () = cancel.cancelled() => {
                return if self.stopping() { Turn::Stopping } else { Turn::Cancelled };
            }
        };
        match permit {
            // A slot handed out just as the daemon began to stop is not used.
            Some(permit) if !self.stopping() => Turn::Slot(permit),
            _ => Turn::Stopping,
        }
    }

    /// Runs a task once it has its slot (or was cancelled while queued), under its
    /// run lock, taken only then: a queued task holds no descriptor. A task still
    /// queued when the daemon stops does not start and leaves no record.
    async fn run(
        self,
        spec: TaskSpec,
        cancel: CancellationToken,
        turn: oneshot::Receiver<OwnedSemaphorePermit>,
    ) {
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
            .stopped_by(self.shutdown.clone());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::index::INDEX_ERROR_CHARS;

    fn task(id: &str, created: &str, status: TaskStatus) -> Task {
        Task {
            task_id: id.into(),
            status,
            stop_reason: None,
            usage: Usage::default(),
            prompt: None,
            usd: None,
            answer: Some("a long answer".into()),
            error: Some("e".repeat(10_000)),
            created: created.into(),
            updated: created.into(),
        }
    }

    fn ids(p: &Page) -> Vec<&str> {
        p.tasks.iter().map(|t| t.task_id.as_str()).collect()
    }

    #[test]
    fn pages_run_newest_first_with_ties_broken_by_id() {
        let r = Registry::default();
        let t1 = "2026-01-01T00:00:01.000Z";
        let t2 = "2026-01-01T00:00:02.000Z";
        r.insert_recorded(task("a", t1, TaskStatus::Finished));
        r.insert_recorded(task("b", t2, TaskStatus::Finished));
        r.insert_recorded(task("c", t2, TaskStatus::Queued));
        let q = |limit, before| ListQuery {
            status: None,
            limit,
            before,
        };
        let first = r.page(&q(2, None)).unwrap();
        assert_eq!(ids(&first), ["c", "b"]);
        assert_eq!(first.next.as_deref(), Some("b"));
        let rest = r.page(&q(2, first.next.map(Cursor::Task))).unwrap();
        assert_eq!(ids(&rest), ["a"]);
        assert_eq!(rest.next, None);
        let before_t2 = r.page(&q(9, Some(Cursor::Time(t2.into())))).unwrap();
        assert_eq!(ids(&before_t2), ["a"]);
        assert!(r.page(&q(9, Some(Cursor::Task("zz".into())))).is_err());
        let queued = ListQuery {
            status: Some(TaskStatus::Queued),
            ..q(9, None)
        };
        assert_eq!(ids(&r.page(&queued).unwrap()), ["c"]);
    }

    #[test]
    fn ended_tasks_keep_no_answer_and_a_short_error() {
        let r = Registry::default();
        r.insert_recorded(task("a", "t", TaskStatus::Finished));
        r.insert_recorded(task("q", "t", TaskStatus::Queued));
        let a = r.get("a").unwrap();
        assert_eq!(a.answer, None);
        // The kept characters plus the omission marker.
        assert!(a.error.unwrap().chars().count() < INDEX_ERROR_CHARS + 40);
        assert!(r.ended("a") && !r.ended("q"));
        r.finish(
            "q",
            &TaskOutcome {
                stop_reason: StopReason::EndTurn,
                answer: "x".repeat(1000),
                turns: 1,
                usage: Usage::default(),
                usd: None,
                error: None,
                interrupted: false,
            },
        );
        let q = r.get("q").unwrap();
        assert_eq!((q.status, q.answer), (TaskStatus::Finished, None));
        assert!(r.ended("q"));
        assert_eq!(r.counts().get("finished"), Some(&2));
    }
}
