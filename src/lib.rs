//! harnessd: a local service that runs LLM agent tasks with confined tools, live
//! policy and a complete audit log.
//!
//! Data flows one way:
//!
//! ```text
//! config ──► agent loop ──► policy ──► approval ──► tools ──► exec ──► sandbox helper
//!                │                                              │
//!                └──────────── events / transcripts ◄───────────┘
//! ```
//!
//! - [`config`]: the two operator-edited files, parsed and validated.
//! - [`agent`]: the turn loop and the transcript.
//! - [`llm`]: the Anthropic Messages API client and wire types.
//! - [`policy`]: pure allow / ask / deny decisions.
//! - [`approval`]: who answers `ask` calls.
//! - [`tools`]: tool names, schemas, validation, results.
//! - [`exec`]: the only place processes are spawned; bounded output, timeouts.
//! - [`sandbox`]: the child side, re-executed from this binary.
//! - [`events`]: the audit log writer.

pub mod agent;
pub mod approval;
pub mod cli;
pub mod commands;
pub mod config;
pub mod daemon;
pub mod events;
pub mod exec;
pub mod llm;
pub mod policy;
pub mod reload;
pub mod sandbox;
pub mod startup;
pub mod text;
pub mod tools;
