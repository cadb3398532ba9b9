//! The event types of `events.jsonl` (docs/events.md). Each serialises with a `type` tag;
//! the writer adds `seq`, `ts`, `prev` and `task_id`. The JSON Schema of a line
//! ([`events_schema`]) is generated from these types, and the list of valid
//! `--type` values is read from it, so neither can drift from what is written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::protocol::{
    BaseUrlFrom, CheckpointReason, CompactionMethod, Decision, HookPoint, HookVerdict, Profile,
    Source, StopReason, TaskStatus, Tier, Trigger, Usage,
};

/// One auditable event.
///
/// Fields added after the first release read as their default from older lines
/// (`#[serde(default)]`), and stay required in the schema of what is written. A
/// line of a type this version does not know reads as [`Event::Unknown`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
        /// The model endpoint in force.
        #[serde(default)]
        base_url: String,
        /// Where it came from: `api.base_url` or the `ANTHROPIC_BASE_URL`
        /// environment variable, which overrides it.
        #[serde(default)]
        base_url_from: BaseUrlFrom,
    },
    /// The daemon is stopping.
    DaemonStopping {
        /// What stopped it (`SIGTERM`, `SIGINT`, …).
        reason: String,
    },
    /// A config file was loaded: at start, on a reload whose content changed, on
    /// every SIGHUP, and when a valid file follows a rejected one.
    ConfigLoaded {
        /// File, relative to the root.
        file: String,
        /// sha256 of its bytes.
        sha256: String,
        /// What changed, key by key (rules added and removed, limits); empty at
        /// start and on a reload that changed nothing (a SIGHUP, an undone edit).
        #[serde(default)]
        changes: Vec<String>,
        /// On a reload: changed keys that only take effect after a restart.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        restart_needed: Vec<String>,
        /// `start`, `watch`, `sighup`, `remember` (`approve --remember` added
        /// rules) or `remember_undone` (they were taken out again because their
        /// record failed).
        trigger: Trigger,
        /// With `remember` and `remember_undone`: who added the rules,
        /// `uid:N (name)` or `tty`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// A config file was rejected; the previous version stays in force.
    ConfigRejected {
        /// File, relative to the root.
        file: String,
        /// sha256 of the rejected content; absent when the file could not be
        /// read. Each rejected content is recorded once (and again at a SIGHUP).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
        /// The error, with line and column.
        error: String,
        /// `watch`, `sighup`, `remember` or `remember_undone`, as for
        /// `config_loaded` (a bad file at `start` stops the start instead).
        trigger: Trigger,
        /// With `remember` and `remember_undone`: who added the rules.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// A partial last line of events.jsonl was moved aside at start.
    EventsRepaired {
        /// Where the partial line went.
        torn_file: String,
        /// Its length.
        bytes: u64,
    },
    /// A transcript found at start was refused and moved aside rather than acted
    /// on (e.g. its file name does not match its `task_id`, so a queued one would
    /// be queued again at every start).
    TranscriptRefused {
        /// The file, as found.
        file: String,
        /// Where it was moved.
        moved_to: String,
        /// Why, naming the file and the id.
        error: String,
    },
    /// events.jsonl passed `audit.rotate_mb` and was closed; this is the first
    /// line of the new file.
    LogRotated {
        /// The closed file's name, next to events.jsonl.
        file: String,
        /// Its first seq.
        first_seq: u64,
        /// Its last seq.
        last_seq: u64,
    },
    /// events.jsonl was removed, replaced or cut under the running daemon: the lines
    /// after `last_seq` (up to this one) are not in the files. The first line the
    /// daemon writes into the file it found (or created) at the path; its `prev` is
    /// `last_hash`, so the chain goes on from the last line the daemon wrote.
    EventsGap {
        /// The seq of the last line the daemon had written before.
        last_seq: u64,
        /// That line's hash (the `prev` it gave the next line).
        last_hash: String,
    },
    /// Every transcript agrees with the log up to this line (no save is owed): a
    /// start checks the transcripts against the log from the last one on. Written
    /// every minute while the log grows, and before `daemon_stopping`.
    Checkpoint {
        /// `periodic` or `stop`.
        reason: CheckpointReason,
    },
    /// A task was accepted (the control API answers 202 only after this line is
    /// written and, with `audit.sync = "before_action"`, synced).
    TaskQueued {
        /// The prompt.
        prompt: String,
        /// `cli` or `api`.
        source: Source,
        /// Who submitted it: `uid:N (name)` from the socket's peer credentials,
        /// or `cli`.
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
        source: Source,
        /// The trace this run's spans are exported in (32 hex digits): its own when
        /// telemetry is on, else the caller's `traceparent`'s, if one was given;
        /// absent otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace_id: Option<String>,
        /// The skills offered to the task (listed in its system prompt, loadable
        /// with `load_skill`): each one's name and the sha256 of its `SKILL.md`
        /// as read at the start; absent when none is.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skills: Vec<SkillRecord>,
        /// sha256 of the workspace's whole `AGENTS.md` as read at the start, when
        /// one was added to the system prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agents_md_sha256: Option<String>,
        /// For a child task: the parent's `delegate` call that started it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_tool_use_id: Option<String>,
        /// For a child task narrowed by its `delegate` call: the tools it may use.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tools: Option<Vec<String>>,
    },
    /// A task continues from its transcript.
    TaskResumed {
        /// Model requests made before.
        turns_so_far: u32,
        /// `cli` or `api`.
        source: Source,
        /// Who resumed it: `uid:N (name)` or `cli`.
        by: String,
        /// The trace of this run, as in `task_started`: each run of a task is a
        /// trace of its own (within the caller's, when the task came with a
        /// `traceparent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace_id: Option<String>,
    },
    /// A task was cancelled on request.
    TaskCancelled {
        /// Who cancelled it: `uid:N (name)` or `cli`.
        by: String,
    },
    /// A task was found running or awaiting approval at start (the previous daemon
    /// died), or was still running when a stopping daemon's
    /// `daemon.shutdown_grace_secs` ran out. `resume` continues it.
    TaskInterrupted {
        /// The status it had: `running` or `awaiting_approval`.
        was: TaskStatus,
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
        /// The model's stop reason, as the model API gave it (an open set: the
        /// API may add values).
        stop_reason: String,
        /// Tokens of this request.
        usage: Usage,
        /// What this request cost in US dollars; `null` when the model has no
        /// price (cost unknown).
        usd: Option<f64>,
        /// Time from sending to the full response.
        latency_ms: u64,
    },
    /// The history was compacted before the next request.
    ContextCompacted {
        /// The request whose response triggered it (or whose 400 did).
        turn: u32,
        /// Input tokens the last response reported (estimated from the request
        /// size when a 400 saying the request exceeds the context triggered it).
        tokens_before: u64,
        /// Input tokens of the compacted history, estimated by scaling
        /// `tokens_before` with the history's size.
        tokens_after: u64,
        /// The history before compaction, relative to the root.
        history_file: String,
        /// `placeholders` (old tool results replaced) or `summary` (older turns
        /// summarised too).
        method: CompactionMethod,
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
        #[serde(default)]
        input_sha256: String,
    },
    /// Policy decided a call.
    PolicyDecision {
        /// The call's id.
        tool_use_id: String,
        /// Tool name.
        tool: String,
        /// `allow`, `ask` or `deny`.
        tier: Tier,
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
        /// What the call may write if it runs: `read_only` (a pattern `allow` of a
        /// command tool) or `write`.
        #[serde(default)]
        profile: Profile,
        /// For `run_bash`: the entries of the program table the command met
        /// (`sed e: runs`, `find -delete: writes`).
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        programs: Vec<String>,
        /// Why harnessd raised the call to `ask` above a rule that allowed it
        /// (text a deny rule cannot see).
        #[serde(skip_serializing_if = "Option::is_none")]
        raised: Option<String>,
    },
    /// A hook ran (`hooks` in settings.json): recorded before what it decided
    /// takes effect. A pre_tool hook's deny or ask shows again in the call's
    /// `policy_decision` as `rule: "hook:<name>"`.
    HookDecision {
        /// The hook's name.
        hook: String,
        /// `pre_tool`, `post_tool` or `task_finished`.
        point: HookPoint,
        /// The call it was consulted about; none for `task_finished`.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        tool_use_id: Option<String>,
        /// `deny`, `ask`, `allow`, `continue`, `replace` or `failed`.
        decision: HookVerdict,
        /// The hook's reason, or why it failed (escaped, cut).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        reason: Option<String>,
        /// Wall-clock time of the run.
        duration_ms: u64,
    },
    /// A human is asked to approve a call.
    ApprovalRequested {
        /// Approval id.
        approval_id: String,
        /// The call's id.
        tool_use_id: String,
        /// Tool name.
        tool: String,
        /// The call's input (each string cut like any event string; the
        /// transcript keeps it whole, tied by `input_sha256`).
        #[serde(default)]
        input: Value,
        /// SHA-256 of the whole input's JSON.
        #[serde(default)]
        input_sha256: String,
        /// The rule that asked.
        rule: String,
        /// When an unanswered request becomes a denial (RFC 3339 UTC); `null` when
        /// the approver sets no deadline (a terminal).
        #[serde(default)]
        expires_at: Option<String>,
    },
    /// An approval was answered.
    ApprovalResolved {
        /// Approval id.
        approval_id: String,
        /// The call's id, as in its `approval_requested`.
        #[serde(default)]
        tool_use_id: String,
        /// `approved`, `denied` or `timeout`.
        decision: Decision,
        /// `tty`, `flag`, `uid:N (name)`, `timeout` or `cancel` (the task was
        /// cancelled while the call waited).
        by: String,
        /// Reason given, if any.
        reason: Option<String>,
        /// The allow rules added to settings.json so that the same call runs
        /// without asking (`approve --remember`); absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        remembered: Option<Vec<String>>,
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
        /// Present when the output file does not hold all of the output: the
        /// task's `output.max_spool_mb` was used up, or free space on the
        /// transcripts filesystem was under `audit.reserve_mb`. The rest was
        /// counted (`output_bytes`), not kept; the process was not killed for it.
        #[serde(skip_serializing_if = "Option::is_none")]
        spool_cut: Option<SpoolCutRecord>,
        /// With `sandbox.require = best_effort`: the layers not enforced.
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
        /// For an MCP tool: its server, as named in `mcp.servers`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<String>,
    },
    /// An MCP server was started and answered the handshake (with `task_id` when it
    /// belongs to one task; without for a `shared` server).
    McpServerStarted {
        /// The server, as named in `mcp.servers`.
        server: String,
        /// The protocol revision the handshake settled on.
        protocol: String,
        /// The name and version the server reports for itself (its word only).
        server_info: String,
        /// The process's pid (0 for a remote server).
        pid: u32,
    },
    /// An MCP server process ended without being asked to (it will be started again
    /// at the next use, with backoff).
    McpServerExited {
        /// The server.
        server: String,
        /// Its exit code, when it exited.
        code: Option<i32>,
        /// The signal that killed it, when one did.
        signal: Option<i32>,
    },
    /// What an MCP server lists differs from its pinned definitions: the changed and
    /// new tools are withheld and their calls denied until `harnessd mcp pin`.
    McpToolsChanged {
        /// The server.
        server: String,
        /// Tools listed and not pinned.
        added: Vec<String>,
        /// Tools pinned and no longer listed.
        removed: Vec<String>,
        /// Tools whose definition changed, with the pinned and the new hash.
        changed: Vec<crate::protocol::mcp::ChangedTool>,
    },
    /// A server's tool definitions were written to `policies/mcp.lock.json`.
    McpToolsPinned {
        /// The server.
        server: String,
        /// The tools pinned, by name (every tool the server listed).
        tools: Vec<String>,
        /// Who pinned: `first_use` (the server had no pins yet), `cli`, or
        /// `uid:N (name)` through the control API.
        by: String,
    },
    /// An MCP server sent a request the client refuses (sampling, roots,
    /// elicitation, or any other method); it was answered with an error.
    McpRequestRefused {
        /// The server.
        server: String,
        /// The request's method.
        method: String,
    },
    /// A notification sink's POSTs of one event failed, retries included; the
    /// sink keeps trying it (with a longer pause each round) and sends nothing
    /// after it until it is delivered.
    NotifyFailed {
        /// The sink, as named in `[[notify]]`.
        sink: String,
        /// The seq of the event that could not be delivered: the sink's oldest
        /// undelivered one.
        first_seq: u64,
        /// The log's last seq when this was recorded: the matching events from
        /// `first_seq` to here wait behind the failure.
        last_seq: u64,
        /// The last answer's HTTP status; `null` when there was none (no
        /// connection, a timeout).
        status: Option<u16>,
        /// POSTs of this event so far.
        attempts: u32,
        /// What went wrong with the last one (never the URL).
        error: String,
    },
    /// A console login: a link from `harnessd console-url` was exchanged for a
    /// session.
    ConsoleLogin {
        /// The name given to `console-url --name`.
        name: String,
        /// The session, as the start of its cookie's sha256 (never the cookie).
        session: String,
        /// `console:<name>`.
        by: String,
    },
    /// A console session ended.
    ConsoleLogout {
        /// The name given to `console-url --name`.
        name: String,
        /// The session, as in its `console_login`.
        session: String,
        /// `logout` (the operator logged out) or `expired`
        /// (`daemon.console_session_hours` passed).
        reason: String,
        /// `console:<name>`.
        by: String,
    },
    /// A task ended.
    TaskFinished {
        /// The task's stop reason.
        stop_reason: StopReason,
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
    /// A line this version does not know: an event type a later harnessd writes.
    /// Never written.
    #[serde(other, skip_serializing)]
    #[schemars(skip)]
    Unknown,
}

/// A skill offered to a task (`task_started.skills`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillRecord {
    /// The skill's name.
    pub name: String,
    /// sha256 of its `SKILL.md`'s bytes, hex.
    pub sha256: String,
}

/// What of a call's output its `.out` file does not hold (`tool_finished.spool_cut`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SpoolCutRecord {
    /// Output bytes the file holds.
    pub kept_bytes: u64,
    /// Output bytes counted but not kept.
    pub not_kept_bytes: u64,
    /// Why they were not kept.
    pub reason: SpoolCutReason,
}

