//! What a pre_tool hook's answer does to a decision: pure, like the rest of the
//! policy. A hook may tighten a call; it may loosen only what the operator let it
//! (`may_allow`), and only an `ask` that a rule or the default made.

use crate::protocol::{HookVerdict, Tier};

/// A pre_tool hook's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreAnswer {
    /// Refuse the call.
    Deny,
    /// Ask a human.
    Ask,
    /// Allow (counted only with `may_allow`).
    Allow,
    /// Leave the decision.
    Continue,
}

/// The policy's decision of a call, as pre_tool hooks get it and may change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The tier.
    pub tier: Tier,
    /// The rule label (`default`, a rule's text, `hook:<name>` once a hook decided).
    pub rule: String,
    /// Whether harnessd raised the call itself, or would raise an allow of it
    /// (text a deny rule cannot see, a destructive MCP tool): no hook's `allow`
    /// lifts it.
    pub raised: bool,
}

/// The rule label of a decision a hook made.
pub fn hook_rule(name: &str) -> String {
    format!("hook:{name}")
}

/// Applies one pre_tool hook's answer to `decided` (`name`: the hook's;
/// `may_allow`: whether its `allow` may count; `asked`: an earlier hook answered
/// `ask`). `deny` and `ask` tighten; `allow` lifts only an `ask` a rule or the
/// default made — never a deny, a raise harnessd made, or a hook's ask. Returns
/// what is recorded, and a note when an `allow` did not count.
pub fn apply_hook(
    decided: &mut Decided,
    name: &str,
    may_allow: bool,
    answer: PreAnswer,
    asked: bool,
) -> (HookVerdict, Option<String>) {
    match answer {
        PreAnswer::Deny => {
            decided.tier = Tier::Deny;
            decided.rule = hook_rule(name);
            (HookVerdict::Deny, None)
        }
        PreAnswer::Ask => {
            if decided.tier == Tier::Allow {
                decided.tier = Tier::Ask;
                decided.rule = hook_rule(name);
            }
            (HookVerdict::Ask, None)
        }
        PreAnswer::Continue => (HookVerdict::Continue, None),
        PreAnswer::Allow => {
            let why_not = if !may_allow {
                Some("allow not counted: the hook has no may_allow")
            } else if decided.tier != Tier::Ask {
                None
            } else if decided.raised {
                Some("allow not counted: harnessd itself raises this call to ask")
            } else if asked || decided.rule.starts_with("hook:") {
                Some("allow not counted: another hook asked")
            } else {
                decided.tier = Tier::Allow;
                decided.rule = hook_rule(name);
                None
            };
            (HookVerdict::Allow, why_not.map(str::to_string))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked_by(rule: &str, raised: bool) -> Decided {
        Decided {
            tier: Tier::Ask,
            rule: rule.into(),
            raised,
        }
    }

    #[test]
    fn an_allow_lifts_only_a_rules_ask_and_only_with_may_allow() {
        let mut d = asked_by("run_bash", false);
        let (v, note) = apply_hook(&mut d, "h", false, PreAnswer::Allow, false);
        assert_eq!((v, d.tier), (HookVerdict::Allow, Tier::Ask));
        assert!(note.unwrap().contains("no may_allow"));
        let (_, note) = apply_hook(&mut d, "h", true, PreAnswer::Allow, false);
        assert_eq!(
            (d.tier, d.rule.as_str(), note),
            (Tier::Allow, "hook:h", None)
        );
    }

    #[test]
    fn an_allow_never_lifts_a_deny_a_raise_or_a_hooks_ask() {
        let mut denied = Decided {
            tier: Tier::Deny,
            rule: "run_bash(rm *)".into(),
            raised: false,
        };
        apply_hook(&mut denied, "h", true, PreAnswer::Allow, false);
        assert_eq!(denied.tier, Tier::Deny);
        let mut raised = asked_by("run_bash(ls *)", true);
        apply_hook(&mut raised, "h", true, PreAnswer::Allow, false);
        assert_eq!(raised.tier, Tier::Ask);
        let mut by_hook = asked_by("hook:first", false);
        apply_hook(&mut by_hook, "h", true, PreAnswer::Allow, false);
        assert_eq!(by_hook.tier, Tier::Ask);
        let mut after_an_ask = asked_by("run_bash", false);
        apply_hook(&mut after_an_ask, "h", true, PreAnswer::Allow, true);
        assert_eq!(after_an_ask.tier, Tier::Ask);
    }

    #[test]
    fn deny_and_ask_tighten_and_name_the_hook() {
        let mut d = Decided {
            tier: Tier::Allow,
            rule: "read_file".into(),
            raised: false,
        };
        apply_hook(&mut d, "a", false, PreAnswer::Ask, false);
        assert_eq!((d.tier, d.rule.as_str()), (Tier::Ask, "hook:a"));
        apply_hook(&mut d, "b", false, PreAnswer::Ask, false);
        assert_eq!(d.rule, "hook:a", "an ask on an ask keeps who asked");
        apply_hook(&mut d, "c", false, PreAnswer::Deny, false);
        assert_eq!((d.tier, d.rule.as_str()), (Tier::Deny, "hook:c"));
        apply_hook(&mut d, "d", true, PreAnswer::Continue, false);
        assert_eq!(d.tier, Tier::Deny);
    }
}
