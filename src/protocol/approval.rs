//! One call waiting for a human, as the loop asks it and the control API lists it.

use serde_json::Value;

/// One call waiting for a human.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ApprovalRequest {
    /// Approval id.
    pub approval_id: String,
    /// The task that made the call.
    pub task_id: String,
    /// For a call of a child task: the task that delegated it (the child's
    /// parent), so an approver sees which task the work is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<String>,
    /// The call.
    pub tool_use_id: String,
    /// Tool name.
    pub tool: String,
    /// The call's input.
    pub input: Value,
    /// The rule that asked.
    pub rule: String,
}
