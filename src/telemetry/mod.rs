//! Traces over OTLP/HTTP: one `invoke_agent harnessd` span per run of a task, a
//! `chat {model}` span per model request and an `execute_tool {tool}` span per
//! call, with the OpenTelemetry GenAI attribute names and harnessd's own.
//!
//! Set up once, at start, from `[telemetry]` and the standard `OTEL_*` variables
//! ([`Settings::resolve`]). The loop opens a task's root span ([`Telemetry::begin_task`],
//! whose trace id `task_started` records); every other span is made from the
//! audit log's records as they are written (`spans`), off the task's path. Spans
//! leave through a bounded queue (`export`): a slow or absent collector costs
//! spans, counted in `harnessd_telemetry_spans_dropped_total`, never a task's time
//! or the daemon's memory.

mod export;
mod spans;
mod traceparent;

pub use traceparent::{TraceParent, TraceParentError};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use prometheus_client::metrics::counter::Counter;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::config::{ConfigError, TelemetryConfig};
use crate::events::Record;

/// The variable that, when set, overrides `telemetry.otlp_endpoint`.
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The traces URL itself, over [`ENDPOINT_ENV`].
pub const TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `true`: no export, whatever else says.
pub const DISABLED_ENV: &str = "OTEL_SDK_DISABLED";
/// The service's name (default `harnessd`).
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";
/// More resource attributes, `key=value,key=value`.
pub const RESOURCE_ENV: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// How long the end of `run` (or `serve`) waits for the log's last records to
/// become spans.
const APPLY_BOUND: Duration = Duration::from_secs(1);
/// How long it then waits for the last spans to leave: one export request's own
/// timeout and a second, so a batch already on its way under load does not cost
/// the batch queued behind it (the run's root span is often that one).
const FLUSH_BOUND: Duration = Duration::from_secs(export::EXPORT_TIMEOUT.as_secs() + 1);

/// Telemetry as configured: where to, what it carries, the resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The traces URL (`…/v1/traces`).
    pub traces_url: String,
    /// Whether spans carry the prompt, inputs and outputs.
    pub content: bool,
    /// `service.name` and the other resource attributes.
    pub resource: Vec<(String, String)>,
}

impl Settings {
    /// `[telemetry]` with the environment (through `env`) over it:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the traces URL itself), else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended), else
    /// `otlp_endpoint` — the environment winning as `ANTHROPIC_BASE_URL` wins over
    /// `api.base_url` (the SDKs' convention); `OTEL_SDK_DISABLED=true` turns it all
    /// off. `OTEL_SERVICE_NAME` over a `service.name` in `OTEL_RESOURCE_ATTRIBUTES`,
    /// over `harnessd`. `None`: telemetry is off. A bad variable is a config error
    /// naming it.
    pub fn resolve(
        config: &TelemetryConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, ConfigError> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        // Checked even while export is off: a bad value is found before it matters.
        let extra = match set(RESOURCE_ENV) {
            Some(text) => resource_attributes(&text)?,
            None => Vec::new(),
        };
        let url_of = |name: &str| -> Result<Option<String>, ConfigError> {
            let Some(url) = set(name) else {
                return Ok(None);
            };
            crate::config::http_url(&url).map_err(|why| {
                env_error(
                    name,
                    format!("{url:?} is not an http(s) URL ({why}); fix it or unset it"),
                )
            })?;
            Ok(Some(url))
        };
        let base = |url: &str| format!("{}/v1/traces", url.trim_end_matches('/'));
        let traces_url = match (url_of(TRACES_ENDPOINT_ENV)?, url_of(ENDPOINT_ENV)?) {
            (Some(url), _) => url,
            (None, Some(url)) => base(&url),
            (None, None) => match &config.otlp_endpoint {
                Some(url) => base(url),
                None => return Ok(None),
            },
        };
        if set(DISABLED_ENV).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let mut resource = vec![
            ("service.name".to_string(), "harnessd".to_string()),
            (
                "service.version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            ),
        ];
        resource.extend(extra);
        if let Some(name) = set(SERVICE_NAME_ENV) {
            resource.push(("service.name".to_string(), name));
        }
        Ok(Some(Settings {
            traces_url,
            content: config.content,
            resource,
        }))
    }
}

fn env_error(name: &str, message: String) -> ConfigError {
    ConfigError::invalid(&format!("environment variable {name}"), None, name, message)
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs split by commas, values
/// percent-decoded (the W3C Baggage form the specification names).
fn resource_attributes(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut pairs = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
            return Err(env_error(
                RESOURCE_ENV,
                format!(
                    "{item:?} is not key=value; write e.g. deployment.environment=prod,team=ops"
                ),
            ));
        };
        let Some(value) = percent_decoded(value.trim()) else {
            return Err(env_error(
                RESOURCE_ENV,
                format!("{item:?}: the value has a broken %-escape"),
            ));
        };
        pairs.push((key.trim().to_string(), value));
    }
    Ok(pairs)
}

fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The ids a run of a task is traced under, for its first record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTrace {
    /// 32 hex digits.
    pub trace_id: String,
}

/// The telemetry of a running `run` or `serve`; cheap to clone. Off, it does
/// nothing, and costs nothing.
#[derive(Clone, Default)]
pub struct Telemetry {
    on: Option<Arc<On>>,
}

struct On {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    content: bool,
    root: PathBuf,
    /// The open spans of each running task, by task id.
    open: Mutex<HashMap<String, spans::TaskSpans>>,
    dropped: Counter,
    /// The seq of the last record applied, so the end can wait for the last ones.
    applied: AtomicU64,
}

impl Telemetry {
    /// Telemetry that exports nothing.
    pub fn off() -> Telemetry {
        Telemetry::default()
    }

    /// Starts the exporter for `settings` (its HTTP requests run on the current
    /// tokio runtime); `root` is where the log's relative paths start.
    pub fn start(settings: &Settings, root: PathBuf) -> Result<Telemetry, ConfigError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            ConfigError::invalid(
                "telemetry",
                None,
                "telemetry.otlp_endpoint",
                format!("cannot {what}: {e}"),
            )
        };
        let http = reqwest::Client::builder()
            .timeout(export::EXPORT_TIMEOUT)
            .connect_timeout(export::EXPORT_TIMEOUT)
            .build()
            .map_err(|e| fail("build the exporter's HTTP client", &e))?;
        let client = export::Client {
            http,
            runtime: tokio::runtime::Handle::current(),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(settings.traces_url.clone())
            .with_timeout(export::EXPORT_TIMEOUT)
            .build()
            .map_err(|e| fail("build the OTLP exporter", &e))?;
        let resource = Resource::builder_empty()
            .with_attributes(
                settings
                    .resource
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        let dropped = Counter::default();
        let processor = export::Bounded::start(exporter, &resource, dropped.clone())
            .map_err(|e| fail("start the export thread", &e))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("harnessd");
        Ok(Telemetry {
            on: Some(Arc::new(On {
                provider,
                tracer,
                content: settings.content,
                root,
                open: Mutex::default(),
                dropped,
                applied: AtomicU64::new(0),
            })),
        })
    }

    /// Whether spans are exported.
    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// Spans lost: the queue was full, or their export failed. Off, always 0.
    pub fn spans_dropped(&self) -> Counter {
        self.on
            .as_ref()
            .map(|on| on.dropped.clone())
            .unwrap_or_default()
    }

    /// Opens the `invoke_agent` span of a run of `task_id` (once: a run whose
    /// span is open already keeps it), under the caller's `traceparent` when the
    /// task came with one; returns the trace id its first record names. Off, the
    /// caller's trace id, if any, so the log still names the trace it belongs to.
    pub fn begin_task(
        &self,
        task_id: &str,
        model: &str,
        traceparent: Option<&str>,
    ) -> Option<TaskTrace> {
        let parent = traceparent.and_then(|t| TraceParent::parse(t).ok());
        let Some(on) = &self.on else {
            return parent.map(|p| TaskTrace {
                trace_id: p.trace_id,
            });
        };
        let cx = match &parent {
            Some(p) => remote_parent(p),
            None => Context::new(),
        };
        let mut open = on.open.lock().unwrap_or_else(PoisonError::into_inner);
        let spans = open
            .entry(task_id.to_string())
            .or_insert_with(|| spans::begin(&on.tracer, task_id, model, &cx));
        Some(TaskTrace {
            trace_id: spans.trace_id(),
        })
    }

    /// Applies one audit record (the log's JSON line) to its task's spans.
    pub fn observe(&self, line: &Value) {
        let Some(on) = &self.on else { return };
        let Some(record) = Record::from_value(line.clone()) else {
            return;
        };
        on.applied.fetch_max(record.seq, Ordering::Relaxed);
        let Some(task_id) = &record.task_id else {
            return;
        };
        let mut open = on.open.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(spans) = open.get_mut(task_id) else {
            return;
        };
        let observer = spans::Observer {
            tracer: &on.tracer,
            content: on.content,
            root: &on.root,
        };
        if observer.apply(spans, &record) {
            open.remove(task_id);
        }
    }

    /// Puts telemetry between the audit log and its tap: each written line is
    /// applied here, then passed on to `tap`. Off, `tap` itself.
    pub fn tee(
        &self,
        tap: Option<mpsc::UnboundedSender<Value>>,
    ) -> Option<mpsc::UnboundedSender<Value>> {
        if !self.is_on() {
            return tap;
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        let this = self.clone();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                this.observe(&line);
                if let Some(tap) = &tap {
                    let _ = tap.send(line);
                }
            }
        });
        Some(tx)
    }

    /// Waits (briefly) until the records up to `last_seq` are applied, then sends
    /// what is queued, within a short bound; what is left is counted dropped.
    pub async fn shutdown(&self, last_seq: u64) {
        let Some(on) = self.on.clone() else { return };
        let deadline = tokio::time::Instant::now() + APPLY_BOUND;
        while on.applied.load(Ordering::Relaxed) < last_seq
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ended =
            tokio::task::spawn_blocking(move || on.provider.shutdown_with_timeout(FLUSH_BOUND))
                .await;
        if let Ok(Err(e)) = ended {
            tracing::warn!("telemetry: the last spans were not all sent: {e}");
        }
        let dropped = self.spans_dropped().get();
        if dropped > 0 {
            tracing::warn!(
                target: crate::text::NOTICE,
                "harnessd: telemetry: {dropped} spans were not exported (queue full or collector unreachable)"
            );
        }
    }
}

