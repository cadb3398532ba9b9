//! "Always allow this call" for a running `serve` or `run`: the narrowest allow
//! rules written into settings.json ([`crate::tools::remember_call`]), then the
//! policy reloaded at once and the reload recorded, naming who added the rules.
//!
//! Reloading here rather than waiting for the file watcher means the very next
//! identical call, even one already on its way, finds the rule in force.

use std::sync::Arc;

use crate::approval::{ApprovalRequest, Remember, RememberFuture};
use crate::config::{ConfigSource, LiveConfig};
use crate::events::EventLog;

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

impl Remember for LiveRemember {
    fn remember<'a>(&'a self, req: &'a ApprovalRequest, by: &'a str) -> RememberFuture<'a> {
        Box::pin(async move {
            let loaded = self.live.current();
            let (tool, input) = (req.tool.clone(), req.input.clone());
            // Judging a file tool's path and writing the file are blocking work.
            let rules = tokio::task::spawn_blocking(move || {
                crate::tools::remember_call(&loaded, &tool, &input)
            })
            .await
            .map_err(|e| format!("internal error while remembering: {e}"))?
            .map_err(|e| e.to_string())?;
            let trigger = format!("approve --remember by {by}");
            crate::reload::reload_and_record(&self.live, &self.events, &trigger, &mut None)
                .await
                .map_err(|e| format!("the rule was written but the reload not recorded: {e}"))?;
            Ok(rules)
        })
    }
}
