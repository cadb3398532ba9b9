//! A call's tier: what the policy decides, settings name and the audit log records.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What happens to a call.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Runs without asking.
    Allow,
    /// Runs only after a human approves.
    Ask,
    /// Refused.
    Deny,
}

impl Tier {
    /// The tier's name as written in settings.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Allow => "allow",
            Tier::Ask => "ask",
            Tier::Deny => "deny",
        }
    }
}
