//! Spans from the audit log: each task's records, as they are written, open and
//! close its spans, timed by the records' own `ts`. The trace says what the log
//! says, in its order, and the loop has nothing to keep in step with it.
//!
//! `invoke_agent harnessd` is opened by the loop itself (its trace id goes into
//! `task_started`); under it, `chat {model}` from `model_request` to
//! `model_response`, and `execute_tool {tool}` from `tool_requested` to
//! `tool_finished`, with an `approval` child while a human is asked.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::SdkTracer;

use crate::events::{Event, Record};
use crate::protocol::{Decision, StopReason, Tier, Usage};

/// Characters of a tool's output exported with `telemetry.content`, read from the
/// start of its kept output file.
const OUTPUT_CHARS: usize = 4096;

/// The open spans of one running task: each a context holding its span.
pub(super) struct TaskSpans {
    root: Context,
    model: String,
    chat: Option<Context>,
    tools: HashMap<String, ToolSpans>,
}

/// A call's span and its approval's, while it waits for one.
struct ToolSpans {
    call: Context,
    approval: Option<Context>,
}

/// What the observer needs besides the open spans.
pub(super) struct Observer<'a> {
    pub(super) tracer: &'a SdkTracer,
    pub(super) content: bool,
    /// The root, for reading a call's output file.
    pub(super) root: &'a std::path::Path,
}

/// The `invoke_agent` span of a task's run, under `parent` (the caller's
/// context, or none).
pub(super) fn begin(tracer: &SdkTracer, task_id: &str, model: &str, parent: &Context) -> TaskSpans {
    let span = tracer
        .span_builder("invoke_agent harnessd")
        .with_kind(SpanKind::Internal)
        .with_attributes([
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", "harnessd"),
            KeyValue::new("gen_ai.provider.name", "anthropic"),
            KeyValue::new("gen_ai.request.model", model.to_string()),
            KeyValue::new("harnessd.task_id", task_id.to_string()),
        ])
        .start_with_context(tracer, parent);
    TaskSpans {
        root: parent.with_span(span),
        model: model.to_string(),
        chat: None,
        tools: HashMap::new(),
    }
}

impl TaskSpans {
    /// The run's trace id, as `task_started` records it.
    pub(super) fn trace_id(&self) -> String {
        self.root.span().span_context().trace_id().to_string()
    }
}

/// `ts` of a record as a time; now, if it does not parse.
fn time_of(record: &Record) -> SystemTime {
    chrono::DateTime::parse_from_rfc3339(&record.ts)
        .map(SystemTime::from)
        .unwrap_or_else(|_| SystemTime::now())
}

