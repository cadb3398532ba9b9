//! Policy decisions: whether one tool call runs, asks a human, or is refused.
//!
//! Pure: [`Policy::compile`] turns the rule lists of `settings.json`, as plain
//! data ([`RuleLists`]), into a [`Policy`]; [`decide`] takes it and the call's primary argument
//! (already normalised by the caller: a path relative to the root, or a command) and
//! returns the tier and the rule that made it. For `run_bash`, deny and ask patterns
//! see every command [`shell::analyse`] can find, in normalised forms; allow patterns
//! apply only to a command it proves literal. No I/O happens here; *what* a running
//! tool can touch is the sandbox's business, not this module's. Nor does this
//! module know the settings file: `config` parses it and calls [`Policy::compile`],
//! so the dependency runs config → policy only.
//!
//! Precedence is deny > ask > allow > default. A deny rule that matches wins outright.
//! Otherwise rules with a pattern are weighed before whole-tool rules, so the shipped
//! `allow: run_bash(ls *)` beside `ask: run_bash` lets `ls` run while every other
//! command asks; within each level, ask beats allow.
//!
//! Calls of MCP tools (`mcp__<server>__<tool>`) are decided by [`decide_mcp`] on
//! the same lists: their rules name a server, a tool, or a tool with a key
//! pattern, checked at compile time against the configured servers and the
//! pinned definitions ([`RuleLists::mcp_servers`], [`RuleLists::pins`]).

use serde::Serialize;

mod hooks;
mod literal;
mod mcp;
pub mod programs;
mod rules;
pub mod shell;

use std::collections::BTreeMap;

pub use hooks::{Decided, PreAnswer, apply_hook, hook_rule};
pub use literal::{literal_mcp_rule, literal_pattern, literal_rule};
pub use mcp::{
    DRIFTED, McpPolicy, McpRule, McpSubject, UNKNOWN_SERVER, UNPINNED, UnpinnedRule, decide_mcp,
    is_mcp_rule, mcp_denied_outright, unpinned_mcp_rules,
};
pub use rules::{Rule, RuleSet};

use crate::protocol::audit::Profile;
use crate::protocol::mcp::{LOCK_VERSION, PinFile};
use crate::protocol::{Tier, ToolName};

/// No pinned MCP tool: what [`RuleLists::pins`] is when there is no lock file.
pub static NO_PINS: PinFile = PinFile {
    version: LOCK_VERSION,
    servers: BTreeMap::new(),
};

/// The rule lists of the `tools` section as plain data: what [`Policy::compile`]
/// takes. Each list is one tier's rules in file order.
#[derive(Debug, Clone, Copy)]
pub struct RuleLists<'a> {
    /// Tier of a call no rule matches.
    pub default: Tier,
    /// Rules whose calls run without asking (pattern rules of command tools run
    /// read-only).
    pub allow: &'a [String],
    /// Pattern rules whose calls run without asking, with the write set.
    pub allow_write: &'a [String],
    /// Rules whose calls need a human's approval.
    pub ask: &'a [String],
    /// Rules whose calls are refused.
    pub deny: &'a [String],
    /// The MCP servers configured: the servers an `mcp__…` rule may name.
    pub mcp_servers: &'a [String],
    /// The pinned tool definitions: a key-pattern rule of a pinned tool may name
    /// only properties of its input schema.
    pub pins: &'a PinFile,
}

/// A rule that does not compile, located by tier and position so that the caller
/// can name the key (`tools.deny[2]`) in its own terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{list} rule{}: {message}", index.map(|i| format!(" {i}")).unwrap_or_default())]
pub struct RuleError {
    /// The tier whose list holds it.
    pub tier: Tier,
    /// The list: `deny`, `ask`, `allow` or `allow_write` (both of the last two
    /// are [`Tier::Allow`]).
    pub list: &'static str,
    /// Its position in that list; `None` when the list as a whole failed to index.
    pub index: Option<usize>,
    /// What is wrong, naming the rule.
    pub message: String,
}