/// Why output was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpoolCutReason {
    /// The task used up `output.max_spool_mb`.
    MaxSpoolMb,
    /// Free space was under `audit.reserve_mb`, which is kept for the audit log.
    Reserve,
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

/// One line of events.jsonl: the fields the writer adds (the envelope), then the
/// event. The writer builds lines itself (`super::body`); readers get this back
/// ([`Record::parse`]), and the line's schema is generated from it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(title = "harnessd events.jsonl line")]
// No field beyond the event's own: a misspelled or stray field fails validation.
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Strictly increasing across files and restarts.
    pub seq: u64,
    /// RFC 3339 UTC with milliseconds.
    pub ts: String,
    /// Hex SHA-256 of the previous line's bytes; absent in lines written before
    /// the chain existed.
    #[schemars(regex(pattern = "^[0-9a-f]{64}$"))]
    pub prev: Option<String>,
    /// The task concerned, when there is one.
    pub task_id: Option<String>,
    /// For a child task (one a `delegate` call started): the task that started
    /// it. Every line of a child carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<String>,
    /// The event, with its `type` tag.
    #[serde(flatten)]
    pub event: Event,
    /// For an [`Event::Unknown`] read back: the line's `type` as written, when it
    /// has one. A type this version knows whose fields it cannot read (a value of
    /// a later version, a hand edit) is not the same as a type it never heard of:
    /// a reader that acts on the log must not take it for "nothing happened".
    #[serde(skip)]
    #[schemars(skip)]
    pub unread: Option<String>,
}

