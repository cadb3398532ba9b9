//! The model side: wire types of the Anthropic Messages API and a client that
//! sends one request with retries, streamed (server-sent events) or not. The client knows nothing of tools, policy or
//! the audit log: it reports each failed attempt to a callback of its caller
//! ([`AnthropicClient::send`]), which decides what to record.

mod anthropic;
mod assemble;
mod budget;
mod overflow;
mod sse;
mod streamed;
mod wire;

/// Re-exported: responses carry it, and callers sum it (it lives in its own leaf
/// module so the audit log can record it without importing this one).
pub use crate::protocol::Usage;
pub use anthropic::{AnthropicClient, FailedAttempt, LlmError, OnText, SendError};
pub use assemble::{Assembler, StreamError};
pub use budget::{BudgetError, Lease, ResponseBudget};
pub use sse::{SseError, SseEvent, SseFramer};
pub use wire::{
    Block, Hold, KNOWN_STOP_REASONS, KnownBlock, Message, ProtocolError, Request, Response, Role,
    ToolChoice, ToolUse, check_fresh_ids, check_protocol,
};