/// The compiled rules of all three tiers and the default: what [`decide`] reads.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Tier of a call no rule matches.
    pub default: Tier,
    /// Compiled `tools.deny`, in file order.
    pub deny: RuleSet,
    /// Compiled `tools.ask`.
    pub ask: RuleSet,
    /// Compiled `tools.allow`.
    pub allow: RuleSet,
    /// Compiled `tools.allow_write`.
    pub allow_write: RuleSet,
    /// The rules on MCP tools, of every list.
    pub mcp: McpPolicy,
}

impl Policy {
    /// Compiles the rule lists. Tiers are compiled deny, ask, allow, and the first
    /// bad rule is the error, so a file with several mistakes reports the same one
    /// every time.
    pub fn compile(lists: RuleLists<'_>) -> Result<Policy, RuleError> {
        let servers = lists.mcp_servers.iter().cloned().collect();
        let mut mcp = McpPolicy {
            servers,
            ..McpPolicy::default()
        };
        let mut compile = |tier: Tier, list: &'static str, rules: &[String]| {
            let error = |index, message| RuleError {
                tier,
                list,
                index,
                message,
            };
            let mut builtin = Vec::new();
            let mut of_mcp = Vec::new();
            for (i, r) in rules.iter().enumerate() {
                if mcp::is_mcp_rule(r) {
                    let rule = McpRule::parse(r).map_err(|m| error(Some(i), m))?;
                    rule.check(&mcp.servers, lists.pins)
                        .map_err(|m| error(Some(i), m))?;
                    of_mcp.push(rule);
                } else {
                    builtin.push(Rule::parse(r).map_err(|m| error(Some(i), m))?);
                }
            }
            let set = RuleSet::new(builtin).map_err(|m| error(None, m))?;
            let into = match list {
                "deny" => &mut mcp.deny,
                "ask" => &mut mcp.ask,
                "allow" => &mut mcp.allow,
                _ => &mut mcp.allow_write,
            };
            *into = of_mcp;
            Ok::<RuleSet, RuleError>(set)
        };
        let deny = compile(Tier::Deny, "deny", lists.deny)?;
        let ask = compile(Tier::Ask, "ask", lists.ask)?;
        let allow = compile(Tier::Allow, "allow", lists.allow)?;
        let allow_write = compile(Tier::Allow, "allow_write", lists.allow_write)?;
        Ok(Policy {
            default: lists.default,
            deny,
            ask,
            allow,
            allow_write,
            mcp,
        })
    }
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The tier.
    pub tier: Tier,
    /// The rule that decided, or `None` when `tools.default` did.
    pub rule: Option<String>,
    /// What the call may write if it runs (an approved `ask` runs with
    /// [`Profile::Write`]).
    pub profile: Profile,
    /// Why harnessd raised the call above what the rules said (to `ask`, or for
    /// an MCP tool that is not pinned or has drifted, to `deny`), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raised: Option<String>,
    /// What a deny rule cannot see in the call, whatever the tier: why an allow
    /// of it (a rule's, or a pre_tool hook's) is raised to ask.
    #[serde(skip)]
    pub unseen: Option<String>,
    /// For `run_bash`: the simple commands seen and whether the command was provable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellView>,
}

/// What the judgement of a `run_bash` command saw, for the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShellView {
    /// The simple commands seen, rendered with quotes where needed; at most
    /// [`ShellView::MAX_LISTED`], then one `… N more` entry.
    pub commands: Vec<String>,
    /// Whether harnessd proved that bash runs exactly these commands, so that allow
    /// patterns could apply.
    pub provable: bool,
    /// Why it is not provable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_provable: Option<String>,
    /// The program-table entries the commands met (`sed e: runs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<String>,
}

impl ShellView {
    /// How many commands a record lists.
    pub const MAX_LISTED: usize = 64;

