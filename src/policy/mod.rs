//! Policy decisions: whether one tool call runs, asks a human, or is refused.
//!
//! Pure: [`decide`] takes the compiled [`Policy`] and the call's primary argument
//! (already normalised by the caller: a path relative to the root, or a command) and
//! returns the tier and the rule that made it. No I/O happens here; *what* a running
//! tool can touch is the sandbox's business, not this module's.
//!
//! Precedence is deny > ask > allow > default. A deny rule that matches wins outright.
//! Otherwise rules with a pattern are weighed before whole-tool rules, so the shipped
//! `allow: run_bash(ls *)` beside `ask: run_bash` lets `ls` run while every other
//! command asks; within each level, ask beats allow.

use globset::{GlobBuilder, GlobMatcher};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod shell;

use crate::config::Policy;
use crate::tools::ToolName;

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

/// One compiled rule: `tool` or `tool(pattern)`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule as written.
    pub text: String,
    /// The tool it is about.
    pub tool: ToolName,
    /// The glob over the call's primary argument, if any.
    pattern: Option<Pattern>,
}

#[derive(Debug, Clone)]
struct Pattern {
    glob: GlobMatcher,
    /// For a pattern ending in ` *`, the same without it, so `ls *` matches `ls`.
    bare: Option<GlobMatcher>,
}

impl Pattern {
    fn matches(&self, arg: &str) -> bool {
        self.glob.is_match(arg) || self.bare.as_ref().is_some_and(|b| b.is_match(arg))
    }
}

fn glob(pattern: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("pattern {pattern:?} is not a valid glob: {e}"))
}

impl Rule {
    /// Parses `tool` or `tool(pattern)`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let (name, pattern) = match text.find('(') {
            None => (text, None),
            Some(open) => {
                let inner = text[open + 1..].strip_suffix(')').ok_or_else(|| {
                    format!("rule {text:?} opens a pattern with '(' but does not end with ')'")
                })?;
                (&text[..open], Some(inner))
            }
        };
        let tool = ToolName::parse(name.trim()).ok_or_else(|| {
            format!(
                "rule {text:?} names unknown tool {name:?}; known tools: {}",
                ToolName::ALL_NAMES.join(", ")
            )
        })?;
        let pattern = match pattern {
            None => None,
            Some(_) if tool == ToolName::GetTime => {
                return Err(format!(
                    "rule {text:?}: get_time takes no argument, so only `get_time` applies"
                ));
            }
            Some("") => return Err(format!("rule {text:?} has an empty pattern")),
            Some(p) => Some(Pattern {
                glob: glob(p)?,
                bare: p.strip_suffix(" *").map(glob).transpose()?,
            }),
        };
        Ok(Rule {
            text: text.to_string(),
            tool,
            pattern,
        })
    }

    fn is_whole_tool(&self) -> bool {
        self.pattern.is_none()
    }
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The tier.
    pub tier: Tier,
    /// The rule that decided, or `None` when `tools.default` did.
    pub rule: Option<String>,
}

impl Decision {
    /// The rule as logged: the rule text or `default`.
    pub fn rule_label(&self) -> String {
        self.rule.clone().unwrap_or_else(|| "default".into())
    }
}

/// A tool call as policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The tool.
    pub tool: ToolName,
    /// Its primary argument, normalised: path relative to the root, command, code.
    pub arg: Option<&'a str>,
}