impl Observer<'_> {
    /// Applies one record to its task's spans; `true` when the task's run ended
    /// (its spans are all closed and it can be forgotten).
    pub(super) fn apply(&self, spans: &mut TaskSpans, record: &Record) -> bool {
        let at = time_of(record);
        match &record.event {
            Event::TaskStarted { prompt, .. } if self.content => {
                let messages = serde_json::json!([{"role": "user",
                    "parts": [{"type": "text", "content": prompt}]}]);
                let messages = KeyValue::new("gen_ai.input.messages", messages.to_string());
                spans.root.span().set_attribute(messages);
            }
            Event::ModelRequest { turn, .. } => self.chat_started(spans, *turn, at),
            Event::ModelError {
                status, attempt, ..
            } => model_error(spans, *status, *attempt, at),
            Event::ModelResponse {
                stop_reason, usage, ..
            } => {
                if let Some(chat) = spans.chat.take() {
                    chat_ended(&chat, stop_reason, usage);
                    chat.span().end_with_timestamp(at);
                }
            }
            Event::ToolRequested {
                tool_use_id,
                tool,
                input,
                ..
            } => self.call_started(spans, tool_use_id, tool, input, at),
            Event::PolicyDecision {
                tool_use_id,
                tier,
                rule,
                ..
            } => decided(spans, tool_use_id, *tier, rule),
            Event::HookDecision { .. } => hook_ran(spans, &record.event, at),
            Event::ApprovalRequested {
                approval_id,
                tool_use_id,
                ..
            } => self.approval_started(spans, approval_id, tool_use_id, at),
            Event::ApprovalResolved {
                tool_use_id,
                decision,
                by,
                ..
            } => approval_ended(spans, tool_use_id, *decision, by, at),
            Event::ToolFinished {
                tool_use_id,
                is_error,
                exit_code,
                output_file,
                ..
            } => {
                if let Some(call) = spans.tools.remove(tool_use_id) {
                    self.call_ended(&call, *is_error, *exit_code, output_file.as_deref(), at);
                }
            }
            Event::TaskFinished {
                stop_reason,
                usage,
                error,
                turns,
                ..
            } => {
                let totals = task_totals(*stop_reason, usage, *turns);
                task_ended(spans, totals, error.as_deref(), at);
                return true;
            }
            Event::TaskInterrupted { .. } => {
                let totals = vec![KeyValue::new("harnessd.stop_reason", "interrupted")];
                task_ended(spans, totals, None, at);
                return true;
            }
            _ => {}
        }
        false
    }

    fn chat_started(&self, spans: &mut TaskSpans, turn: u32, at: SystemTime) {
        if let Some(open) = spans.chat.take() {
            // Sent again after a failure (a context too long, compacted): this
            // request got no response.
            open.span()
                .set_status(Status::error("no response; the request was sent again"));
            open.span().end_with_timestamp(at);
        }
        let span = self
            .tracer
            .span_builder(format!("chat {}", spans.model))
            .with_kind(SpanKind::Client)
            .with_start_time(at)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.provider.name", "anthropic"),
                KeyValue::new("gen_ai.request.model", spans.model.clone()),
                KeyValue::new("harnessd.turn", i64::from(turn)),
            ])
            .start_with_context(self.tracer, &spans.root);
        spans.chat = Some(spans.root.with_span(span));
    }

    fn call_started(
        &self,
        spans: &mut TaskSpans,
        id: &str,
        tool: &str,
        input: &serde_json::Value,
        at: SystemTime,
    ) {
        let server = crate::protocol::mcp::McpToolName::parse(tool);
        let tool = shown_tool(tool, self.content);
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.to_string()),
            KeyValue::new("gen_ai.tool.call.id", id.to_string()),
            KeyValue::new(
                "gen_ai.tool.type",
                if server.is_some() {
                    "extension"
                } else {
                    "function"
                },
            ),
        ];
        if self.content {
            attrs.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                input.to_string(),
            ));
        }
        let span = self
            .tracer
            .span_builder(format!("execute_tool {tool}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attrs)
            .start_with_context(self.tracer, &spans.root);
        let call = spans.root.with_span(span);
        spans.tools.insert(
            id.to_string(),
            ToolSpans {
                call,
                approval: None,
            },
        );
    }

    fn approval_started(&self, spans: &mut TaskSpans, approval_id: &str, id: &str, at: SystemTime) {
        let Some(call) = spans.tools.get_mut(id) else {
            return;
        };
        let span = self
            .tracer
            .span_builder("approval")
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes([KeyValue::new(
                "harnessd.approval_id",
                approval_id.to_string(),
            )])
            .start_with_context(self.tracer, &call.call);
        call.approval = Some(call.call.with_span(span));
    }

    fn call_ended(
        &self,
        call: &ToolSpans,
        is_error: bool,
        exit_code: Option<i32>,
        output_file: Option<&str>,
        at: SystemTime,
    ) {
        if let Some(approval) = &call.approval {
            approval.span().end_with_timestamp(at);
        }
        let span = call.call.span();
        if let Some(code) = exit_code {
            span.set_attribute(KeyValue::new("process.exit.code", i64::from(code)));
        }
        if self.content
            && let Some(output) = output_file.and_then(|f| self.output_start(f))
        {
            span.set_attribute(KeyValue::new("gen_ai.tool.call.result", output));
        }
        if is_error {
            // A status already set (a denial) says more than "error".
            span.set_status(Status::error("the call's result is an error"));
        }
        span.end_with_timestamp(at);
    }

    /// The first [`OUTPUT_CHARS`] of a kept output file (relative to the root).
    fn output_start(&self, file: &str) -> Option<String> {
        use std::io::Read as _;
        let mut bytes = Vec::new();
        std::fs::File::open(self.root.join(file))
            .ok()?
            .take(OUTPUT_CHARS as u64 * 4)
            .read_to_end(&mut bytes)
            .ok()?;
        Some(
            String::from_utf8_lossy(&bytes)
                .chars()
                .take(OUTPUT_CHARS)
                .collect(),
        )
    }
}

/// The response's attributes on its `chat` span.
fn chat_ended(chat: &Context, stop_reason: &str, usage: &Usage) {
    // The GenAI conventions count cached input in `input_tokens`, and say how
    // much of it was cached apart.
    let input =
        usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
    let reasons = Array::String(vec![StringValue::from(stop_reason.to_string())]);
    chat.span().set_attributes([
        KeyValue::new("gen_ai.usage.input_tokens", to_i64(input)),
        KeyValue::new("gen_ai.usage.output_tokens", to_i64(usage.output_tokens)),
        KeyValue::new(
            "gen_ai.usage.cache_read.input_tokens",
            to_i64(usage.cache_read_input_tokens),
        ),
        KeyValue::new(
            "gen_ai.usage.cache_creation.input_tokens",
            to_i64(usage.cache_creation_input_tokens),
        ),
        KeyValue::new("gen_ai.response.finish_reasons", Value::Array(reasons)),
    ]);
}