    fn new(analysis: &shell::Analysis) -> ShellView {
        let total = analysis.commands.len();
        let mut commands: Vec<String> = analysis
            .commands
            .iter()
            .take(Self::MAX_LISTED)
            .map(shell::SeenCommand::canonical)
            .collect();
        if total > Self::MAX_LISTED {
            commands.push(format!("… {} more", total - Self::MAX_LISTED));
        }
        ShellView {
            commands,
            provable: analysis.not_provable.is_none(),
            not_provable: analysis.not_provable.clone(),
            programs: {
                let mut p: Vec<String> = analysis
                    .commands
                    .iter()
                    .flat_map(|c| c.programs.iter().map(|e| e.label()))
                    .collect();
                p.sort();
                p.dedup();
                p
            },
        }
    }
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
    let tool = subject.tool;
    // What deny and ask patterns see: the whole argument, and for run_bash every
    // seen command in every normalised form — matched one command at a time, so
    // the forms of a long command line are never all held at once. `allowable`:
    // what allow patterns must cover, one entry per command, or None when no allow
    // pattern may apply (a run_bash command that is not provable).
    let subjects: Vec<&str> = subject.arg.into_iter().collect();
    let mut deny = policy.deny.first_hit(tool, &subjects);
    let mut ask = policy.ask.first_pattern_hit(tool, &subjects);
    let mut allowable: Option<Vec<String>> = None;
    let mut shell_view = None;
    let mut raised = None;
    match (tool, subject.arg) {
        (ToolName::RunBash, Some(cmd)) => {
            let analysis = shell::analyse(cmd);
            for c in &analysis.commands {
                let forms = c.forms();
                deny = earliest(&policy.deny, deny, policy.deny.first_hit(tool, &forms));
                ask = earliest(&policy.ask, ask, policy.ask.first_pattern_hit(tool, &forms));
            }
            if analysis.not_provable.is_none() && !analysis.commands.is_empty() {
                allowable = Some(
                    analysis
                        .commands
                        .iter()
                        .map(shell::SeenCommand::canonical)
                        .collect(),
                );
            }
            raised = unseen_by_deny(policy, tool, &analysis);
            shell_view = Some(ShellView::new(&analysis));
        }
        (_, Some(arg)) => allowable = Some(vec![arg.to_string()]),
        (_, None) => {}
    }
    let decided = |tier, rule: Option<String>, profile| Decision {
        tier,
        rule,
        profile,
        raised: None,
        unseen: raised.clone(),
        shell: shell_view.clone(),
    };
    if let Some(r) = deny {
        return decided(Tier::Deny, Some(r.text.clone()), Profile::Write);
    }
    if let Some(r) = ask {
        return decided(Tier::Ask, Some(r.text.clone()), Profile::Write);
    }
    // What a deny rule cannot see is asked, above every allow (docs/policy.md).
    let raise = |d: Decision| match (&raised, d.tier) {
        (Some(why), Tier::Allow) => Decision {
            tier: Tier::Ask,
            raised: Some(why.clone()),
            profile: Profile::Write,
            ..d
        },
        _ => d,
    };
    if let Some(parts) = &allowable
        && let Some((rule, profile)) = pattern_allow(policy, tool, parts)
    {
        return decided(Tier::Allow, Some(rule), profile);
    }
    if let Some(r) = policy.ask.whole_tool(tool) {
        return decided(Tier::Ask, Some(r.text.clone()), Profile::Write);
    }
    if let Some(r) = policy.allow.whole_tool(tool) {
        return raise(decided(Tier::Allow, Some(r.text.clone()), Profile::Write));
    }
    raise(decided(policy.default, None, Profile::Write))
}

/// The pattern rules allowing every one of `parts`, each by `allow` or
/// `allow_write`, and the profile they give; `None` when a part is not covered
/// (the call falls to the whole-tool rules).
fn pattern_allow(policy: &Policy, tool: ToolName, parts: &[String]) -> Option<(String, Profile)> {
    let rules: Vec<(&Rule, bool)> = parts
        .iter()
        .map(|part| {
            let one = std::slice::from_ref(part);
            // `allow_write` is the operator's word that this command writes.
            match policy.allow_write.first_pattern_hit(tool, one) {
                Some(r) => Some((r, true)),
                None => policy
                    .allow
                    .first_pattern_hit(tool, one)
                    .map(|r| (r, false)),
            }
        })
        .collect::<Option<_>>()?;
    let mut names: Vec<&str> = rules.iter().map(|(r, _)| r.text.as_str()).collect();
    names.dedup();
    let writes = rules.iter().any(|(_, w)| *w);
    // File tools open the judged path itself: their rules keep the write set. A
    // command tool's pattern allow runs read-only.
    let profile = if writes || !tool.runs_commands() {
        Profile::Write
    } else {
        Profile::ReadOnly
    };
    Some((names.join(" + "), profile))
}