/// The envelope as read: every other field is the event's.
#[derive(Deserialize)]
struct Envelope {
    seq: u64,
    #[serde(default)]
    ts: String,
    #[serde(default)]
    prev: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    parent_task_id: Option<String>,
    #[serde(flatten)]
    event: serde_json::Map<String, Value>,
}

impl Record {
    /// The record a line holds; `None` when it is not a line of the log at all
    /// (not JSON, no `seq`). An event this version cannot read (a type or a value
    /// of a later version) is [`Event::Unknown`], so a reader skips it and goes on.
    pub fn parse(line: &[u8]) -> Option<Record> {
        let envelope: Envelope = serde_json::from_slice(line).ok()?;
        Some(Record::from_envelope(envelope))
    }

    /// [`Record::parse`] of a line already parsed as JSON (the live tap).
    pub fn from_value(value: Value) -> Option<Record> {
        let envelope: Envelope = serde_json::from_value(value).ok()?;
        Some(Record::from_envelope(envelope))
    }

    fn from_envelope(envelope: Envelope) -> Record {
        let kind = envelope
            .event
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let event = Event::deserialize(Value::Object(envelope.event)).unwrap_or(Event::Unknown);
        Record {
            seq: envelope.seq,
            ts: envelope.ts,
            prev: envelope.prev,
            task_id: envelope.task_id,
            parent_task_id: envelope.parent_task_id,
            unread: kind.filter(|_| event == Event::Unknown),
            event,
        }
    }

