//! The event types of `events.jsonl` (SPEC §7). Each serialises with a `type` tag;
//! the writer adds `seq`, `ts` and `task_id`.

use serde::Serialize;
use serde_json::Value;

use crate::usage::Usage;

/// One auditable event.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The daemon started.
    DaemonStarted {
        /// harnessd's version.
        version: String,
        /// Its pid.
        pid: u32,
        /// The kernel's Landlock ABI (0: none).
        landlock_abi: u32,
        /// What the sandbox enforces, item by item.
        enforced: Value,
    },
    /// The daemon is stopping.
    DaemonStopping {
        /// What stopped it (`SIGTERM`, `SIGINT`, …).
        reason: String,
    },
    /// A config file was loaded (at start, or a reload whose content changed).
    ConfigLoaded {
        /// File, relative to the root.
        file: String,
        /// sha256 of its bytes.
        sha256: String,
        /// On a reload: what changed, key by key (rules added and removed, limits).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        changes: Vec<String>,
        /// On a reload: changed keys that only take effect after a restart.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        restart_needed: Vec<String>,
        /// `start`, `watch` or `sighup`.
        trigger: String,
    },
    /// A config file was rejected; the previous version stays in force.
    ConfigRejected {
        /// File, relative to the root.
        file: String,
        /// The error, with line and column.
        error: String,
        /// `watch` or `sighup`.
        trigger: String,
    },
    /// A partial last line of events.jsonl was moved aside at start.
    EventsRepaired {
        /// Where the partial line went.
        torn_file: String,
        /// Its length.
        bytes: u64,
    },
    /// A task was accepted (the control API answers 202 only after this line is
    /// written and, with `audit.sync = "before_action"`, synced).
    TaskQueued {
        /// The prompt.
        prompt: String,
        /// `cli` or `api`.
        source: String,
        /// Who submitted it: `uid:N` from the socket's peer credentials.
        by: String,
    },
    /// A task accepted by a previous daemon and still queued when it stopped (its
    /// transcript says `queued`) was queued again at start; it then starts as a new
    /// task (`task_started`).
    TaskRequeued {
        /// When it was first accepted (the transcript's `created`).
        created: String,
    },
    /// A task began.
    TaskStarted {
        /// The prompt.
        prompt: String,
        /// The model.
        model: String,
        /// `cli` or `api`.
        source: String,
    },
    /// A task continues from its transcript.
    TaskResumed {
        /// Model requests made before.
        turns_so_far: u32,
        /// `cli` or `api`.
        source: String,
    },
    /// A task was found running or awaiting approval at start: the previous daemon
    /// died. `resume` continues it.
    TaskInterrupted {
        /// The status it had.
        was: String,
    },
    /// A model request is about to be sent.
    ModelRequest {
        /// Request number in the task, from 1.
        turn: u32,
        /// Messages in the request.
        messages: usize,
        /// Whether tools were disabled (the max_turns summary request).
        tools_disabled: bool,
    },
    /// A model response arrived.
    ModelResponse {
        /// Request number.
        turn: u32,
        /// The model's stop reason.
        stop_reason: String,
        /// Tokens of this request.
        usage: Usage,
        /// What this request cost in US dollars; `null` when the model has no
        /// price (cost unknown).
        usd: Option<f64>,
        /// Time from sending to the full response.
        latency_ms: u64,
    },
    /// The history was compacted before the next request (SPEC §6).
    ContextCompacted {
        /// The request whose response triggered it (or whose 400 did).
        turn: u32,
        /// Input tokens the last response reported (estimated from the request
        /// size when a 400 "prompt is too long" triggered it).
        tokens_before: u64,
        /// Input tokens of the compacted history, estimated by scaling
        /// `tokens_before` with the history's size.
        tokens_after: u64,
        /// The history before compaction, relative to the root.
        history_file: String,
        /// `placeholders` (old tool results replaced) or `summary` (older turns
        /// summarised too).
        method: String,
        /// Tokens of the summarisation request, when there was one.
        #[serde(skip_serializing_if = "Option::is_none")]
        summary_usage: Option<Usage>,
        /// Time spent compacting, the summarisation request included.
        duration_ms: u64,
    },
    /// One attempt of a model request failed.
    ModelError {
        /// Request number.
        turn: u32,
        /// HTTP status, if there was a response.
        status: Option<u16>,
        /// Attempt number, from 1.
        attempt: u32,
        /// Wait before the next attempt; absent when it will not be retried.
        retry_in_ms: Option<u64>,
        /// What went wrong.
        message: String,
    },
    /// The model asked for a tool call.
    ToolRequested {
        /// The call's id.
        tool_use_id: String,
        /// Tool name as the model wrote it.
        tool: String,
        /// Input as the model wrote it (strings over the cap are cut).
        input: Value,
        /// Hex SHA-256 of the whole input as the transcript holds it (see
        /// [`input_sha256`](super::input_sha256)): ties a cut `input` to the full one.
        input_sha256: String,
    },
    /// Policy decided a call.
    PolicyDecision {
        /// The call's id.
        tool_use_id: String,
        /// Tool name.
        tool: String,
        /// `allow`, `ask` or `deny`.
        tier: String,
        /// The rule that decided, or `default`.
        rule: String,
        /// The argument matched (normalised path or command).
        subject: Option<String>,
        /// For `run_bash`: the simple commands seen (quoted where needed).
        #[serde(skip_serializing_if = "Option::is_none")]
        commands: Option<Vec<String>>,
        /// For `run_bash`: whether the command was proven literal, so that allow
        /// patterns could apply.
        #[serde(skip_serializing_if = "Option::is_none")]
        provable: Option<bool>,
        /// For `run_bash`: why it was not provable.
        #[serde(skip_serializing_if = "Option::is_none")]
        not_provable: Option<String>,
    },
    /// A human is asked to approve a call.
    ApprovalRequested {
        /// Approval id.
        approval_id: String,
        /// The call's id.
        tool_use_id: String,
        /// Tool name.
        tool: String,
        /// The rule that asked.
        rule: String,
    },
    /// An approval was answered.
    ApprovalResolved {
        /// Approval id.
        approval_id: String,
        /// `approved`, `denied` or `timeout`.
        decision: String,
        /// `tty`, `flag`, `uid:N` or `timeout`.
        by: String,
        /// Reason given, if any.
        reason: Option<String>,
    },
    /// A tool call ended (ran, or was answered without running).
    ToolFinished {
        /// The call's id.
        tool_use_id: String,
        /// Tool name.
        tool: String,
        /// Exit code of the process, when it exited.
        exit_code: Option<i32>,
        /// Wall-clock time.
        duration_ms: u64,
        /// Output bytes produced.
        output_bytes: u64,
        /// Whether the model saw a cut version.
        truncated: bool,
        /// Whether the result is an error.
        is_error: bool,
        /// Full output file, relative to the root, when one was kept.
        output_file: Option<String>,
        /// With `sandbox.require = best_effort`: the layers not enforced.
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
    },
    /// A task ended.
    TaskFinished {
        /// The task's stop reason (SPEC §6).
        stop_reason: String,
        /// Model requests made.
        turns: u32,
        /// Tokens summed over the task.
        usage: Usage,
        /// What the task cost in US dollars; `null` when unknown (a request to a
        /// model without a price).
        usd: Option<f64>,
        /// Wall-clock time.
        duration_ms: u64,
        /// The error, when stop_reason is `error`.
        error: Option<String>,
    },
}

impl Event {
    /// `tool_requested` for one call, with the hash that ties a cut event to the
    /// transcript's full input.
    pub fn tool_requested(tool_use_id: &str, tool: &str, input: &Value) -> Event {
        Event::ToolRequested {
            tool_use_id: tool_use_id.to_string(),
            tool: tool.to_string(),
            input: input.clone(),
            input_sha256: super::input_sha256(input),
        }
    }
}
