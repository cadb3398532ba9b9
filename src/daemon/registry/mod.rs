//! Every task the daemon knows, in memory: active ones (queued, running, awaiting
//! approval) whole, with their cancellation token, and ended ones as a small
//! summary ([`index`]) whose answer stays in the transcript. The API lists and
//! shows tasks from here; the scheduler files each change of status.
//!
//! A resume first claims its task here: a check and a status change under one
//! lock, so of two racing resumes only one goes ahead.

pub mod index;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::agent::{StopReason, TaskOutcome, TaskStatus};
use crate::llm::Usage;
use crate::protocol::Task;
use index::{EndedTask, Stamp, short_error};

struct Entry {
    info: Task,
    /// Cancels this task (its model request, its tool's process tree).
    cancel: CancellationToken,
}

pub(super) fn now() -> String {
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
    ended: HashMap<Box<str>, EndedTask>,
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
            let summary = EndedTask::of(&info);
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

    pub(super) fn insert(&self, info: Task, cancel: CancellationToken) {
        self.with(|m| m.put(info, cancel));
    }

    /// Records a task found on disk (from a transcript).
    pub fn insert_recorded(&self, info: Task) {
        self.insert(info, CancellationToken::new());
    }

    /// A child task started (or was continued) inside its parent's run: listed as
    /// running from now, with the start of its prompt (a continued one keeps what
    /// the registry had).
    pub(super) fn child_started(&self, id: &str, prompt: Option<&str>, ts: &str) {
        self.with(|m| {
            let known = m.info(id);
            let info = Task {
                task_id: id.to_string(),
                status: TaskStatus::Running,
                stop_reason: None,
                usage: known.as_ref().map(|t| t.usage).unwrap_or_default(),
                prompt: prompt
                    .and_then(Task::prompt_start)
                    .or_else(|| known.as_ref().and_then(|t| t.prompt.clone())),
                usd: known.as_ref().map_or(Some(0.0), |t| t.usd),
                answer: None,
                error: None,
                created: known
                    .as_ref()
                    .map_or_else(|| ts.to_string(), |t| t.created.clone()),
                updated: ts.to_string(),
                parent_task_id: crate::protocol::tree::parent_task_id(id).map(str::to_string),
            };
            m.put(info, CancellationToken::new());
        });
    }

    /// Claims `id` for a resume: in one step under the lock, checks that it is
    /// interrupted or stopped (not with an answer) and marks it queued, with `cancel`
    /// as its token. Returns the entry as it was, for [`Registry::restore`].
    pub(super) fn claim(&self, id: &str, cancel: CancellationToken) -> Result<Task, ClaimError> {
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
    pub(super) fn restore(&self, info: Task) {
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
    pub(super) fn finish(&self, id: &str, outcome: &TaskOutcome) {
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
    /// A child task: it runs only inside its parent, and resuming the parent
    /// continues a child it left open.
    #[error(
        "task {task_id} is a child of {parent} and runs only inside it; resume {parent} \
         instead (a child it left open when the daemon died is continued with it)"
    )]
    Child {
        /// The child.
        task_id: String,
        /// Its parent.
        parent: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use index::INDEX_ERROR_CHARS;

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
            parent_task_id: None,
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