    /// The event's `type`, as written; `None` for [`Event::Unknown`].
    pub fn kind(&self) -> Option<&'static str> {
        self.event.kind()
    }
}

impl Event {
    /// The event's `type` tag; `None` for [`Event::Unknown`].
    pub fn kind(&self) -> Option<&'static str> {
        let kind = match self {
            Event::DaemonStarted { .. } => "daemon_started",
            Event::DaemonStopping { .. } => "daemon_stopping",
            Event::ConfigLoaded { .. } => "config_loaded",
            Event::ConfigRejected { .. } => "config_rejected",
            Event::EventsRepaired { .. } => "events_repaired",
            Event::TranscriptRefused { .. } => "transcript_refused",
            Event::LogRotated { .. } => "log_rotated",
            Event::EventsGap { .. } => "events_gap",
            Event::Checkpoint { .. } => "checkpoint",
            Event::TaskQueued { .. } => "task_queued",
            Event::TaskRequeued { .. } => "task_requeued",
            Event::TaskStarted { .. } => "task_started",
            Event::TaskResumed { .. } => "task_resumed",
            Event::TaskCancelled { .. } => "task_cancelled",
            Event::TaskInterrupted { .. } => "task_interrupted",
            Event::ModelRequest { .. } => "model_request",
            Event::ModelResponse { .. } => "model_response",
            Event::ContextCompacted { .. } => "context_compacted",
            Event::ModelError { .. } => "model_error",
            Event::ToolRequested { .. } => "tool_requested",
            Event::PolicyDecision { .. } => "policy_decision",
            Event::HookDecision { .. } => "hook_decision",
            Event::ApprovalRequested { .. } => "approval_requested",
            Event::ApprovalResolved { .. } => "approval_resolved",
            Event::ToolFinished { .. } => "tool_finished",
            Event::TaskFinished { .. } => "task_finished",
            Event::McpServerStarted { .. } => "mcp_server_started",
            Event::McpServerExited { .. } => "mcp_server_exited",
            Event::McpToolsChanged { .. } => "mcp_tools_changed",
            Event::McpToolsPinned { .. } => "mcp_tools_pinned",
            Event::McpRequestRefused { .. } => "mcp_request_refused",
            Event::NotifyFailed { .. } => "notify_failed",
            Event::ConsoleLogin { .. } => "console_login",
            Event::ConsoleLogout { .. } => "console_logout",
            Event::Unknown => return None,
        };
        Some(kind)
    }
}

