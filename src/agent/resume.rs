//! Where a task starts from: a new transcript holding the prompt, one saved
//! `queued` and never run, or a resumed one, made ready to send again (the calls
//! it left open answered as far as the audit log shows they got).

use super::{Halt, TaskRun, TaskSpec, TaskStatus, Transcript, guard};
use crate::config::Loaded;
use crate::events::{self, Event, EventError};
use crate::llm::{Block, Message, Role, Usage};

impl TaskRun<'_> {
    /// The task's first event — `task_started`, or `task_resumed` with the history
    /// made ready to send again — and the transcript saved before any request.
    pub(super) async fn start(&mut self) -> Result<(), Halt> {
        let model = if self.transcript.model.is_empty() {
            self.loaded.config.api.model.clone()
        } else {
            self.transcript.model.clone()
        };
        // Before the first record, which names the run's trace.
        let trace_id = self
            .env
            .services
            .telemetry
            .begin_task(
                &self.spec.task_id,
                &model,
                self.transcript.traceparent.as_deref(),
            )
            .map(|t| t.trace_id);
        if !starts_fresh(self.spec) {
            if !self.spec.resume_recorded {
                self.record(Event::TaskResumed {
                    turns_so_far: self.turn,
                    source: self.spec.source,
                    by: self.spec.by.clone(),
                    trace_id,
                })
                .await?;
            }
            self.prepare_resume().await?;
        } else {
            let knowledge = &self.knowledge;
            self.record(Event::TaskStarted {
                prompt: self.spec.prompt.clone(),
                model,
                source: self.spec.source,
                trace_id,
                skills: knowledge
                    .skills
                    .offered
                    .iter()
                    .map(|s| events::SkillRecord {
                        name: s.name.clone(),
                        sha256: s.sha256.clone(),
                    })
                    .collect(),
                agents_md_sha256: knowledge.agents_md.as_ref().map(|a| a.sha256.clone()),
                parent_tool_use_id: self.transcript.parent_tool_use_id.clone(),
                tools: self.transcript.tools.clone(),
            })
            .await?;
        }
        self.save_or_stop(&[]).await
    }

    /// Makes a saved history ready to send again: dangling `tool_use` blocks (the
    /// process died before their results were saved) are answered first, each as
    /// far as the audit log shows it got; a history that ends with the model's
    /// answer gets a user turn asking it to go on.
    async fn prepare_resume(&mut self) -> Result<(), EventError> {
        let Some(last) = self.transcript.messages.last() else {
            return Ok(());
        };
        if last.role != Role::Assistant {
            return Ok(());
        }
        let uses = last.tool_uses();
        if uses.is_empty() {
            self.push_user(vec![Block::text(
                "Continue the task from where you stopped.",
            )]);
            return Ok(());
        }
        // How far each open call got is in the audit log, not the transcript: the
        // transcript is saved before the calls run, the log records each step.
        let log = self.loaded.paths.events.clone();
        let task_id = self.spec.task_id.clone();
        let ids: Vec<String> = uses.iter().map(|u| u.id.clone()).collect();
        let trails = tokio::task::spawn_blocking(move || events::call_trails(&log, &task_id, &ids))
            .await
            .unwrap_or_else(|e| {
                Err(events::TrailError::Io {
                    path: std::path::PathBuf::new(),
                    source: std::io::Error::other(e),
                })
            });
        let loaded = self.loaded.clone();
        let task_id = &self.spec.task_id;
        let blocks = guard::answer_resumed_calls(self.env, task_id, &loaded, &uses, trails).await?;
        self.push_user(blocks);
        // A child continued above spent for this task too.
        self.absorb_children();
        Ok(())
    }
}

/// Whether `spec` starts a task from its first request (`task_started`): a new
/// task, or one whose transcript was saved `queued` and never ran. Anything else
/// continues a run (`task_resumed`).
fn starts_fresh(spec: &TaskSpec) -> bool {
    spec.resume
        .as_ref()
        .is_none_or(|t| t.status == TaskStatus::Queued && !t.resume_queued)
}

/// The transcript of a task accepted but not yet started: status `queued`, the
/// prompt as its first user message, and what it needs to be started later
/// (`max_turns`, `source`, `by`). The daemon saves it before answering 202, so an
/// accepted task survives a crash; [`super::run_task`] starts it as a new task.
pub fn queued_transcript(spec: &TaskSpec, model: String, by: String) -> Transcript {
    Transcript {
        status: TaskStatus::Queued,
        model,
        by: Some(by),
        ..fresh_transcript(spec)
    }
}

/// A new running transcript holding the prompt; the model is left empty for the
/// caller to set.
fn fresh_transcript(spec: &TaskSpec) -> Transcript {
    Transcript {
        task_id: spec.task_id.clone(),
        model: String::new(),
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        status: TaskStatus::Running,
        stop_reason: None,
        answer: None,
        error: None,
        usage: Usage::default(),
        usd: Some(0.0),
        messages: vec![Message::user(vec![Block::text(spec.prompt.clone())])],
        turns: Vec::new(),
        max_turns: spec.max_turns,
        source: Some(spec.source),
        by: None,
        resume_queued: false,
        traceparent: None,
        parent_tool_use_id: None,
        tools: None,
        delegated: None,
    }
}

/// The transcript a task starts from: the resumed (or queued) one, running now, or
/// a new one holding the prompt.
pub(super) fn initial_transcript(loaded: &Loaded, spec: &TaskSpec) -> Transcript {
    if let Some(t) = &spec.resume {
        // A transcript from before cost accounting: its cost follows from its usage
        // (prices are linear in each kind of token), so a budget still applies.
        let usd = t.usd.or_else(|| {
            crate::protocol::price_of(&t.model, &loaded.config.pricing).map(|p| p.cost(&t.usage))
        });
        return Transcript {
            status: TaskStatus::Running,
            stop_reason: None,
            answer: None,
            error: None,
            usd,
            resume_queued: false,
            ..t.clone()
        };
    }
    Transcript {
        model: loaded.config.api.model.clone(),
        ..fresh_transcript(spec)
    }
}