/// The caller's span as the parent of a run's root span.
fn remote_parent(p: &TraceParent) -> Context {
    let flags = if p.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let trace_id = TraceId::from_hex(&p.trace_id).unwrap_or(TraceId::INVALID);
    let span_id = SpanId::from_hex(&p.parent_id).unwrap_or(SpanId::INVALID);
    let sc = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    Context::new().with_remote_span_context(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(file: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<Settings>, String> {
        let config = TelemetryConfig {
            otlp_endpoint: file.map(str::to_string),
            content: false,
        };
        let env = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        Settings::resolve(&config, &env).map_err(|e| e.to_string())
    }

    fn url(file: Option<&str>, vars: &[(&str, &str)]) -> Option<String> {
        resolve(file, vars).unwrap().map(|s| s.traces_url)
    }

    #[test]
    fn the_environment_wins_over_the_file_and_the_traces_url_over_the_base() {
        let file = Some("http://file:4318");
        assert_eq!(url(None, &[]), None);
        assert_eq!(url(file, &[]).unwrap(), "http://file:4318/v1/traces");
        let base = (ENDPOINT_ENV, "http://env:4318/");
        assert_eq!(url(file, &[base]).unwrap(), "http://env:4318/v1/traces");
        let traces = (TRACES_ENDPOINT_ENV, "http://env:4318/custom");
        assert_eq!(
            url(file, &[base, traces]).unwrap(),
            "http://env:4318/custom"
        );
        assert_eq!(url(file, &[base, (DISABLED_ENV, "TRUE")]), None);
        assert!(url(file, &[(DISABLED_ENV, "false")]).is_some());
        // An empty variable is as good as unset.
        assert_eq!(
            url(file, &[(ENDPOINT_ENV, " ")]).unwrap(),
            "http://file:4318/v1/traces"
        );
    }

    #[test]
    fn the_service_is_named_by_the_most_specific_setting() {
        let name = |vars: &[(&str, &str)]| {
            let s = resolve(Some("http://c:4318"), vars).unwrap().unwrap();
            let map: HashMap<String, String> = s.resource.into_iter().collect();
            map["service.name"].clone()
        };
        assert_eq!(name(&[]), "harnessd");
        let attrs = (RESOURCE_ENV, "service.name=from-attrs, team = a%20b");
        assert_eq!(name(&[attrs]), "from-attrs");
        assert_eq!(name(&[attrs, (SERVICE_NAME_ENV, "from-name")]), "from-name");
        for bad in ["team", "=x", "team=%zz", "team=%4"] {
            let e = resolve(None, &[(RESOURCE_ENV, bad)]).unwrap_err();
            assert!(e.contains(RESOURCE_ENV), "{bad}: {e}");
        }
    }
}