/// Why a `run_bash` command must be asked although a rule allows it: the tool has
/// a deny pattern and the command runs text that pattern cannot see. `None` when
/// the tool has no deny pattern, the command is provable, or every program word is
/// literal and none of those programs is named by a deny pattern, is a wrapper or
/// shell, or runs other text (so `ls *.log` keeps its tier).
fn unseen_by_deny(policy: &Policy, tool: ToolName, analysis: &shell::Analysis) -> Option<String> {
    let reason = analysis.not_provable.as_deref()?;
    let named: Vec<&str> = policy
        .deny
        .iter()
        .filter(|r| r.tool == tool)
        .filter_map(Rule::pattern)
        .collect();
    if named.is_empty() {
        return None;
    }
    if analysis.commands.is_empty() {
        return Some(format!(
            "a deny rule applies to {} and harnessd found no command it could check ({reason})",
            tool.as_str()
        ));
    }
    for c in &analysis.commands {
        let program = c.program().unwrap_or_default();
        let why = if !c.program_literal {
            Some(format!("the program of `{}` is not literal", c.canonical()))
        } else if c.is_wrapper_or_shell() {
            Some(format!(
                "`{}` runs a command or script of its own",
                c.canonical()
            ))
        } else if let Some(e) = c
            .programs
            .iter()
            .find(|e| e.effect == programs::Effect::Runs)
        {
            Some(format!("`{} {}` runs other text", e.program, e.what))
        } else if named.iter().any(|p| names_program(p, &program)) {
            Some(format!(
                "`{program}` is named by a deny rule and the command is not provable ({reason})"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Some(format!(
                "raised to ask: a deny rule cannot see everything this runs: {why}"
            ));
        }
    }
    None
}

/// Whether a deny pattern names `program`: its first word is the program, or is a
/// glob (then it may name any program).
fn names_program(pattern: &str, program: &str) -> bool {
    let first = pattern.split(' ').next().unwrap_or(pattern);
    if first.contains(['*', '?', '[', '{', '\\']) {
        return true;
    }
    first.rsplit('/').next().unwrap_or(first) == program
}

/// Of two hits in `set`, the rule written first.
fn earliest<'r>(set: &'r RuleSet, a: Option<&'r Rule>, b: Option<&'r Rule>) -> Option<&'r Rule> {
    match (a, b) {
        (Some(a), Some(b)) if !std::ptr::eq(a, b) => {
            let at = |r: &Rule| set.iter().position(|x| std::ptr::eq(x, r));
            if at(b) < at(a) { Some(b) } else { Some(a) }
        }
        (a, b) => a.or(b),
    }
}

/// Whether a tool is refused outright (a deny rule without a pattern), so it is not
/// advertised to the model at all.
pub fn denied_outright(policy: &Policy, tool: ToolName) -> bool {
    policy.deny.whole_tool(tool).is_some()
}