/// An approval's answer on its span and on the call's.
fn approval_ended(spans: &mut TaskSpans, id: &str, decision: Decision, by: &str, at: SystemTime) {
    let Some(call) = spans.tools.get_mut(id) else {
        return;
    };
    let attrs = [
        KeyValue::new("harnessd.approval.decision", decision.as_str()),
        KeyValue::new("harnessd.approver", by.to_string()),
    ];
    if let Some(approval) = call.approval.take() {
        approval.span().set_attributes(attrs.clone());
        approval.span().end_with_timestamp(at);
    }
    call.call.span().set_attributes(attrs);
}

/// A failed attempt, as an event of the request's span.
fn model_error(spans: &TaskSpans, status: Option<u16>, attempt: u32, at: SystemTime) {
    let Some(chat) = &spans.chat else { return };
    let mut attrs = vec![KeyValue::new("harnessd.attempt", i64::from(attempt))];
    attrs.extend(status.map(|s| KeyValue::new("http.response.status_code", i64::from(s))));
    chat.span()
        .add_event_with_timestamp("model_error", at, attrs);
}

/// The tool's name as a span shows it. The model wrote it: without
/// `telemetry.content`, only a name the Messages API accepts for a tool (64 of
/// `[a-zA-Z0-9_-]` at most, as every offered tool's is) is shown; any other is
/// the model's text, and reads `unknown`.
fn shown_tool(tool: &str, content: bool) -> &str {
    let a_name = (1..=64).contains(&tool.len())
        && tool
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if content || a_name { tool } else { "unknown" }
}

/// A hook's run about a call, as an event of the call's span (its reason is
/// the operator's program's text: content, so not exported).
fn hook_ran(spans: &TaskSpans, event: &Event, at: SystemTime) {
    let Event::HookDecision {
        hook,
        point,
        tool_use_id: Some(id),
        decision,
        duration_ms,
        ..
    } = event
    else {
        return;
    };
    let Some(call) = spans.tools.get(id) else {
        return;
    };
    call.call.span().add_event_with_timestamp(
        "hook_decision",
        at,
        vec![
            KeyValue::new("harnessd.hook.name", hook.to_string()),
            KeyValue::new("harnessd.hook.point", point.as_str()),
            KeyValue::new("harnessd.hook.decision", decision.as_str()),
            KeyValue::new("harnessd.hook.duration_ms", to_i64(*duration_ms)),
        ],
    );
}

/// The policy's decision on the call's span; a denial is its error.
fn decided(spans: &TaskSpans, id: &str, tier: Tier, rule: &str) {
    let Some(call) = spans.tools.get(id) else {
        return;
    };
    let span = call.call.span();
    span.set_attributes([
        KeyValue::new("harnessd.tier", tier.as_str()),
        KeyValue::new("harnessd.rule", rule.to_string()),
    ]);
    if tier == Tier::Deny {
        span.set_status(Status::error(format!("denied by {rule}")));
    }
}

/// The run's end: what it left open closed, its totals and error on the root.
fn task_ended(spans: &mut TaskSpans, totals: Vec<KeyValue>, error: Option<&str>, at: SystemTime) {
    end_open(spans, at);
    let root = spans.root.span();
    root.set_attributes(totals);
    if let Some(error) = error {
        root.set_status(Status::error(error.to_string()));
    }
    root.end_with_timestamp(at);
}

/// Closes whatever the run left open (a request or calls cut short by its end).
fn end_open(spans: &mut TaskSpans, at: SystemTime) {
    if let Some(chat) = spans.chat.take() {
        chat.span()
            .set_status(Status::error("the task ended before the response"));
        chat.span().end_with_timestamp(at);
    }
    for (_, call) in spans.tools.drain() {
        if let Some(approval) = call.approval {
            approval.span().end_with_timestamp(at);
        }
        call.call
            .span()
            .set_status(Status::error("the task ended before the call did"));
        call.call.span().end_with_timestamp(at);
    }
}

/// The task's end, on its root span.
fn task_totals(stop_reason: StopReason, usage: &Usage, turns: u32) -> Vec<KeyValue> {
    let input =
        usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
    vec![
        KeyValue::new("harnessd.stop_reason", stop_reason.as_str()),
        KeyValue::new("harnessd.turns", i64::from(turns)),
        KeyValue::new("gen_ai.usage.input_tokens", to_i64(input)),
        KeyValue::new("gen_ai.usage.output_tokens", to_i64(usage.output_tokens)),
    ]
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
