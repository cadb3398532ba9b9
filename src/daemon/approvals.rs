//! Pending approvals of the daemon: an `ask` call waits on a oneshot until someone
//! answers through the control API, or `daemon.approval_timeout_secs` passes and
//! silence becomes a denial. An approval with `remember` first writes the call's
//! allow rules; if that fails the approval stays pending, so nothing is half done.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::registry::Registry;
use crate::approval::{AnswerFuture, ApprovalAnswer, Approver, Remember};
use crate::config::ConfigSource;
use crate::protocol::{Approval, ApprovalRequest, Decision, TaskStatus};

struct Waiting {
    info: Approval,
    /// Sent to by the API when someone answers; dropping it (timeout) is a denial.
    answer: oneshot::Sender<ApprovalAnswer>,
}

/// Takes an approval off the pending ones when its wait ends, however it ends:
/// a task cancelled or stopped while it waits leaves no approval to list or
/// answer (an answer with `remember` would edit the rules for a call that never
/// comes).
struct Unlist<'a> {
    waiting: &'a Mutex<HashMap<String, Waiting>>,
    id: &'a str,
}

impl Drop for Unlist<'_> {
    fn drop(&mut self) {
        if let Ok(mut w) = self.waiting.lock() {
            w.remove(self.id);
        }
    }
}

/// The daemon's approvals. Cheap to clone.
#[derive(Clone)]
pub struct Approvals {
    /// Held only for short, non-async sections.
    waiting: Arc<Mutex<HashMap<String, Waiting>>>,
    registry: Registry,
    config: Arc<dyn ConfigSource>,
    /// Writes the rules of `approve --remember`.
    remember: Arc<dyn Remember>,
}

/// One answer to a pending approval, as the control API received it.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Approve (true) or deny.
    pub approved: bool,
    /// Who answered: `uid:N`.
    pub by: String,
    /// A reason for the model.
    pub reason: Option<String>,
    /// Also add the narrowest allow rule for the call to settings.json.
    pub remember: bool,
}

/// Why an answer could not be given.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No pending approval has that id (answered, timed out, or never existed).
    #[error("no pending approval {0}")]
    Unknown(String),
    /// `remember` with a denial: only an approval can be remembered.
    #[error("--remember goes with approve only")]
    RememberDenial,
    /// The rule could not be remembered; the approval is still pending.
    #[error("{0}; the approval is still pending")]
    Remember(String),
    /// The rules were written, but someone answered the approval meanwhile.
    #[error("the allow rules {0:?} were added, but approval {1} was answered meanwhile")]
    AnsweredMeanwhile(Vec<String>, String),
}

impl Approvals {
    /// An empty set of approvals.
    pub fn new(
        registry: Registry,
        config: Arc<dyn ConfigSource>,
        remember: Arc<dyn Remember>,
    ) -> Approvals {
        Approvals {
            waiting: Arc::new(Mutex::new(HashMap::new())),
            registry,
            config,
            remember,
        }
    }

    /// Every pending approval, oldest first.
    pub fn list(&self) -> Vec<Approval> {
        let mut v: Vec<Approval> = match self.waiting.lock() {
            Ok(w) => w.values().map(|w| w.info.clone()).collect(),
            Err(_) => Vec::new(),
        };
        v.sort_by(|a, b| a.requested_at.cmp(&b.requested_at));
        v
    }

    /// Answers one approval; returns the rules remembered, if asked to.
    pub async fn resolve(
        &self,
        id: &str,
        answer: Answer,
    ) -> Result<Option<Vec<String>>, ResolveError> {
        let remembered = if answer.remember {
            if !answer.approved {
                return Err(ResolveError::RememberDenial);
            }
            let request = self
                .waiting
                .lock()
                .ok()
                .and_then(|w| w.get(id).map(|w| w.info.request.clone()))
                .ok_or_else(|| ResolveError::Unknown(id.to_string()))?;
            let rules = self
                .remember
                .remember(&request, &answer.by)
                .await
                .map_err(ResolveError::Remember)?;
            Some(rules)
        } else {
            None
        };
        let waiting = self
            .waiting
            .lock()
            .ok()
            .and_then(|mut w| w.remove(id))
            .ok_or_else(|| match &remembered {
                Some(rules) => ResolveError::AnsweredMeanwhile(rules.clone(), id.to_string()),
                None => ResolveError::Unknown(id.to_string()),
            })?;
        let _ = waiting.answer.send(ApprovalAnswer {
            approved: answer.approved,
            decision: if answer.approved {
                Decision::Approved
            } else {
                Decision::Denied
            },
            by: answer.by,
            reason: answer.reason,
            remembered: remembered.clone(),
        });
        Ok(remembered)
    }
}

impl Approver for Approvals {
    fn expires_in(&self) -> Option<Duration> {
        Some(Duration::from_secs(
            self.config.current().config.daemon.approval_timeout_secs,
        ))
    }

    fn ask<'a>(&'a self, req: &'a ApprovalRequest) -> AnswerFuture<'a> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let info = Approval {
                request: req.clone(),
                requested_at: chrono::Utc::now()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            };
            if let Ok(mut w) = self.waiting.lock() {
                w.insert(req.approval_id.clone(), Waiting { info, answer: tx });
            }
            let _unlist = Unlist {
                waiting: &self.waiting,
                id: &req.approval_id,
            };
            self.registry
                .set_status(&req.task_id, TaskStatus::AwaitingApproval);
            let timeout =
                Duration::from_secs(self.config.current().config.daemon.approval_timeout_secs);
            let answer = match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(answer)) => answer,
                _ => ApprovalAnswer {
                    approved: false,
                    decision: Decision::Timeout,
                    by: "timeout".into(),
                    reason: Some(format!(
                        "nobody answered within {} s (daemon.approval_timeout_secs)",
                        timeout.as_secs()
                    )),
                    remembered: None,
                },
            };
            self.registry.set_status(&req.task_id, TaskStatus::Running);
            answer
        })
    }
}
