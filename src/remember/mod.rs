//! "Always allow this call" (`approve --remember`, the `a` answer of `run`'s
//! prompt), in one place: which rules (`rules`: the narrowest that allow exactly
//! the call), how they get into settings.json (`edit`: in place, atomically,
//! keeping the operator's text), and, for a running `serve` or `run`, the policy
//! reloaded at once and the reload recorded, naming who added the rules
//! ([`LiveRemember`]), or the rule taken out again if that record fails.
//!
//! Reloading here rather than waiting for the file watcher means the very next
//! identical call, even one already on its way, finds the rule in force.

mod edit;
mod rules;

use std::sync::Arc;

pub use edit::{RememberError, add_allow_rules, restore_settings};
pub use rules::{RememberCallError, narrowest_rules, remember_call};

use crate::approval::{Remember, RememberFuture};
use crate::config::{ConfigSource, LiveConfig};
use crate::events::EventLog;
use crate::protocol::{ApprovalRequest, Trigger};

/// Remembers calls into the live root's settings file.
#[derive(Clone)]
pub struct LiveRemember {
    live: Arc<LiveConfig>,
    /// The audit log the reload is recorded in.
    events: EventLog,
}

impl LiveRemember {
    /// Remembers into `live`'s root, recording reloads in `events`.
    pub fn new(live: Arc<LiveConfig>, events: EventLog) -> LiveRemember {
        LiveRemember { live, events }
    }
}

impl LiveRemember {
    /// Takes a remembered rule whose record failed back out: the file as it was
    /// (unless edited since), and the policy loaded from it again. The reload's
    /// own record is attempted and may fail too; the policy is what matters.
    async fn undo(&self, path: std::path::PathBuf, previous: Vec<u8>, written: Vec<u8>, by: &str) {
        if previous == written {
            return;
        }
        let restored =
            tokio::task::spawn_blocking(move || restore_settings(&path, &written, &previous)).await;
        if let Ok(Err(e)) = &restored {
            tracing::warn!("cannot take the unrecorded remembered rule out again: {e}");
        }
        let (trigger, by) = (Trigger::RememberUndone, Some(by));
        let _ = crate::reload::reload_and_record(&self.live, &self.events, trigger, by).await;
    }
}

impl Remember for LiveRemember {
    fn remember<'a>(&'a self, req: &'a ApprovalRequest, by: &'a str) -> RememberFuture<'a> {
        Box::pin(async move {
            // No policy change without its record: the rule is written, loaded
            // and recorded, and taken out again if the record fails (each attempt
            // is also the probe that finds the log writable again).
            let loaded = self.live.current();
            let path = loaded.paths.settings.clone();
            let (tool, input) = (req.tool.clone(), req.input.clone());
            // Judging a file tool's path and writing the file are blocking work.
            let (rules, previous, written) = tokio::task::spawn_blocking(move || {
                let previous = std::fs::read(&loaded.paths.settings).unwrap_or_default();
                let rules = remember_call(&loaded, &tool, &input)?;
                let written = std::fs::read(&loaded.paths.settings).unwrap_or_default();
                Ok::<_, RememberCallError>((rules, previous, written))
            })
            .await
            .map_err(|e| format!("internal error while remembering: {e}"))?
            .map_err(|e| e.to_string())?;
            let recorded = crate::reload::reload_and_record(
                &self.live,
                &self.events,
                Trigger::Remember,
                Some(by),
            )
            .await;
            if let Err(e) = recorded {
                self.undo(path, previous, written, by).await;
                return Err(format!(
                    "not remembered: the audit log cannot be written ({e}); the rule was \
                     taken out of the settings file again"
                ));
            }
            Ok(rules)
        })
    }
}
