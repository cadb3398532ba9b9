//! The narrowest allow rules that make one recorded call run without asking,
//! written into settings.json (`edit`).
//!
//! Narrowest means the call's own primary argument as a literal pattern, judged
//! exactly as the policy judges it: a file tool's normalised path (`workspace/x`),
//! `run_python`'s code, and for `run_bash` each simple command harnessd proved,
//! in its canonical form (an allow rule must cover every part of a command).
//! Rules for `run_bash` and `run_python` go to `tools.allow_write`: the approved
//! call ran with writes, and an `allow` pattern would run it read-only. A command
//! that runs code the workspace holds (`make`, `npm test`) is approved once and
//! never remembered. A
//! `run_bash` command that is not provable cannot be remembered: no allow rule
//! applies to it, so writing one would change nothing. The rules are written only
//! if the call, judged again against the edited file, is then allowed.
//!
//! An MCP call is remembered as its tool with every key of its input and that
//! key's literal value, closed by `!` (`mcp__git__git_log(max_count=5,
//! repo_path=workspace, !)`), into `tools.allow`: the same tool with another
//! value or one more key is not covered. A tool that is not pinned, or whose
//! server lists another definition now, cannot be remembered.

use serde_json::Value;

use super::edit::{RememberError, add_allow_rules_in};
use crate::config::{CompiledSettings, Loaded, SettingsContext};
use crate::policy::{Decision, ShellView, literal_mcp_rule, literal_rule, programs};
use crate::protocol::mcp::McpToolName;
use crate::protocol::{Profile, Tier};
use crate::tools::{ToolInput, ToolName, decide};

/// Why a call cannot be remembered.
#[derive(Debug, thiserror::Error)]
pub enum RememberCallError {
    /// The call is not one harnessd can judge (unknown tool, invalid input).
    #[error("{0}")]
    BadCall(String),
    /// No allow rule can apply to it.
    #[error("cannot remember this call: {0}")]
    Unrememberable(String),
    /// The settings file could not be edited.
    #[error(transparent)]
    Write(#[from] RememberError),
}

/// The call as the policy sees it: its tool and validated input.
fn parse_call(tool: &str, input: &Value) -> Result<(ToolName, ToolInput), RememberCallError> {
    let name = ToolName::parse(tool)
        .ok_or_else(|| RememberCallError::BadCall(format!("unknown tool {tool:?}")))?;
    let parsed = ToolInput::parse(name, input)
        .map_err(|e| RememberCallError::BadCall(format!("invalid input for {tool}: {e}")))?;
    Ok((name, parsed))
}

/// The rule that allows exactly the MCP call of `name` with `input` under
/// `settings`: every key with its literal value, and `!`.
fn mcp_rule(
    settings: &CompiledSettings,
    name: McpToolName<'_>,
    input: &Value,
) -> Result<String, RememberCallError> {
    let object = input.as_object().ok_or_else(|| {
        RememberCallError::BadCall(format!(
            "the input of {} is not an object",
            name.model_name()
        ))
    })?;
    let d = settings.decide_mcp(name.server, name.tool, input, true);
    let raise = [
        crate::policy::UNKNOWN_SERVER,
        crate::policy::UNPINNED,
        crate::policy::DRIFTED,
    ];
    if d.rule.as_deref().is_some_and(|r| raise.contains(&r)) {
        let why = d.raised.clone().unwrap_or_else(|| d.rule_label());
        return Err(RememberCallError::Unrememberable(why));
    }
    Ok(literal_mcp_rule(name.server, name.tool, object))
}

/// The rules that would allow exactly `tool` with `input` under `loaded`.
pub fn narrowest_rules(
    loaded: &Loaded,
    tool: &str,
    input: &Value,
) -> Result<Vec<String>, RememberCallError> {
    if let Some(name) = McpToolName::parse(tool) {
        return Ok(vec![mcp_rule(&loaded.policy, name, input)?]);
    }
    let (name, parsed) = parse_call(tool, input)?;
    let verdict = decide(name, &parsed, loaded);
    if let Some(refusal) = verdict.refusal {
        return Err(RememberCallError::Unrememberable(refusal));
    }
    match (name, &verdict.decision.shell) {
        (ToolName::RunBash, Some(view)) => {
            let command = verdict.judged.subject.as_deref().unwrap_or("");
            if view.not_provable.is_none()
                && let Some(why) = input_from_elsewhere(command)
            {
                return Err(RememberCallError::Unrememberable(why.into()));
            }
            if let Some(code) = view
                .programs
                .iter()
                .find(|p| p.ends_with(programs::Effect::WorkspaceCode.as_str()))
            {
                return Err(RememberCallError::Unrememberable(format!(
                    "the command runs code the workspace holds ({code}): what it runs \
                     changes with the workspace, so no rule is written for it; it was \
                     approved once"
                )));
            }
            shell_rules(loaded, view)
        }
        _ => Ok(vec![literal_rule(name, verdict.judged.subject.as_deref())]),
    }
}

/// Why a provable command takes input that its words do not name, if it does:
/// an input redirection (`< file`, `<&N`: an unquoted `<`) or a pipe (`|`, `|&`,
/// not `||`). Rules match each simple command's words alone, so what feeds it
/// would be lost from the remembered rule: `python3 < check.py` would remember
/// `python3`, which then runs any file, and `cat x | python3` would remember
/// `python3` for whatever another allowed command prints. In a provable command
/// every other `<` construct (here-documents, `<(…)`, `<>`) already made it not
/// provable, and quotes hold no expansions, so a plain scan of quotes and
/// backslashes finds both.
fn input_from_elsewhere(command: &str) -> Option<&'static str> {
    let mut chars = command.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (Some('"'), '\\') | (None, '\\') => {
                chars.next();
            }
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '<') => {
                return Some(
                    "the command reads a file through `<`, which no rule can name: a rule \
                     for its words would let it read any file (`python3 < other.py`); \
                     approve it once",
                );
            }
            (None, '|') if chars.peek() == Some(&'|') => {
                chars.next();
            }
            (None, '|') => {
                return Some(
                    "the command pipes one program's output into another, which no rule \
                     can name: a rule for each would let the last take any allowed \
                     command's output (`cat x | python3` would remember `python3`); \
                     approve it once",
                );
            }
            (None, _) => {}
        }
    }
    None
}

