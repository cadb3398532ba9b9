//! Command-line interface: the clap types of every subcommand.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// harnessd runs LLM agent tasks with confined tools, live policy and a complete
/// audit log.
#[derive(Debug, Parser)]
#[command(name = "harnessd", version, about)]
pub struct Cli {
    /// The root directory (config/, policies/, workspace/, transcripts/).
    #[arg(long, global = true, env = "HARNESSD_ROOT", default_value = ".")]
    pub root: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one task in-process: answer on stdout, progress on stderr.
    Run {
        /// Approve every ask-tier call without asking.
        #[arg(long)]
        yes: bool,
        /// Override loop.max_turns for this task.
        #[arg(long)]
        max_turns: Option<u32>,
        /// Exit 5 when the task ended its turn but a call was denied, refused by the
        /// sandbox, or its approval timed out.
        #[arg(long)]
        strict: bool,
        /// The task: the prompt given to the model.
        task: String,
    },
    /// The daemon: control API on the unix socket, hot reload, approvals.
    Serve,
    /// Submit a task to the daemon; prints its id.
    Submit {
        /// Follow the task to its end, showing each call with its decision and each
        /// approval it waits for; exit like `run`.
        #[arg(long)]
        wait: bool,
        /// Override loop.max_turns.
        #[arg(long)]
        max_turns: Option<u32>,
        /// Override api.model for this task.
        #[arg(long)]
        model: Option<String>,
        /// Join the caller's trace: a W3C traceparent
        /// (00-<trace id>-<parent id>-<flags>); the task's spans go under it.
        #[arg(long, env = "TRACEPARENT", value_name = "TP")]
        traceparent: Option<String>,
        /// With `--wait`: exit 5 when the task ended its turn but a call was denied,
        /// refused by the sandbox, or its approval timed out.
        #[arg(long, requires = "wait")]
        strict: bool,
        /// Read the prompt from FILE (`-`: standard input) instead of TASK.
        #[arg(
            short = 'f',
            long = "file",
            value_name = "FILE",
            conflicts_with = "task"
        )]
        file: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The task: the prompt given to the model.
        #[arg(required_unless_present = "file")]
        task: Option<String>,
    },
    /// List the daemon's tasks, each child task nested under its parent.
    Tasks {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one task from its transcript and the audit log (no daemon needed):
    /// each tool call with its decision, approver, exit and output file, then the
    /// tree of its child tasks with each one's cost.
    Show {
        /// The task id, as `submit` printed it.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a task (kills its running tool).
    Cancel {
        /// The task id, as `submit` printed it.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Continue an interrupted or stopped task.
    Resume {
        /// The task id, as `submit` printed it.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List calls waiting for approval.
    Approvals {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a waiting call.
    Approve {
        /// Approval id.
        id: String,
        /// Also add the narrowest allow rule for this call (the literal command,
        /// path or code) to settings.json, so the same call runs without asking.
        #[arg(long)]
        remember: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a one-time login link for the web console (docs/console.md).
    ConsoleUrl {
        /// Who the link is for: what they do is recorded as `console:<name>`
        /// (default: your user name).
        #[arg(long)]
        name: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deny a waiting call.
    Deny {
        /// Approval id.
        id: String,
        /// Told to the model.
        #[arg(long)]
        reason: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Query the audit log, across rotated files: through the daemon when it
    /// runs, from the files otherwise.
    Events(EventsArgs),
    /// Audit-log tools.
    Audit {
        /// Which.
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Validate both files and print the effective settings.
    Check {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the skills under skills/, each offered or not offered and why (file and
    /// line), as a task's start reads them.
    Skills {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write a root with the default files.
    Init {
        /// Where (default: the current directory).
        dir: Option<PathBuf>,
    },
    /// MCP servers: their tools, definition hashes and drift; accepting a server's
    /// current definitions.
    Mcp {
        /// Which.
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Policy tools: what a call would get, and the settings schema.
    Policy {
        /// Which.
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Re-evaluate recorded tool calls against the live policy, or a candidate
    /// settings file; prints the calls whose decision would change. Nothing is
    /// executed and the live file is not touched.
    Replay {
        /// Judge by this settings file instead of the live one (try a change out
        /// before the daemon applies it).
        #[arg(long, value_name = "FILE")]
        settings: Option<PathBuf>,
        /// Transcripts (`transcripts/<task_id>.json`) or folders of them; default:
        /// the root's transcripts folder.
        #[arg(value_name = "TRANSCRIPTS")]
        paths: Vec<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the completion script for SHELL on stdout (the Debian package installs
    /// bash, zsh and fish ones).
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout: `harnessd man | man -l -`.
    Man,
    /// Run a command confined exactly as a tool would be, to try a policy out.
    /// Exit code: the command's, 124 on timeout, 125 if the sandbox refused.
    Sandbox {
        /// Run it with the read-only profile a call allowed by a pattern rule gets
        /// (writes only /dev/null and a private /tmp), instead of the write set.
        #[arg(long)]
        read_only: bool,
        /// The command and its arguments (after `--`).
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
}

/// `harnessd events` filters (the same as `/v1/events` query parameters).
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// Only this task's events (and its child tasks').
    #[arg(long)]
    pub task: Option<String>,
    /// Only events of this type (an unknown type is a usage error).
    #[arg(long = "type")]
    pub kind: Option<String>,
    /// Only events about this tool (tool_requested, policy_decision, …).
    #[arg(long)]
    pub tool: Option<String>,
    /// From this time: RFC 3339, a date (2026-11-30) or a duration back (7d, 12h).
    #[arg(long)]
    pub since: Option<String>,
    /// Up to this time: RFC 3339, a date or a duration back.
    #[arg(long)]
    pub until: Option<String>,
    /// Only lines whose JSON text matches this regular expression.
    #[arg(long)]
    pub grep: Option<String>,
    /// Keep streaming new events (needs the daemon).
    #[arg(long)]
    pub follow: bool,
    /// Print the log's JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `harnessd audit …`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check every line's `seq` and `prev` across all files of the log: exit 0
    /// with the chain head, or 1 naming the first bad file, line and seq.
    Verify {
        /// Also check that the log still holds this line unchanged: `SEQ:HASH`, a
        /// chain head as harnessd logged it (journald) at start, stop or hourly. A
        /// log rewritten whole, chain and all, or cut after it, fails.
        #[arg(long, value_name = "SEQ:HASH")]
        head: Option<crate::events::verify::Head>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of an events.jsonl line (shipped as
    /// docs/events.schema.json).
    Schema,
}

/// `harnessd mcp …`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Every server of `mcp.servers`: how many processes run, the protocol
    /// revision, each tool with its pinned hash and its state (pinned, changed,
    /// new, removed), started once in the sandbox to list what it serves now.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Accept what SERVER lists now: its definitions are written to
    /// policies/mcp.lock.json (review and commit the diff) and recorded.
    Pin {
        /// The server's name in `mcp.servers`.
        server: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `harnessd policy …`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Print the decision, the rule that made it, for run_bash the simple
    /// commands seen, and whether allowed_paths would still refuse a file tool's
    /// path. Exit code: 0 allow, 3 ask, 4 deny, 2 when the call cannot be judged.
    Test {
        /// The tool (run_bash, read_file, …).
        tool: String,
        /// The primary argument (command, path, code) or the input as a JSON
        /// object; for file tools the path alone is enough.
        input: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also run the pre_tool hooks on the call (confined, as for a task) and
        /// show each one's answer; the exit code is then the final decision.
        #[arg(long)]
        hooks: bool,
    },
    /// Print the JSON Schema of settings.json (shipped as policies/settings.schema.json).
    Schema,
}