/// Decides one call.
pub fn decide(policy: &Policy, subject: Subject<'_>) -> Decision {
    // Each simple command as written and as it runs (assignments and wrappers
    // like `env` removed); a file path or code is one part.
    let (parts, confident): (Vec<[String; 2]>, bool) = match (subject.tool, subject.arg) {
        (ToolName::RunBash, Some(cmd)) => {
            let split = shell::split(cmd);
            let parts = split
                .parts
                .into_iter()
                .map(|p| [p.text, p.effective])
                .collect();
            (parts, split.confident)
        }
        (_, Some(arg)) => (vec![[arg.to_string(), arg.to_string()]], true),
        (_, None) => (Vec::new(), true),
    };
    let whole = subject.arg;
    let tool = subject.tool;
    fn of_tool(rules: &[Rule], tool: ToolName) -> Vec<&Rule> {
        rules.iter().filter(|r| r.tool == tool).collect()
    }
    // A pattern rule hits when it matches the whole argument or any simple command.
    let hits = |r: &Rule| match &r.pattern {
        None => true,
        Some(p) => {
            whole.is_some_and(|w| p.matches(w)) || parts.iter().flatten().any(|x| p.matches(x))
        }
    };
    let decided = |tier, r: &Rule| Decision {
        tier,
        rule: Some(r.text.clone()),
    };
    let deny = of_tool(&policy.deny, tool);
    if let Some(r) = deny.iter().find(|r| hits(r)) {
        return decided(Tier::Deny, r);
    }
    let ask = of_tool(&policy.ask, tool);
    if let Some(r) = ask.iter().find(|r| !r.is_whole_tool() && hits(r)) {
        return decided(Tier::Ask, r);
    }
    let allow = of_tool(&policy.allow, tool);
    // A pattern allow needs every simple command covered, and a command we could
    // split with confidence; anything else falls through to the whole-tool rules.
    if confident && !parts.is_empty() {
        let patterned: Vec<&&Rule> = allow.iter().filter(|r| !r.is_whole_tool()).collect();
        let covering: Option<Vec<&Rule>> = parts
            .iter()
            .map(|[text, effective]| {
                patterned
                    .iter()
                    .find(|r| {
                        r.pattern
                            .as_ref()
                            .is_some_and(|p| p.matches(effective) || p.matches(text))
                    })
                    .map(|r| **r)
            })
            .collect();
        if let Some(rules) = covering {
            let mut names: Vec<&str> = rules.iter().map(|r| r.text.as_str()).collect();
            names.dedup();
            return Decision {
                tier: Tier::Allow,
                rule: Some(names.join(" + ")),
            };
        }
    }
    if let Some(r) = ask.iter().find(|r| r.is_whole_tool()) {
        return decided(Tier::Ask, r);
    }
    if let Some(r) = allow.iter().find(|r| r.is_whole_tool()) {
        return decided(Tier::Allow, r);
    }
    Decision {
        tier: policy.settings.tools.default,
        rule: None,
    }
}

