//! `[telemetry]`: where traces are exported, and whether they carry content.
//!
//! The standard `OTEL_*` variables are applied over it where the process starts
//! (`telemetry::Settings`): this module owns the file's shape only.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[telemetry]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// OTLP/HTTP endpoint traces are exported to (protobuf, `/v1/traces` appended),
    /// e.g. `"http://127.0.0.1:4318"`; unset: no export. The environment variables
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the whole URL) and
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` override it, and `OTEL_SDK_DISABLED=true`
    /// turns export off. Read at start: a change needs a restart.
    pub otlp_endpoint: Option<String>,
    /// Spans carry the prompt, each call's input and the start of its output (as the
    /// audit log holds them); off, they carry names, ids, counts and decisions only.
    pub content: bool,
}

impl TelemetryConfig {
    /// An endpoint, when set, is an http(s) URL: `Err` is the key and why not.
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        let Some(url) = &self.otlp_endpoint else {
            return Ok(());
        };
        super::file::http_url(url).map_err(|why| {
            (
                "telemetry.otlp_endpoint",
                format!(
                    "{url:?} is not an http(s) URL: {why}; write the collector's OTLP/HTTP \
                     address, e.g. \"http://127.0.0.1:4318\", or remove the key"
                ),
            )
        })
    }
}
