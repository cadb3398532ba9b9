//! harnessd: a local service that runs LLM agent tasks with confined tools, live
//! policy and a complete audit log.
//!
//! Data flows one way:
//!
//! ```text
//! config (+ reload) ──► daemon scheduler / run ──► agent loop ──► policy ──► approval
//!                                 ▲                   │                        │
//!                            control API              │          tools ──► exec ──► sandbox helper
//!                                                     └──── events / transcripts ◄─┘
//! ```
//!
//! That diagram is how data moves. Imports go one way, down the layers that
//! `tests/it/architecture.rs` lists and enforces (no cycle between top-level
//! modules): `config` calls [`policy`] to compile rules, never the reverse; [`llm`]
//! reports failed attempts to the agent loop, which records them in [`events`];
//! the [`sandbox`] helper has its own types and imports nothing of `config`.
//!
//! - [`config`]: the two operator-edited files, parsed, validated, swapped live.
//! - [`reload`]: file watching and SIGHUP into [`config::LiveConfig`].
//! - [`daemon`]: `harnessd serve` as a library function taking its shutdown
//!   trigger: control API, scheduler, approvals, metrics.
//! - [`control`]: the control API's client, used by the clients in [`commands`].
//! - [`services`]: the start/stop core `run` and `serve` share (config, audit
//!   log, sandbox probe, hot reload); signals are handed in, never installed there.
//! - [`agent`]: the turn loop and the transcript.
//! - [`llm`]: the Anthropic Messages API client and wire types.
//! - [`policy`]: pure allow / ask / deny decisions and the shell splitter.
//! - [`approval`]: who answers `ask` calls.
//! - [`tools`]: tool schemas, validation, results.
//! - [`hooks`]: operator programs consulted around tool calls, run confined.
//! - [`knowledge`]: what a task starts knowing: the root's skills and the
//!   workspace's `AGENTS.md`, read at its start.
//! - [`remember`]: "always allow this call": the narrowest rules, written into
//!   settings.json in place, the policy reloaded and the change recorded.
//! - [`exec`]: the only place processes are spawned; bounded output, timeouts,
//!   per-call cgroups.
//! - [`sandbox`]: the child side, re-executed from this binary; every confinement
//!   layer.
//! - [`events`]: the audit log writer.
//! - [`telemetry`]: OTLP traces made from the audit log's records.
//! - [`notify`]: notification sinks, each a webhook fed from the audit log.
//! - [`commands`]: one module per subcommand; [`cli`] holds their clap types.
//! - [`protocol`]: the shared vocabulary, a leaf every layer may use: tool names,
//!   token counts and prices, task status and stop reason, tier, the approval
//!   request, the audit log's closed sets of values and the control API's bodies
//!   (shared by the server in [`daemon`] and the clients in [`commands`]).
//! - [`disk`]: free space on a filesystem, for the spool budget and the audit
//!   log's reserve.
//! - [`text`]: cutting long text in the middle; escaping hostile text before it
//!   reaches a terminal (every human-readable printer uses it).

#![warn(missing_docs)]

pub mod agent;
pub mod approval;
pub mod cli;
pub mod cli_render;
pub mod commands;
pub mod config;
pub mod control;
pub mod daemon;
pub mod disk;
pub mod events;
pub mod exec;
pub mod hooks;
pub mod knowledge;
pub mod llm;
pub mod mcp;
pub mod notify;
pub mod policy;
pub mod protocol;
pub mod reload;
pub mod remember;
pub mod sandbox;
pub mod services;
pub mod telemetry;
pub mod text;
pub mod tools;