/// One rule per simple command that no allow pattern covers yet.
fn shell_rules(loaded: &Loaded, view: &ShellView) -> Result<Vec<String>, RememberCallError> {
    if let Some(why) = &view.not_provable {
        return Err(RememberCallError::Unrememberable(format!(
            "the command is not provable ({why}), so no allow rule applies to it; approve it \
             once, or write a rule for a provable form"
        )));
    }
    if view.commands.is_empty() || view.commands.len() > ShellView::MAX_LISTED {
        return Err(RememberCallError::Unrememberable(
            "the command has no simple commands to allow, or too many".into(),
        ));
    }
    let covered = |set: &crate::policy::RuleSet, c: &String| {
        set.first_pattern_hit(ToolName::RunBash, std::slice::from_ref(c))
            .is_some()
    };
    let policy = &loaded.policy;
    let uncovered: Vec<String> = view
        .commands
        .iter()
        .filter(|c| !covered(&policy.allow, c) && !covered(&policy.allow_write, c))
        .map(|c| literal_rule(ToolName::RunBash, Some(c)))
        .collect();
    if !uncovered.is_empty() {
        // Their `allow_write` rules give the whole call the write profile.
        return Ok(uncovered);
    }
    // Every part is allowed already, but only read-only: the approved call ran
    // with writes, which only `allow_write` rules give.
    Ok(view
        .commands
        .iter()
        .filter(|c| !covered(&policy.allow_write, c))
        .map(|c| literal_rule(ToolName::RunBash, Some(c)))
        .collect())
}

/// A call to remember: of an MCP tool, or of a built-in one with its input.
enum Call<'a> {
    Mcp(McpToolName<'a>),
    Builtin(ToolName, ToolInput),
}

/// `loaded` with its settings judged again against the lock file as it is now: a
/// server is pinned at its first use, after the settings in force were loaded.
fn with_current_pins(loaded: &Loaded) -> Result<Loaded, RememberCallError> {
    let unusable = |e: crate::config::ConfigError| {
        RememberCallError::Unrememberable(format!("the pins cannot be read: {e}"))
    };
    let pins = std::sync::Arc::new(crate::config::load_pins(&loaded.paths.root).map_err(unusable)?);
    let context = SettingsContext {
        pins: Some(&pins),
        api_key_env: Some(&loaded.config.api.api_key_env),
    };
    let file = loaded.paths.display(&loaded.paths.settings);
    let policy =
        crate::config::Settings::parse_in(&loaded.settings_text, &file, context).map_err(|e| {
            RememberCallError::Unrememberable(format!(
                "the settings in force do not hold against the pins as they are now: {e}"
            ))
        })?;
    Ok(Loaded {
        policy,
        ..loaded.clone()
    })
}

