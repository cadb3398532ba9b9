//! The task's end: the final transcript saved and `task_finished` recorded; a
//! task stopped by the daemon's shutdown left `interrupted` instead; after a
//! panic, the calls it left open answered first, and a panic while ending still
//! ends the task on the record.

use super::{StopReason, TaskOutcome, TaskRun, TaskStatus, guard};
use crate::events::{Event, EventError};
use crate::llm::{Hold, Message, Role};

impl TaskRun<'_> {
    /// After a panic: stops whatever the task left running and answers the calls the
    /// panic left open, so the transcript stays valid and resumable.
    async fn recover(&mut self) -> Result<(), EventError> {
        // A call of a concurrent batch may still run on a blocking thread after its
        // future was dropped; the task's token is what kills its process tree.
        self.env.cancel.cancel();
        let uses = match self.transcript.messages.last() {
            Some(last) if last.role == Role::Assistant => last.tool_uses(),
            _ => return Ok(()),
        };
        if uses.is_empty() {
            return Ok(());
        }
        let blocks =
            guard::answer_open_calls(self.env, &self.spec.task_id, &uses, &self.ledger).await?;
        self.push_user(blocks);
        Ok(())
    }

    /// Saves the final transcript and records `task_finished`; a task cancelled by
    /// the daemon's shutdown is left `interrupted` instead ([`TaskRun::interrupt`]).
    pub(super) async fn finish(
        &mut self,
        stop_reason: StopReason,
        error: Option<String>,
    ) -> Result<TaskOutcome, EventError> {
        // Children that ran before the stop are part of what the task spent.
        self.absorb_children();
        if stop_reason == StopReason::Cancelled && self.env.stopping.is_cancelled() {
            return self.interrupt().await;
        }
        let answer = self
            .transcript
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .map(Message::text)
            .unwrap_or_default();
        self.transcript.status = TaskStatus::Finished;
        self.transcript.stop_reason = Some(stop_reason);
        self.transcript.answer = Some(answer);
        self.transcript.error = error.clone();
        // The task ends either way; a failure is logged and `task_finished` says why
        // the task stopped.
        let _ = self.save().await;
        self.hold = Hold::default();
        // Saved: the outcome takes the answer over rather than holding a second copy
        // of what may be megabytes.
        let answer = self.transcript.answer.take().unwrap_or_default();
        self.record(Event::TaskFinished {
            stop_reason,
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            duration_ms: self.started.elapsed().as_millis() as u64,
            error: error.clone(),
        })
        .await?;
        let ended = super::hooks::Ended {
            task_id: &self.spec.task_id,
            stop_reason,
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            answer: &answer,
        };
        super::hooks::task_finished(self.env, &self.loaded.clone(), ended).await?;
        Ok(TaskOutcome {
            stop_reason,
            answer,
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            error,
            interrupted: false,
        })
    }

    /// Stopped by the daemon's shutdown: the task has not ended, so its transcript
    /// is saved `interrupted` (the calls it had open are answered, as for any
    /// cancellation) and `task_interrupted` recorded, with no `task_finished`; the
    /// next start shows it `interrupted`, as after a crash.
    async fn interrupt(&mut self) -> Result<TaskOutcome, EventError> {
        self.transcript.status = TaskStatus::Interrupted;
        self.transcript.stop_reason = None;
        self.transcript.answer = None;
        self.transcript.error = None;
        let _ = self.save().await;
        self.record(Event::TaskInterrupted {
            was: TaskStatus::Running,
        })
        .await?;
        Ok(TaskOutcome {
            stop_reason: StopReason::Cancelled,
            answer: String::new(),
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            error: None,
            interrupted: true,
        })
    }

    /// Ends the task after the loop stopped, or after it panicked (`panicked`).
    pub(super) async fn conclude(
        &mut self,
        stop_reason: StopReason,
        error: Option<String>,
        panicked: bool,
    ) -> Result<TaskOutcome, EventError> {
        if panicked {
            // The hook already logged the message and where; this ties it to the task.
            tracing::error!(
                task_id = %self.spec.task_id,
                "the task ended by a panic; its open calls are answered, its \
                 task_finished holds the error"
            );
            self.recover().await?;
        }
        self.finish(stop_reason, error).await
    }

    /// Ending the task panicked (saving or recording it): the transcript keeps its
    /// last saved state, but the log still gets the task's end, with `error`.
    pub(super) async fn finish_after_late_panic(
        &mut self,
        error: String,
    ) -> Result<TaskOutcome, EventError> {
        self.env.cancel.cancel();
        self.record(Event::TaskFinished {
            stop_reason: StopReason::Error,
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            duration_ms: self.started.elapsed().as_millis() as u64,
            error: Some(error.clone()),
        })
        .await?;
        Ok(TaskOutcome {
            stop_reason: StopReason::Error,
            answer: String::new(),
            turns: self.turn,
            usage: self.transcript.usage,
            usd: self.transcript.usd,
            error: Some(error),
            interrupted: false,
        })
    }
}
