//! The words every layer speaks: tool names, token counts and prices, where a
//! task stands and why it stopped, a call's tier, an approval request, the
//! closed sets of values the audit log records, and the control API's bodies.
//!
//! A leaf: it imports nothing of the crate, so any module may use it without
//! pulling in the module that happens to produce a value (the control API's
//! messages no longer hang off the agent loop, nor the audit log off the model
//! client). What acts on these values stays where it acts: the approval logic
//! in `approval`, the rule matching in `policy`, the writer in `events`.

pub mod approval;
pub mod audit;
pub mod control;
pub mod hash;
pub mod mcp;
pub mod task;
pub mod tier;
pub mod tool_name;
pub mod tree;
pub mod usage;

pub use approval::ApprovalRequest;
pub use audit::{
    BaseUrlFrom, CheckpointReason, CompactionMethod, Decision, HookPoint, HookVerdict, Profile,
    Source, Trigger,
};
pub use control::{
    Approval, ApprovalList, DecisionRequest, DecisionResponse, ErrorBody, ErrorDetail, LinkRequest,
    LinkResponse, SubmitRequest, SubmitResponse, Task, TaskList,
};
pub use hash::{canonical_json, sha256_hex};
pub use task::{StopReason, TaskStatus};
pub use tier::Tier;
pub use tool_name::ToolName;
pub use usage::{BUILT_IN_PRICES, Price, Usage, price_of};
