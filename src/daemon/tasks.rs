//! The daemon's tasks: a registry of every task it knows (status, stop reason,
//! usage, answer) and the scheduler that runs at most `daemon.max_concurrent_tasks`
//! at once, each through the same loop as `harnessd run`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::agent::TaskStatus;
use crate::agent::{
    StopReason, TaskOutcome, TaskServices, TaskSpec, Transcript, new_task_id, run_task,
};
use crate::control::Task;
use crate::events::{Event, EventError, EventLog};
use crate::llm::Usage;

struct Entry {
    info: Task,
    /// Cancels this task (its model request, its tool's process tree).
    cancel: CancellationToken,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Every task the daemon knows. Cheap to clone; the lock is held only for short,
/// non-async sections.
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<Mutex<HashMap<String, Entry>>>,
}

impl Registry {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Entry>) -> T) -> Option<T> {
        self.inner.lock().ok().map(|mut m| f(&mut m))
    }

    fn insert(&self, info: Task, cancel: CancellationToken) {
        self.with(|m| m.insert(info.task_id.clone(), Entry { info, cancel }));
    }

    /// Records a task found on disk (from a transcript).
    pub fn insert_recorded(&self, info: Task) {
        self.insert(info, CancellationToken::new());
    }

    /// Changes a task's status.
    pub fn set_status(&self, id: &str, status: TaskStatus) {
        self.with(|m| {
            if let Some(e) = m.get_mut(id) {
                e.info.status = status;
                e.info.updated = now();
            }
        });
    }

    fn finish(&self, id: &str, outcome: &TaskOutcome) {
        self.with(|m| {
            if let Some(e) = m.get_mut(id) {
                e.info.status = TaskStatus::Finished;
                e.info.stop_reason = Some(outcome.stop_reason);
                e.info.usage = outcome.usage;
                e.info.answer = Some(outcome.answer.clone());
                e.info.error = outcome.error.clone();
                e.info.updated = now();
            }
        });
    }

    /// One task.
    pub fn get(&self, id: &str) -> Option<Task> {
        self.with(|m| m.get(id).map(|e| e.info.clone())).flatten()
    }

    /// Every task, oldest first.
    pub fn list(&self) -> Vec<Task> {
        let mut v = self
            .with(|m| m.values().map(|e| e.info.clone()).collect::<Vec<_>>())
            .unwrap_or_default();
        v.sort_by(|a, b| a.created.cmp(&b.created).then(a.task_id.cmp(&b.task_id)));
        v
    }

    /// Cancels a task; `None` if there is no such task.
    pub fn cancel(&self, id: &str) -> Option<Task> {
        self.with(|m| {
            m.get(id).map(|e| {
                e.cancel.cancel();
                e.info.clone()
            })
        })
        .flatten()
    }

    /// Counts of tasks per status.
    pub fn counts(&self) -> HashMap<&'static str, i64> {
        let mut out = HashMap::new();
        for t in self.list() {
            let key = t.status.as_str();
            *out.entry(key).or_insert(0) += 1;
        }
        out
    }
}

/// Starts and tracks tasks.
#[derive(Clone)]
pub struct Scheduler {
    /// The registry the API reads.
    pub registry: Registry,
    /// What every task runs with; each gets its own cancellation token besides.
    services: TaskServices,
    /// One permit per running task, `daemon.max_concurrent_tasks` in all.
    slots: Arc<Semaphore>,
    /// Every running task; shutdown waits on it.
    pub tracker: TaskTracker,
    /// Parent of every task's cancellation token: cancelling it stops them all.
    pub shutdown: CancellationToken,
}

/// Everything a scheduler needs.
pub struct SchedulerParts {
    /// What its tasks run with.
    pub services: TaskServices,
    /// The registry it records its tasks in, shared with the API and approvals.
    pub registry: Registry,
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
            slots: Arc::new(Semaphore::new(slots)),
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        }
    }

    /// Queues a new task; returns its id. `Err`: `task_queued` could not be
    /// written, and nothing was queued.
    pub async fn submit(
        &self,
        prompt: String,
        max_turns: Option<u32>,
        by: String,
    ) -> Result<String, EventError> {
        let spec = TaskSpec {
            task_id: new_task_id(),
            prompt,
            max_turns,
            source: "api".into(),
            resume: None,
        };
        // Recorded (and synced) before the task exists anywhere: a task the log
        // cannot hold is refused, never accepted and lost.
        self.services
            .events
            .record(
                Some(&spec.task_id),
                Event::TaskQueued {
                    prompt: spec.prompt.clone(),
                    source: spec.source.clone(),
                    by,
                },
            )
            .await?;
        Ok(self.start(spec))
    }

    /// The audit log the tasks write to.
    pub fn events(&self) -> &EventLog {
        &self.services.events
    }

    /// Continues an interrupted or stopped task from its transcript.
    pub fn resume(&self, transcript: Transcript) -> String {
        let spec = TaskSpec {
            task_id: transcript.task_id.clone(),
            prompt: String::new(),
            max_turns: None,
            source: "api".into(),
            resume: Some(transcript),
        };
        self.start(spec)
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
                answer: None,
                error: None,
                created,
                updated: now(),
            },
            cancel.clone(),
        );
        let this = self.clone();
        self.tracker
            .spawn(async move { this.run(spec, cancel).await });
        id
    }

    async fn run(self, spec: TaskSpec, cancel: CancellationToken) {
        let id = spec.task_id.clone();
        let permit = tokio::select! {
            p = self.slots.clone().acquire_owned() => p.ok(),
            () = cancel.cancelled() => None,
        };
        let env = self.services.for_task(cancel.clone());
        // Cancelled while queued (no permit): run_task still records the task and
        // writes its transcript, then stops before any model request.
        self.registry.set_status(&id, TaskStatus::Running);
        // run_task is the task guard: a panic in the task comes back as an `error`
        // outcome, so this entry always reaches `finished` and the daemon serves on.
        match run_task(&env, &spec).await {
            Ok(outcome) => self.registry.finish(&id, &outcome),
            Err(e) => {
                tracing::error!("task {id}: the audit log failed: {e}");
                self.registry.finish(
                    &id,
                    &TaskOutcome {
                        stop_reason: StopReason::Error,
                        answer: String::new(),
                        turns: 0,
                        usage: Usage::default(),
                        error: Some(e.to_string()),
                    },
                );
            }
        }
        drop(permit);
    }
}
