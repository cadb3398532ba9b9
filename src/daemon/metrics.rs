//! `/metrics` in Prometheus text format. Counters are fed from the audit events as
//! they are written — one source of truth for the record and the numbers — and task
//! gauges are read from the registry at scrape time.

use std::sync::Arc;

use super::registry::Registry;
use crate::events::Event;
use crate::protocol::{TaskStatus, Trigger};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry as PromRegistry;

type Labels = Vec<(String, String)>;

/// Every metric.
pub struct Metrics {
    registry: PromRegistry,
    tasks: Family<Labels, Gauge>,
    model_requests: Counter,
    model_errors: Family<Labels, Counter>,
    tokens: Family<Labels, Counter>,
    /// US dollars of priced model responses (an unpriced one adds nothing).
    cost_usd: Counter<f64, std::sync::atomic::AtomicU64>,
    tool_runs: Family<Labels, Counter>,
    policy_decisions: Family<Labels, Counter>,
    approval_wait: Histogram,
    config_reloads: Family<Labels, Counter>,
    /// MCP server events by server and kind (started, exited, refused, changed).
    mcp_events: Family<Labels, Counter>,
    /// When each pending approval was requested, to time the wait.
    asked: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// The notification sinks' counts, read at scrape time; set once by `serve`.
    notify: std::sync::OnceLock<Arc<crate::notify::Status>>,
    notify_backlog: Family<Labels, Gauge>,
    notify_sent: Family<Labels, Counter>,
    notify_failed: Family<Labels, Counter>,
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Metrics {
    /// Registers every metric; `spans_dropped` is telemetry's own count (spans it
    /// could not queue or send), read as it is.
    pub fn new(spans_dropped: Counter) -> Arc<Metrics> {
        let mut registry = PromRegistry::with_prefix("harnessd");
        let m = Metrics {
            tasks: Family::default(),
            model_requests: Counter::default(),
            model_errors: Family::default(),
            tokens: Family::default(),
            cost_usd: Counter::default(),
            tool_runs: Family::default(),
            policy_decisions: Family::default(),
            approval_wait: Histogram::new([1.0, 5.0, 15.0, 60.0, 300.0, 600.0, 1800.0]),
            config_reloads: Family::default(),
            mcp_events: Family::default(),
            asked: Default::default(),
            notify: std::sync::OnceLock::new(),
            notify_backlog: Family::default(),
            notify_sent: Family::default(),
            notify_failed: Family::default(),
            registry: PromRegistry::default(),
        };
        registry.register("tasks", "Tasks by status", m.tasks.clone());
        registry.register(
            "model_requests",
            "Model requests sent",
            m.model_requests.clone(),
        );
        registry.register(
            "model_errors",
            "Failed model request attempts by HTTP status",
            m.model_errors.clone(),
        );
        registry.register(
            "tokens",
            "Tokens by kind (input, output, cache_read, cache_write)",
            m.tokens.clone(),
        );
        registry.register(
            "cost_usd",
            "US dollars spent on model requests to priced models",
            m.cost_usd.clone(),
        );
        registry.register(
            "tool_runs",
            "Tool calls by tool and outcome",
            m.tool_runs.clone(),
        );
        registry.register(
            "policy_decisions",
            "Policy decisions by tier",
            m.policy_decisions.clone(),
        );
        registry.register(
            "approval_wait_seconds",
            "Time from approval_requested to approval_resolved",
            m.approval_wait.clone(),
        );
        registry.register(
            "config_reloads",
            "Config reloads by outcome",
            m.config_reloads.clone(),
        );
        registry.register(
            "mcp_events",
            "MCP server events by server and kind: started, exited (without being asked), \
             refused (a request of the server refused), changed (definitions drifted)",
            m.mcp_events.clone(),
        );
        registry.register(
            "telemetry_spans_dropped",
            "Trace spans not exported: the export queue was full or the collector did not take them",
            spans_dropped,
        );
        m.register_notify(&mut registry);
        Arc::new(Metrics { registry, ..m })
    }

    /// Registers the notification sinks' metrics.
    fn register_notify(&self, registry: &mut PromRegistry) {
        registry.register(
            "notify_backlog",
            "Lines of the audit log after the last one a notification sink has dealt with \
             (delivered, or passed over as not matching): 0 when it is caught up",
            self.notify_backlog.clone(),
        );
        registry.register(
            "notify_sent",
            "Events a notification sink delivered (a 2xx answer)",
            self.notify_sent.clone(),
        );
        registry.register(
            "notify_failed",
            "POSTs of a notification sink that failed (another status, no connection, a \
             timeout); retries count each",
            self.notify_failed.clone(),
        );
    }

    /// Reports `status`'s sinks from now on.
    pub fn watch_notify(&self, status: Arc<crate::notify::Status>) {
        let _ = self.notify.set(status);
    }

    /// Brings the notification metrics up to the sinks' counts.
    fn render_notify(&self) {
        let Some(status) = self.notify.get() else {
            return;
        };
        for r in status.report() {
            let l = labels(&[("sink", &r.sink)]);
            self.notify_backlog
                .get_or_create(&l)
                .set(i64::try_from(r.backlog).unwrap_or(i64::MAX));
            // The sinks count for the daemon's life; each counter catches up.
            for (family, now) in [(&self.notify_sent, r.sent), (&self.notify_failed, r.failed)] {
                let counter = family.get_or_create(&l);
                counter.inc_by(now.saturating_sub(counter.get()));
            }
        }
    }

    /// Counts one event.
    pub fn observe(&self, event: &Event) {
        match event {
            Event::ModelRequest { .. } => {
                self.model_requests.inc();
            }
            Event::ModelError { status, .. } => {
                let status = status.map_or("none".to_string(), |v| v.to_string());
                self.model_errors
                    .get_or_create(&labels(&[("status", &status)]))
                    .inc();
            }
            Event::ModelResponse { usage, usd, .. } => {
                for (kind, n) in [
                    ("input", usage.input_tokens),
                    ("output", usage.output_tokens),
                    ("cache_read", usage.cache_read_input_tokens),
                    ("cache_write", usage.cache_creation_input_tokens),
                ] {
                    self.tokens
                        .get_or_create(&labels(&[("kind", kind)]))
                        .inc_by(n);
                }
                if let Some(usd) = usd.filter(|v| v.is_finite() && *v >= 0.0) {
                    self.cost_usd.inc_by(usd);
                }
            }
            Event::ToolFinished { tool, is_error, .. } => {
                let outcome = if *is_error { "error" } else { "ok" };
                self.tool_runs
                    .get_or_create(&labels(&[("tool", tool), ("outcome", outcome)]))
                    .inc();
            }
            Event::PolicyDecision { tier, .. } => {
                self.policy_decisions
                    .get_or_create(&labels(&[("tier", tier.as_str())]))
                    .inc();
            }
            Event::ApprovalRequested { approval_id, .. } => {
                if let Ok(mut a) = self.asked.lock() {
                    a.insert(approval_id.clone(), std::time::Instant::now());
                }
            }
            Event::ApprovalResolved { approval_id, .. } => {
                let started = self
                    .asked
                    .lock()
                    .ok()
                    .and_then(|mut a| a.remove(approval_id));
                if let Some(t) = started {
                    self.approval_wait.observe(t.elapsed().as_secs_f64());
                }
            }
            Event::ConfigLoaded { trigger, .. } if *trigger != Trigger::Start => {
                self.config_reloads
                    .get_or_create(&labels(&[("outcome", "loaded")]))
                    .inc();
            }
            Event::ConfigRejected { .. } => {
                self.config_reloads
                    .get_or_create(&labels(&[("outcome", "rejected")]))
                    .inc();
            }
            Event::McpServerStarted { server, .. } => self.mcp(server, "started"),
            Event::McpServerExited { server, .. } => self.mcp(server, "exited"),
            Event::McpRequestRefused { server, .. } => self.mcp(server, "refused"),
            Event::McpToolsChanged { server, .. } => self.mcp(server, "changed"),
            _ => {}
        }
    }

    fn mcp(&self, server: &str, kind: &str) {
        self.mcp_events
            .get_or_create(&labels(&[("server", server), ("kind", kind)]))
            .inc();
    }

    /// The cost counter's value (for tests).
    #[cfg(test)]
    fn cost_usd(&self) -> f64 {
        self.cost_usd.get()
    }

    /// The text exposition, with task gauges from `tasks`.
    pub fn render(&self, tasks: &Registry) -> String {
        let counts = tasks.counts();
        for status in TaskStatus::ALL.map(TaskStatus::as_str) {
            let n = counts.get(status).copied().unwrap_or(0);
            self.tasks
                .get_or_create(&labels(&[("status", status)]))
                .set(n);
        }
        self.render_notify();
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Usage;

    #[test]
    fn priced_responses_add_to_the_cost_and_unpriced_ones_do_not() {
        let m = Metrics::new(Counter::default());
        let response = |usd: Option<f64>| Event::ModelResponse {
            turn: 1,
            stop_reason: "end_turn".into(),
            usage: Usage::default(),
            usd,
            latency_ms: 1,
        };
        m.observe(&response(Some(0.25)));
        m.observe(&response(None));
        m.observe(&response(Some(0.5)));
        assert!((m.cost_usd() - 0.75).abs() < 1e-12);
        let mut out = String::new();
        let _ = encode(&mut out, &m.registry);
        assert!(out.contains("harnessd_cost_usd_total 0.75"), "{out}");
    }
}