/// A field that reads as its default from older lines (`#[serde(default)]`) is
/// still one every line written now has: required in the schema, with no default.
fn require_defaulted_fields(schema: &mut Value) {
    let Some(variants) = schema.get_mut("oneOf").and_then(Value::as_array_mut) else {
        return;
    };
    for variant in variants {
        let Some(props) = variant.get_mut("properties").and_then(Value::as_object_mut) else {
            continue;
        };
        let defaulted: Vec<String> = props
            .iter_mut()
            .filter_map(|(name, prop)| {
                let prop = prop.as_object_mut()?;
                prop.remove("default").map(|_| name.clone())
            })
            .collect();
        if defaulted.is_empty() {
            continue;
        }
        let names: Vec<String> = props.keys().cloned().collect();
        let required: Vec<Value> = variant
            .get("required")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let required: Vec<Value> = names
            .into_iter()
            .filter(|n| defaulted.contains(n) || required.iter().any(|r| r == n.as_str()))
            .map(Value::String)
            .collect();
        variant["required"] = Value::Array(required);
    }
}

/// The JSON Schema of a line of events.jsonl, pretty-printed (shipped as
/// `docs/events.schema.json`).
pub fn events_schema() -> String {
    // Through `Serialize`, which puts `$schema`, `title` and `description` first.
    let mut schema = serde_json::to_value(schemars::schema_for!(Record)).unwrap_or_default();
    require_defaulted_fields(&mut schema);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// Every event `type` harnessd writes, sorted.
pub fn event_types() -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(kind) = map
                    .get("properties")
                    .and_then(|p| p.get("type"))
                    .and_then(|t| t.get("const"))
                    .and_then(Value::as_str)
                {
                    out.push(kind.to_string());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let schema = schemars::schema_for!(Event);
    let mut out = Vec::new();
    walk(&schema.to_value(), &mut out);
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_variant_is_a_valid_type() {
        let types = super::event_types();
        for t in [
            "daemon_started",
            "log_rotated",
            "task_cancelled",
            "tool_finished",
            "transcript_refused",
            "context_compacted",
            "mcp_server_exited",
            "mcp_tools_pinned",
        ] {
            assert!(types.iter().any(|x| x == t), "{t} missing from {types:?}");
        }
        assert_eq!(types.len(), 34, "{types:?}");
    }

    /// Lines of older versions read back typed: a remembered rule's sentence as
    /// its trigger, an `approval_resolved` without `tool_use_id`, a
    /// `policy_decision` without `profile`; a type of a later version is
    /// `Unknown`, and a line without its envelope is no record.
    #[test]
    fn old_and_later_lines_read_back() {
        use super::{Event, Record};
        use crate::protocol::{Decision, Profile, Tier, Trigger};
        let old = [
            r#"{"seq":1,"ts":"t","type":"config_loaded","file":"f","sha256":"s","changes":[],"trigger":"approve --remember by uid:0 (root)"}"#,
            r#"{"seq":2,"ts":"t","prev":null,"task_id":"x","type":"approval_resolved","approval_id":"a","decision":"timeout","by":"timeout","reason":null}"#,
            r#"{"seq":3,"ts":"t","task_id":"x","type":"policy_decision","tool_use_id":"u","tool":"run_bash","tier":"ask","rule":"default","subject":null}"#,
            r#"{"seq":4,"ts":"t","type":"hook_fired","hook":"h"}"#,
        ];
        let records: Vec<Record> = old
            .iter()
            .map(|l| Record::parse(l.as_bytes()).unwrap())
            .collect();
        assert!(matches!(
            records[0].event,
            Event::ConfigLoaded {
                trigger: Trigger::Remember,
                ..
            }
        ));
        assert!(matches!(
            &records[1].event,
            Event::ApprovalResolved { decision: Decision::Timeout, tool_use_id, .. }
                if tool_use_id.is_empty()
        ));
        assert_eq!(records[1].task_id.as_deref(), Some("x"));
        assert!(matches!(
            records[2].event,
            Event::PolicyDecision {
                tier: Tier::Ask,
                profile: Profile::Write,
                ..
            }
        ));
        assert_eq!((records[3].seq, &records[3].event), (4, &Event::Unknown));
        assert_eq!(records[3].kind(), None);
        assert!(Record::parse(br#"{"type":"checkpoint","reason":"stop"}"#).is_none());
        assert!(Record::parse(b"not json").is_none());
    }

    /// A record serialises to the line it was read from: the types hold every
    /// field, in wire order.
    #[test]
    fn a_line_round_trips_through_the_types() {
        let line = r#"{"seq":7,"ts":"2026-01-01T00:00:00.000Z","prev":null,"task_id":"x","type":"approval_resolved","approval_id":"a","tool_use_id":"u","decision":"approved","by":"uid:0 (root)","reason":null}"#;
        let record = super::Record::parse(line.as_bytes()).unwrap();
        assert_eq!(record.kind(), Some("approval_resolved"));
        assert_eq!(serde_json::to_string(&record).unwrap(), line);
    }

    #[test]
    fn shipped_schema_matches_the_types() {
        // Read at run time: a file outside src/ is never an input of the build.
        let shipped = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/events.schema.json"
        ))
        .unwrap();
        assert!(
            shipped == super::events_schema(),
            "docs/events.schema.json is stale: run `harnessd audit schema > docs/events.schema.json`"
        );
    }
}