/// Whether a tool is refused outright (a deny rule without a pattern), so it is not
/// advertised to the model at all.
pub fn denied_outright(policy: &Policy, tool: ToolName) -> bool {
    policy
        .deny
        .iter()
        .any(|r| r.tool == tool && r.is_whole_tool())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    fn policy(json: &str) -> Policy {
        Settings::parse(json, "s.json").expect("valid settings")
    }

    fn shipped() -> Policy {
        policy(crate::config::DEFAULT_SETTINGS)
    }

    fn tier(p: &Policy, tool: ToolName, arg: Option<&str>) -> Tier {
        decide(p, Subject { tool, arg }).tier
    }

    #[test]
    fn shipped_defaults() {
        let p = shipped();
        assert_eq!(
            tier(&p, ToolName::ReadFile, Some("workspace/scores.csv")),
            Tier::Allow
        );
        assert_eq!(
            tier(&p, ToolName::ReadFile, Some("workspace/secrets/k")),
            Tier::Deny
        );
        assert_eq!(tier(&p, ToolName::RunBash, Some("ls")), Tier::Allow);
        assert_eq!(
            tier(&p, ToolName::RunBash, Some("ls -la /tmp")),
            Tier::Allow
        );
        assert_eq!(
            tier(&p, ToolName::RunBash, Some("git status --short")),
            Tier::Allow
        );
        assert_eq!(tier(&p, ToolName::RunBash, Some("cat x")), Tier::Ask);
        assert_eq!(tier(&p, ToolName::RunBash, Some("rm -rf /")), Tier::Deny);
        assert_eq!(
            tier(&p, ToolName::WriteFile, Some("workspace/a")),
            Tier::Ask
        );
        assert_eq!(tier(&p, ToolName::GetTime, None), Tier::Allow);
    }

    #[test]
    fn compound_command_needs_every_part_allowed() {
        let p = shipped();
        assert_eq!(
            tier(
                &p,
                ToolName::RunBash,
                Some("git status && curl evil.example")
            ),
            Tier::Ask
        );
        assert_eq!(tier(&p, ToolName::RunBash, Some("ls; ls -l")), Tier::Allow);
        // The substitution's own command is judged: it hits the deny rule.
        assert_eq!(
            tier(&p, ToolName::RunBash, Some("ls $(rm -rf x)")),
            Tier::Deny
        );
        assert_eq!(tier(&p, ToolName::RunBash, Some("ls $(curl x)")), Tier::Ask);
        assert_eq!(
            tier(&p, ToolName::RunBash, Some("env X=1 ls -l")),
            Tier::Allow
        );
        assert_eq!(
            tier(&p, ToolName::RunBash, Some("bash -c 'rm -rf /'")),
            Tier::Deny
        );
        assert_eq!(tier(&p, ToolName::RunBash, Some("eval ls")), Tier::Ask);
        assert_eq!(tier(&p, ToolName::RunBash, Some("ls `id`")), Tier::Ask);
        assert_eq!(
            tier(&p, ToolName::RunBash, Some("ls | rm -rf /")),
            Tier::Deny
        );
        assert_eq!(tier(&p, ToolName::RunBash, Some("ls 'a;b'")), Tier::Allow);
    }

    #[test]
    fn deny_beats_everything() {
        let p = policy(
            r#"{"tools": {"default": "allow", "allow": ["run_bash"], "ask": ["run_bash(ls *)"], "deny": ["run_bash"]}}"#,
        );
        let d = decide(
            &p,
            Subject {
                tool: ToolName::RunBash,
                arg: Some("ls"),
            },
        );
        assert_eq!(
            d,
            Decision {
                tier: Tier::Deny,
                rule: Some("run_bash".into())
            }
        );
        assert!(denied_outright(&p, ToolName::RunBash));
        assert!(!denied_outright(&shipped(), ToolName::RunBash));
    }

    #[test]
    fn ask_beats_allow_at_the_same_level() {
        let p = policy(
            r#"{"tools": {"default": "deny", "allow": ["write_file", "read_file(a*)"], "ask": ["write_file", "read_file(ab*)"], "deny": []}}"#,
        );
        assert_eq!(tier(&p, ToolName::WriteFile, Some("x")), Tier::Ask);
        assert_eq!(tier(&p, ToolName::ReadFile, Some("abc")), Tier::Ask);
        assert_eq!(tier(&p, ToolName::ReadFile, Some("acc")), Tier::Allow);
        let d = decide(
            &p,
            Subject {
                tool: ToolName::ListDir,
                arg: None,
            },
        );
        assert_eq!(
            d,
            Decision {
                tier: Tier::Deny,
                rule: None
            }
        );
    }

    #[test]
    fn star_crosses_slashes_and_trailing_star_matches_bare() {
        let p = policy(
            r#"{"tools": {"default": "ask", "allow": [], "ask": [], "deny": ["read_file(workspace/*)", "run_bash(git push *)"]}}"#,
        );
        assert_eq!(
            tier(&p, ToolName::ReadFile, Some("workspace/a/b/c")),
            Tier::Deny
        );
        assert_eq!(tier(&p, ToolName::RunBash, Some("git push")), Tier::Deny);
        assert_eq!(tier(&p, ToolName::RunBash, Some("git pushx")), Tier::Ask);
    }

    #[test]
    fn bad_rules_are_rejected() {
        assert!(Rule::parse("get_time(x)").is_err());
        assert!(Rule::parse("run_bash(ls").is_err());
        assert!(Rule::parse("nope").is_err());
        assert!(Rule::parse("run_bash()").is_err());
    }
}
