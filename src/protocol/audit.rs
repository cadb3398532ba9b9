//! The closed sets of values the audit log records (docs/events.md): one enum per
//! field whose values are fixed, so the writer cannot spell a value the docs do
//! not list and a reader matches variants instead of comparing strings.
//!
//! Each serialises to the word the log has always held; a value only an older
//! harnessd wrote is still read (see [`Trigger`]).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// What made harnessd load the config files (`config_loaded.trigger`,
/// `config_rejected.trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The daemon (or `run`) started.
    Start,
    /// The file watcher saw a file change.
    Watch,
    /// The daemon got SIGHUP.
    Sighup,
    /// `approve --remember` (or the `a` answer) added allow rules; the event's
    /// `by` says who.
    Remember,
    /// Rules added by `approve --remember` were taken out again because their
    /// record could not be written.
    RememberUndone,
}

impl Trigger {
    /// The word recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Watch => "watch",
            Trigger::Sighup => "sighup",
            Trigger::Remember => "remember",
            Trigger::RememberUndone => "remember_undone",
        }
    }

    /// The trigger a recorded word names, with the sentences older versions wrote
    /// for a remembered rule (`approve --remember by …`, `approve --remember
    /// undone: …`): the log is read back whole, whatever wrote it.
    pub fn parse(word: &str) -> Option<Trigger> {
        let all = [
            Trigger::Start,
            Trigger::Watch,
            Trigger::Sighup,
            Trigger::Remember,
            Trigger::RememberUndone,
        ];
        if let Some(t) = all.into_iter().find(|t| t.as_str() == word) {
            return Some(t);
        }
        if word.starts_with("approve --remember undone") {
            Some(Trigger::RememberUndone)
        } else if word.starts_with("approve --remember by ") {
            Some(Trigger::Remember)
        } else {
            None
        }
    }
}

impl<'de> Deserialize<'de> for Trigger {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Trigger, D::Error> {
        let word = String::deserialize(deserializer)?;
        Trigger::parse(&word)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown trigger {word:?}")))
    }
}

/// `Display` as the recorded word, for messages that name a value.
macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

display_as_str!(
    Trigger,
    Source,
    Decision,
    CheckpointReason,
    CompactionMethod,
    BaseUrlFrom,
    Profile
);

/// Where a task came from (`task_queued.source`, `task_started.source`,
/// `task_resumed.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `harnessd run`, in the foreground.
    Cli,
    /// The daemon's control API (`submit`, `resume`, a script).
    Api,
}

impl Source {
    /// The word recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Cli => "cli",
            Source::Api => "api",
        }
    }
}

/// How an approval was answered (`approval_resolved.decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call may run.
    Approved,
    /// The call is refused.
    Denied,
    /// Nobody answered within `approval.timeout_secs`; the call is refused.
    Timeout,
}

impl Decision {
    /// The word recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Denied => "denied",
            Decision::Timeout => "timeout",
        }
    }
}

/// Where a hook is consulted (`hook_decision.point`; the keys of `hooks` in
/// settings.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookPoint {
    /// After the policy decided a call, before the decision is recorded.
    PreTool,
    /// After a call ran, before the model sees its result.
    PostTool,
    /// After `task_finished` was recorded.
    TaskFinished,
}

impl HookPoint {
    /// The word recorded, and the key in `hooks`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookPoint::PreTool => "pre_tool",
            HookPoint::PostTool => "post_tool",
            HookPoint::TaskFinished => "task_finished",
        }
    }
}

/// What one hook run came to (`hook_decision.decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookVerdict {
    /// pre_tool: the call is refused (also a pre_tool hook that failed).
    Deny,
    /// pre_tool: the call needs a human's approval.
    Ask,
    /// pre_tool: the hook allowed the call (counted only as `may_allow` says).
    Allow,
    /// The hook left things as they were.
    Continue,
    /// post_tool: the hook replaced the text the model sees.
    Replace,
    /// post_tool or task_finished: the hook failed (did not start, exited
    /// non-zero, timed out, answered nonsense); nothing changed.
    Failed,
}