/// Adds the narrowest rules for the call to `loaded`'s settings file, after
/// checking that with them the call is allowed; returns the rules that allow it
/// (some may have been there already).
pub fn remember_call(
    loaded: &Loaded,
    tool: &str,
    input: &Value,
) -> Result<Vec<String>, RememberCallError> {
    let fresh;
    let loaded = match McpToolName::parse(tool) {
        Some(_) => {
            fresh = with_current_pins(loaded)?;
            &fresh
        }
        None => loaded,
    };
    let rules = narrowest_rules(loaded, tool, input)?;
    let call = match McpToolName::parse(tool) {
        Some(n) => Call::Mcp(n),
        None => {
            let (name, parsed) = parse_call(tool, input)?;
            Call::Builtin(name, parsed)
        }
    };
    let decide_under = |candidate: &CompiledSettings| -> Decision {
        match &call {
            Call::Mcp(n) => candidate.decide_mcp(n.server, n.tool, input, true),
            Call::Builtin(name, parsed) => {
                let mut next = loaded.clone();
                next.policy = candidate.clone();
                decide(*name, parsed, &next).decision
            }
        }
    };
    let check = |candidate: &CompiledSettings| {
        let decision = decide_under(candidate);
        match decision.tier {
            Tier::Allow if decision.profile == Profile::Write => Ok(()),
            Tier::Allow => {
                Err("with it the call would run read-only, not as it was approved".to_string())
            }
            tier => Err(match &decision.raised {
                // harnessd's own raise (a destructive tool), not a rule's.
                Some(why) => format!("with it the call would still be `{}`: {why}", tier.as_str()),
                None => format!(
                    "with it the call would still be `{}` (rule `{}`), since deny and ask \
                     patterns win over allow rules",
                    tier.as_str(),
                    decision.rule_label()
                ),
            }),
        }
    };
    let context = SettingsContext {
        pins: Some(&loaded.policy.pins),
        api_key_env: Some(&loaded.config.api.api_key_env),
    };
    let file = loaded.paths.display(&loaded.paths.settings);
    add_allow_rules_in(&loaded.paths.settings, &file, &rules, context, check)?;
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::input_from_elsewhere;
    use super::{RememberCallError, remember_call};
    use crate::protocol::Tier;
    use crate::protocol::mcp::{ToolAnnotations, ToolDefinition};
    use serde_json::{Value, json};

    /// A root with a `git` server whose `log` and `reset` (destructive) are
    /// pinned, and `mcp__git` asked.
    fn mcp_root() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "harnessd-remember-mcp-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        crate::config::init(&dir).expect("init");
        let settings = dir.join("policies/settings.json");
        let mut v: Value =
            serde_json::from_str(&std::fs::read_to_string(&settings).expect("read")).expect("json");
        // An account name: "auto" would choose (and register) a uid as root.
        v["sandbox"]["user"] = json!("nobody");
        v["mcp"] = json!({"servers": {"git": {"command": ["/bin/false"]}}});
        v["tools"]["ask"] = json!(["mcp__git"]);
        std::fs::write(&settings, v.to_string()).expect("write");
        let def = |name: &str, destructive: bool| ToolDefinition {
            name: name.into(),
            title: None,
            description: None,
            input_schema: json!({"type": "object", "properties": {"path": {}, "n": {}, "x": {}}}),
            output_schema: None,
            annotations: destructive.then(|| ToolAnnotations {
                destructive_hint: Some(true),
                ..ToolAnnotations::default()
            }),
        };
        let mut pins = crate::protocol::mcp::PinFile::default();
        crate::config::pin_server(&mut pins, "git", &[def("log", false), def("reset", true)]);
        crate::config::save_pins(&crate::config::lock_file(&dir), &pins).expect("pins");
        dir
    }

    /// `approve --remember` of an MCP call writes the narrowest key-pattern rule:
    /// the call is allowed after it, the same call with another value or one more
    /// key still asks.
    #[test]
    fn an_mcp_call_is_remembered_as_every_key_and_bang() {
        let dir = mcp_root();
        let loaded = crate::config::load(&dir).expect("loads");
        let input = json!({"path": "workspace/a,b", "n": 5});
        let rules = remember_call(&loaded, "mcp__git__log", &input).expect("remembered");
        assert_eq!(rules, [r"mcp__git__log(n=5, path=workspace/a\,b, !)"]);
        let after = crate::config::load(&dir).expect("loads with the rule");
        assert_eq!(after.policy.settings.tools.allow.last(), rules.last());
        let tier = |input: Value| after.policy.decide_mcp("git", "log", &input, true).tier;
        assert_eq!(tier(input.clone()), Tier::Allow);
        assert_eq!(tier(json!({"path": "workspace/a,b", "n": 6})), Tier::Ask);
        assert_eq!(
            tier(json!({"path": "workspace/a,b", "n": 5, "x": 1})),
            Tier::Ask
        );
        // Not pinned: nothing to remember. Destructive: the rule would not allow it.
        let err = remember_call(&after, "mcp__git__status", &json!({})).expect_err("unpinned");
        assert!(matches!(err, RememberCallError::Unrememberable(_)), "{err}");
        let err = remember_call(&after, "mcp__git__reset", &json!({})).expect_err("destructive");
        assert!(err.to_string().contains("marks reset destructive"), "{err}");
        let unchanged = crate::config::load(&dir).expect("loads");
        assert_eq!(
            unchanged.policy.settings.tools.allow,
            after.policy.settings.tools.allow
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_an_unquoted_less_than_or_pipe_is_input_from_elsewhere() {
        for cmd in [
            "python3 < a.py",
            "sort<x",
            "cat 0<&3",
            "a '<' b | wc -l <f",
            "cat x | python3",
            "make |& tee log",
            "true || cat x|sh",
        ] {
            assert!(input_from_elsewhere(cmd).is_some(), "{cmd:?}");
        }
        for cmd in [
            "echo '<'",
            "echo \"a<b\"",
            r"echo \<",
            "echo 'it''<'",
            "ls 2>&1",
            "echo 'a|b'",
            r"echo a\|b",
            "test -f x || make",
        ] {
            assert!(input_from_elsewhere(cmd).is_none(), "{cmd:?}");
        }
    }
}
