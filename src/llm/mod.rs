//! The model side: wire types of the Anthropic Messages API and a client that
//! sends one request with retries. The client knows nothing of tools or policy.

mod anthropic;
mod wire;

pub use anthropic::{AnthropicClient, Attempt, LlmError};
pub use wire::{Block, KnownBlock, Message, Request, Response, Role, ToolChoice, Usage};