impl HookVerdict {
    /// The word recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            HookVerdict::Deny => "deny",
            HookVerdict::Ask => "ask",
            HookVerdict::Allow => "allow",
            HookVerdict::Continue => "continue",
            HookVerdict::Replace => "replace",
            HookVerdict::Failed => "failed",
        }
    }
}

/// Why a checkpoint was written (`checkpoint.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointReason {
    /// The minute passed while the log grew.
    Periodic,
    /// The daemon is stopping.
    Stop,
}

impl CheckpointReason {
    /// The word recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointReason::Periodic => "periodic",
            CheckpointReason::Stop => "stop",
        }
    }
}

/// How the history was compacted (`context_compacted.method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompactionMethod {
    /// Old tool results were replaced by placeholders.
    Placeholders,
    /// Older turns were summarised too.
    Summary,
}

impl CompactionMethod {
    /// The word recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionMethod::Placeholders => "placeholders",
            CompactionMethod::Summary => "summary",
        }
    }
}

/// Where the model endpoint in force came from (`daemon_started.base_url_from`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum BaseUrlFrom {
    /// `api.base_url` in the config file.
    #[default]
    #[serde(rename = "api.base_url")]
    Config,
    /// The `ANTHROPIC_BASE_URL` environment variable, which overrides it.
    #[serde(rename = "ANTHROPIC_BASE_URL")]
    Environment,
}

impl BaseUrlFrom {
    /// The name recorded: the key or the environment variable.
    pub fn as_str(self) -> &'static str {
        match self {
            BaseUrlFrom::Config => "api.base_url",
            BaseUrlFrom::Environment => "ANTHROPIC_BASE_URL",
        }
    }
}

/// What a call that runs may write (docs/policy.md): the kernel enforces it
/// (`policy_decision.profile`).
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// Nothing but `/dev/null` and a private temporary directory: a `run_bash` or
    /// `run_python` call allowed by an `allow` pattern.
    ReadOnly,
    /// `allowed_paths.write`: everything else that runs (and every call before
    /// profiles were recorded).
    #[default]
    Write,
}

impl Profile {
    /// The profile's name as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::ReadOnly => "read_only",
            Profile::Write => "write",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every word each enum writes reads back as the same variant, and `as_str`
    /// is the word serde writes.
    #[test]
    fn words_round_trip() {
        fn check<T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
            value: T,
            word: &str,
        ) {
            let v = serde_json::to_value(&value).unwrap();
            assert_eq!(v, word);
            assert_eq!(serde_json::from_value::<T>(v).unwrap(), value);
        }
        for t in [
            Trigger::Start,
            Trigger::Watch,
            Trigger::Sighup,
            Trigger::Remember,
            Trigger::RememberUndone,
        ] {
            check(t, t.as_str());
        }
        for s in [Source::Cli, Source::Api] {
            check(s, s.as_str());
        }
        for d in [Decision::Approved, Decision::Denied, Decision::Timeout] {
            check(d, d.as_str());
        }
        for r in [CheckpointReason::Periodic, CheckpointReason::Stop] {
            check(r, r.as_str());
        }
        for b in [BaseUrlFrom::Config, BaseUrlFrom::Environment] {
            check(b, b.as_str());
        }
        for p in [Profile::ReadOnly, Profile::Write] {
            check(p, p.as_str());
        }
        for m in [CompactionMethod::Placeholders, CompactionMethod::Summary] {
            check(m, m.as_str());
        }
    }

    /// Lines older versions wrote for a remembered rule still read.
    #[test]
    fn old_remember_triggers_still_read() {
        let old: Trigger = serde_json::from_str(r#""approve --remember by uid:0 (root)""#).unwrap();
        assert_eq!(old, Trigger::Remember);
        let undone: Trigger =
            serde_json::from_str(r#""approve --remember undone: its record failed""#).unwrap();
        assert_eq!(undone, Trigger::RememberUndone);
        assert!(serde_json::from_str::<Trigger>(r#""cron""#).is_err());
    }
}
