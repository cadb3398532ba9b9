//! MCP servers: their processes (confined like tools, started on first use,
//! restarted with backoff), the connection to each (the official SDK, `rmcp`),
//! their tool definitions held against the pins of `policies/mcp.lock.json`, and a
//! call's result as the model reads it.
//!
//! Policy decides whether a call runs (`policy::decide_mcp`); this module only runs
//! it. The sandbox confines a server process (`exec`); this module only asks for
//! one ([`launch`]).

pub mod call;
pub mod client;
pub mod content;
pub mod http;
pub mod hub;
pub mod inspect;
pub mod launch;
pub mod pins;
pub mod session;
pub mod spec;

use std::time::Duration;

pub use hub::{Hub, TaskServers};

/// Why an MCP server or call failed; each message is written for the model and
/// the operator alike.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The process could not be started (the sandbox refused, the program is missing).
    #[error("MCP server {0} could not be started: {1}")]
    Start(String, String),
    /// The connection or the call failed.
    #[error("MCP server {0}: {1}")]
    Client(String, client::ClientError),
    /// The server died during the call.
    #[error(
        "MCP server {server} ended during the call ({status}); it will be started again at \
         the next use{}", retry_note(*retry_in)
    )]
    Died {
        /// The server.
        server: String,
        /// How it ended.
        status: String,
        /// When it may be started again.
        retry_in: Duration,
    },
    /// The server died before and its next start is held back.
    #[error("MCP server {server} ended recently and is held back; try again in {} s", retry_in.as_secs().max(1))]
    HeldBack {
        /// The server.
        server: String,
        /// How long until it may be started.
        retry_in: Duration,
    },
    /// The lock file could not be written.
    #[error("cannot write the MCP lock file: {0}")]
    Pins(String),
    /// The audit log failed: nothing more may happen unrecorded.
    #[error(transparent)]
    Log(#[from] crate::events::EventError),
    /// A state that should not occur.
    #[error("internal error: {0}")]
    Internal(String),
}

fn retry_note(wait: Duration) -> String {
    if wait.is_zero() {
        String::new()
    } else {
        format!(", after {} s", wait.as_secs())
    }
}