/// The shipped `tools.allow` rules: what settings.json's defaults hold.
pub const DEFAULT_ALLOW: &[&str] = &[
    "read_file",
    "list_dir",
    "get_time",
    "load_skill",
    "run_bash(ls *)",
    "run_bash(git status*)",
];
/// The shipped `tools.ask` rules.
pub const DEFAULT_ASK: &[&str] = &[
    "write_file",
    "edit_file",
    "run_bash",
    "run_python",
    "delegate",
];
/// The shipped `tools.deny` rules.
pub const DEFAULT_DENY: &[&str] = &["run_bash(rm -rf *)", "read_file(workspace/secrets/*)"];

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles the `tools` section of a settings JSON text, without `config`:
    /// policy is tested on plain data.
    fn policy(json: &str) -> Policy {
        let v: serde_json::Value = serde_json::from_str(json).expect("json");
        let tools = &v["tools"];
        let list = |tier: &str| -> Vec<String> {
            serde_json::from_value(tools[tier].clone()).unwrap_or_default()
        };
        let default = serde_json::from_value(tools["default"].clone()).unwrap_or(Tier::Ask);
        let (allow, ask, deny) = (list("allow"), list("ask"), list("deny"));
        let allow_write = list("allow_write");
        Policy::compile(RuleLists {
            default,
            allow: &allow,
            allow_write: &allow_write,
            ask: &ask,
            deny: &deny,
            mcp_servers: &[],
            pins: &NO_PINS,
        })
        .expect("valid rules")
    }

    fn shipped() -> Policy {
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (allow, ask, deny) = (
            owned(DEFAULT_ALLOW),
            owned(DEFAULT_ASK),
            owned(DEFAULT_DENY),
        );
        Policy::compile(RuleLists {
            default: Tier::Ask,
            allow: &allow,
            allow_write: &[],
            ask: &ask,
            deny: &deny,
            mcp_servers: &[],
            pins: &NO_PINS,
        })
        .expect("valid rules")
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
        // `env` runs another command: not provable, so no allow pattern applies.
        assert_eq!(
            tier(&p, ToolName::RunBash, Some("env X=1 ls -l")),
            Tier::Ask
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

    /// The reported smuggling attacks: with `allow run_bash(ls *)` none of these may be
    /// allowed, and the deny rule catches every spelling of `rm -rf`.
    #[test]
    fn allow_patterns_cannot_be_talked_around() {
        let p = shipped();
        for cmd in [
            "ls '$(id > pwned.txt; echo x)'; ls ${_@P}",
            "ls 'a[$(rm -rf important)]'; ls ${x[_]}",
            "ls # '\nrm -rf d\n# '",
            "ls <<<x\nrm -rf d\nx",
            "exec -a ls rm -rf d",
            "ls $'\\'' ; rm -rf d # '",
            "ls `",
            "echo \"`",
        ] {
            assert_ne!(
                tier(&p, ToolName::RunBash, Some(cmd)),
                Tier::Allow,
                "{cmd:?}"
            );
        }
        for cmd in [
            "rm -fr /",
            "rm -r -f /",
            "/bin/rm -rf /",
            "sudo rm -rf /",
            "\\rm -rf /",
            "'rm' -rf /",
            "ls; rm -fr d",
            "ls $(sudo /bin/rm -r -f d)",
        ] {
            assert_eq!(
                tier(&p, ToolName::RunBash, Some(cmd)),
                Tier::Deny,
                "{cmd:?}"
            );
        }
        let d = decide(
            &p,
            Subject {
                tool: ToolName::RunBash,
                arg: Some("ls -l; git status"),
            },
        );
        let view = d.shell.expect("run_bash has a shell view");
        assert!(view.provable);
        assert_eq!(view.commands, ["ls -l", "git status"]);
    }

    /// Spellings of `rm -rf` found by the attack review of the boundary work, each within
    /// docs/policy.md's normalisation (short options merged, wrappers looked through, every
    /// seen command): an extra option letter, `env -`, a wrapper's long option with
    /// a separate argument, `stdbuf`'s options, `busybox`, a shell run by
    /// `find -exec`, a function body, `coproc`, a `(pattern)` of `case`. Each fell
    /// to ask instead of deny.
    #[test]
    fn deny_catches_spellings_found_after_issue_8() {
        let p = shipped();
        for cmd in [
            "rm -rfv d",
            "rm -r -v -f d",
            "rm -dfr d",
            "rm -v -rf d",
            "ls; rm -Ivrf d",
            "env - rm -rf d",
            "sudo --user root rm -rf d",
            "sudo --chdir / rm -rf d",
            "xargs --max-args 1 rm -rf",
            "xargs --delimiter x rm -rf",
            "stdbuf -o 0 rm -rf d",
            "stdbuf --output 0 rm -rf d",
            "busybox rm -rf d",
            "find . -exec bash -c 'rm -rf d' \\;",
            "find . -exec sudo sh -c 'rm -rf d' \\;",
            "f() { rm -rf d; }; f",
            "f(){ rm -rf d;};f",
            "function f { rm -rf d; }; f",
            "coproc rm -rf d",
            "coproc x { rm -rf d; }",
            "case x in (x) rm -rf d;; esac",
            "env -S'rm -rf d'",
            "env -iS'rm -rf d'",
            "env -iS 'rm -rf d'",
            "env --split-string='rm -rf d'",
            "env -S'-i rm -rf d'",
        ] {
            assert_eq!(
                tier(&p, ToolName::RunBash, Some(cmd)),
                Tier::Deny,
                "{cmd:?}"
            );
        }
        // Not rm -rf: still asked, not denied.
        // `rm -r` is also `rm -rf` (tools have no terminal to be asked on).
        for cmd in ["rm -r d", "rm -r -- -f", "rm -Rv d"] {
            assert_eq!(
                tier(&p, ToolName::RunBash, Some(cmd)),
                Tier::Deny,
                "{cmd:?}"
            );
        }
        for cmd in ["rm -f d", "rm -v d", "cat -rf x"] {
            assert_eq!(tier(&p, ToolName::RunBash, Some(cmd)), Tier::Ask, "{cmd:?}");
        }
    }

    /// Shipped rules plus `extra_allow` in `tools.allow`.
    fn shipped_plus(extra_allow: &[&str], allow_write: &[&str]) -> Policy {
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut allow = owned(DEFAULT_ALLOW);
        allow.extend(owned(extra_allow));
        let (allow_write, ask, deny) =
            (owned(allow_write), owned(DEFAULT_ASK), owned(DEFAULT_DENY));
        Policy::compile(RuleLists {
            default: Tier::Ask,
            allow: &allow,
            allow_write: &allow_write,
            ask: &ask,
            deny: &deny,
            mcp_servers: &[],
            pins: &NO_PINS,
        })
        .expect("valid rules")
    }

    /// Issue reproductions: an allow rule for a program that runs its arguments
    /// allowed text no rule was written about.
    #[test]
    fn an_allowed_program_that_runs_its_arguments_is_not_allowed() {
        for (rule, cmd) in [
            (
                "run_bash(sed -n *)",
                "sed -n '1e rm -rf important' scores.csv",
            ),
            ("run_bash(sed *)", "sed 's/x/id/e' scores.csv"),
            ("run_bash(awk *)", "awk 'BEGIN{system(\"id > f\")}'"),
            ("run_bash(sort *)", "sort --compress-program=./x f"),
            (
                "run_bash(tar *)",
                "tar tf a.tar --checkpoint=1 --checkpoint-action=exec=./x",
            ),
            ("run_bash(man *)", "man -P ./x ls"),
            ("run_bash(zip *)", "zip x.zip a -T --unzip-command=./x"),
            ("run_bash(less *)", "less '+!./x' a"),
            ("run_bash(git diff*)", "git diff --no-index --ext-diff a b"),
            ("run_bash(git *)", "git -c core.pager=./x log"),
            ("run_bash(find *)", "find . -exec ./x \\;"),
            ("run_bash(python3 *)", "python3 -c 'print(1)'"),
        ] {
            let p = shipped_plus(&[rule], &[]);
            let d = decide(
                &p,
                Subject {
                    tool: ToolName::RunBash,
                    arg: Some(cmd),
                },
            );
            assert_ne!(d.tier, Tier::Allow, "{rule} allowed {cmd:?}");
            let view = d.shell.expect("a shell view");
            assert!(!view.provable, "{cmd:?}");
            assert!(
                view.programs.iter().any(|p| p.ends_with(": runs")),
                "{cmd:?}: {:?}",
                view.programs
            );
        }
    }

    /// What a rule grants is what the kernel enforces: a pattern allow of a
    /// command tool runs read-only, `allow_write` and everything else with writes.
    #[test]
    fn a_pattern_allow_runs_read_only_and_allow_write_writes() {
        let p = shipped_plus(
            &["run_bash(find *)", "run_bash(git log*)"],
            &["run_bash(sort -o *)"],
        );
        let profile = |tool, arg: &str| {
            let d = decide(
                &p,
                Subject {
                    tool,
                    arg: Some(arg),
                },
            );
            (d.tier, d.profile)
        };
        let ro = (Tier::Allow, Profile::ReadOnly);
        assert_eq!(profile(ToolName::RunBash, "ls -la"), ro);
        // Writes entries stay provable; the kernel refuses the write.
        assert_eq!(
            profile(ToolName::RunBash, "find . -fprintf .git/config x"),
            ro
        );
        // `find -delete` is also `rm -rf` to deny rules: the shipped one denies it.
        assert_eq!(profile(ToolName::RunBash, "find . -delete").0, Tier::Deny);
        assert_eq!(
            profile(ToolName::RunBash, "git log --output=.git/config"),
            ro
        );
        assert_eq!(
            profile(ToolName::RunBash, "sort -o out f"),
            (Tier::Allow, Profile::Write)
        );
        // A compound needing allow_write for one part runs with writes.
        assert_eq!(
            profile(ToolName::RunBash, "ls && sort -o out f"),
            (Tier::Allow, Profile::Write)
        );
        assert_eq!(
            profile(ToolName::ReadFile, "workspace/a"),
            (Tier::Allow, Profile::Write)
        );
        let whole = policy(
            r#"{"tools": {"default": "ask", "allow": ["run_bash"], "ask": [], "deny": []}}"#,
        );
        let d = decide(
            &whole,
            Subject {
                tool: ToolName::RunBash,
                arg: Some("ls"),
            },
        );
        assert_eq!((d.tier, d.profile), (Tier::Allow, Profile::Write));
    }

    /// Issue reproductions with `allow run_bash` and `deny run_bash(rm -rf *)`:
    /// spellings the deny rule missed, and text it cannot see.
    #[test]
    fn deny_catches_folded_spellings_and_looked_through_wrappers() {
        let p = policy(
            r#"{"tools": {"default": "ask", "allow": ["run_bash"], "ask": [], "deny": ["run_bash(rm -rf *)", "run_bash(git push --force*)", "run_bash(kill -9 *)", "run_bash(chmod -R *)"]}}"#,
        );
        for cmd in [
            "rm -Rf d",
            "rm -R -f d",
            "rm --recursive --force d",
            "rm --re --fo d",
            "rm --rec -f d",
            "rm -r --interactive=never d",
            "rm -r --force d",
            "ionice -c3 rm -rf d",
            "ionice -c 3 rm -rf d",
            "find d -delete",
            "taskset 1 rm -rf x",
            "taskset -c 0 rm -rf x",
            "chrt -o 0 rm -rf x",
            "flock /tmp/l rm -rf x",
            "flock /tmp/l -c 'rm -rf x'",
            "setpriv --reuid=1000 rm -rf x",
            "strace -o /dev/null rm -rf x",
            "ltrace -o /dev/null rm -rf x",
            "script -qc 'rm -rf x' /dev/null",
            "unshare -r rm -rf x",
            "nsenter -t 1 rm -rf x",
            "chroot / rm -rf x",
            "runuser -u nobody -- rm -rf x",
            "su root -c 'rm -rf x'",
            "doas rm -rf x",
            "pkexec rm -rf x",
            "systemd-run --user rm -rf x",
            "watch rm -rf x",
            "watch -n 1 'rm -rf x'",
            "git push -f origin main",
            "git push origin +main",
            "git -C repo push --force-with-lease",
            "kill -s KILL 1",
            "kill -KILL 1",
            "kill -SIGKILL 1",
            "chmod --recursive 777 /",
        ] {
            let d = decide(
                &p,
                Subject {
                    tool: ToolName::RunBash,
                    arg: Some(cmd),
                },
            );
            assert_eq!(d.tier, Tier::Deny, "{cmd:?}: {d:?}");
        }
    }

    /// With a deny pattern, what it cannot see is raised to ask above a whole-tool
    /// allow; literal programs it does not name keep their tier.
    #[test]
    fn what_a_deny_cannot_see_is_raised_to_ask() {
        let p = policy(
            r#"{"tools": {"default": "ask", "allow": ["run_bash"], "ask": [], "deny": ["run_bash(rm -rf *)"]}}"#,
        );
        for cmd in [
            "echo 'rm -rf d' | sh",
            "bash <<< 'rm -rf x'",
            "ls | bash",
            "python3 -c 'import shutil; shutil.rmtree(\"x\")'",
            "/usr/bin/r[m] -rf d",
            "{rm,-rf,d}",
            "F=f; rm -r$F d",
            "bash x.sh",
            "hash -p /bin/rm ls; ls -rf d",
            "setarch x86_64 rm -rf d",
            "/lib64/ld-linux-x86-64.so.2 /bin/rm -rf d",
            "fakeroot rm -rf d",
            "tclsh x.tcl",
        ] {
            let d = decide(
                &p,
                Subject {
                    tool: ToolName::RunBash,
                    arg: Some(cmd),
                },
            );
            assert_eq!(d.tier, Tier::Ask, "{cmd:?}: {d:?}");
            assert!(
                d.raised
                    .as_deref()
                    .is_some_and(|r| r.starts_with("raised to ask")),
                "{cmd:?}: {d:?}"
            );
        }
        // Every program literal, none named by a deny rule nor running text: the
        // whole-tool tier stands.
        for cmd in ["ls *.log", "cat ~/x", "grep -r $HOME ."] {
            let d = decide(
                &p,
                Subject {
                    tool: ToolName::RunBash,
                    arg: Some(cmd),
                },
            );
            assert_eq!((d.tier, &d.raised), (Tier::Allow, &None), "{cmd:?}");
        }
        // Without any deny pattern nothing is raised.
        let no_deny = policy(
            r#"{"tools": {"default": "ask", "allow": ["run_bash"], "ask": [], "deny": []}}"#,
        );
        let d = decide(
            &no_deny,
            Subject {
                tool: ToolName::RunBash,
                arg: Some("echo x | sh"),
            },
        );
        assert_eq!(d.tier, Tier::Allow);
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
                rule: Some("run_bash".into()),
                profile: Profile::Write,
                raised: None,
                unseen: None,
                shell: d.shell.clone(),
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
                rule: None,
                profile: Profile::Write,
                raised: None,
                unseen: None,
                shell: None,
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
    fn compile_locates_the_bad_rule() {
        let (good, bad) = (
            vec!["read_file".to_string()],
            vec!["read_fiel(x)".to_string()],
        );
        let err = Policy::compile(RuleLists {
            default: Tier::Ask,
            allow: &bad,
            allow_write: &[],
            ask: &good,
            deny: &good,
            mcp_servers: &[],
            pins: &NO_PINS,
        })
        .expect_err("typo");
        assert_eq!((err.tier, err.index), (Tier::Allow, Some(0)));
        assert!(err.message.contains("read_fiel"), "{err}");
    }

    #[test]
    fn bad_rules_are_rejected() {
        assert!(Rule::parse("get_time(x)").is_err());
        assert!(Rule::parse("run_bash(ls").is_err());
        assert!(Rule::parse("nope").is_err());
        assert!(Rule::parse("run_bash()").is_err());
    }

    /// Every tier with no rule, a whole-tool rule, a matching pattern or a
    /// non-matching pattern, under every default: the documented order decides.
    #[test]
    fn precedence_matrix() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        enum R {
            None,
            Whole,
            Hit,
            Miss,
        }
        let rule = |r: R| match r {
            R::None => None,
            R::Whole => Some("read_file".to_string()),
            R::Hit => Some("read_file(workspace/*)".to_string()),
            R::Miss => Some("read_file(/etc/*)".to_string()),
        };
        let all = [R::None, R::Whole, R::Hit, R::Miss];
        let mut cases = 0;
        for deny in all {
            for ask in all {
                for allow in all {
                    for default in ["allow", "ask", "deny"] {
                        let list = |r: R| rule(r).into_iter().collect::<Vec<_>>();
                        let json = serde_json::json!({"tools": {
                            "default": default, "deny": list(deny), "ask": list(ask), "allow": list(allow)
                        }});
                        let p = policy(&json.to_string());
                        let got = tier(&p, ToolName::ReadFile, Some("workspace/a.txt"));
                        let expected = if matches!(deny, R::Whole | R::Hit) {
                            Tier::Deny
                        } else if ask == R::Hit {
                            Tier::Ask
                        } else if allow == R::Hit {
                            Tier::Allow
                        } else if ask == R::Whole {
                            Tier::Ask
                        } else if allow == R::Whole {
                            Tier::Allow
                        } else {
                            match default {
                                "allow" => Tier::Allow,
                                "ask" => Tier::Ask,
                                _ => Tier::Deny,
                            }
                        };
                        assert_eq!(
                            got, expected,
                            "deny {deny:?} ask {ask:?} allow {allow:?} default {default}"
                        );
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 192);
    }
}
