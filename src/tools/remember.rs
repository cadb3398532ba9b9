//! "Always allow this call": the narrowest allow rules that make one recorded call
//! run without asking, written into settings.json (`approve --remember`, the `a`
//! answer of `run`'s prompt).
//!
//! Narrowest means the call's own primary argument as a literal pattern, judged
//! exactly as the policy judges it: a file tool's normalised path (`workspace/x`),
//! `run_python`'s code, and for `run_bash` each simple command harnessd proved,
//! in its canonical form (an allow rule must cover every part of a command). A
//! `run_bash` command that is not provable cannot be remembered: no allow rule
//! applies to it, so writing one would change nothing. The rules are written only
//! if the call, judged again against the edited file, is then allowed.

use serde_json::Value;

use super::{ToolInput, ToolName, decide};
use crate::config::{CompiledSettings, Loaded, RememberError, add_allow_rules};
use crate::policy::{ShellView, Tier, literal_rule};

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

/// The rules that would allow exactly `tool` with `input` under `loaded`.
pub fn narrowest_rules(
    loaded: &Loaded,
    tool: &str,
    input: &Value,
) -> Result<Vec<String>, RememberCallError> {
    let (name, parsed) = parse_call(tool, input)?;
    let verdict = decide(name, &parsed, loaded);
    if let Some(refusal) = verdict.refusal {
        return Err(RememberCallError::Unrememberable(refusal));
    }
    match (name, &verdict.decision.shell) {
        (ToolName::RunBash, Some(view)) => {
            let command = verdict.judged.subject.as_deref().unwrap_or("");
            if view.not_provable.is_none() && reads_input_redirect(command) {
                return Err(RememberCallError::Unrememberable(
                    "the command reads a file through `<`, which no rule can name: a rule \
                     for its words would let it read any file (`python3 < other.py`); approve \
                     it once"
                        .into(),
                ));
            }
            shell_rules(loaded, view)
        }
        _ => Ok(vec![literal_rule(name, verdict.judged.subject.as_deref())]),
    }
}

/// Whether a provable command has an input redirection (`< file`, `<&N`): an
/// unquoted `<`. In a provable command every other `<` construct (here-documents,
/// `<(…)`, `<>`) already made it not provable, and quotes hold no expansions, so a
/// plain scan of quotes and backslashes finds it. Rules match the words alone, so
/// the file it names would be lost from the remembered rule.
fn reads_input_redirect(command: &str) -> bool {
    let mut chars = command.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (Some('"'), '\\') | (None, '\\') => {
                chars.next();
            }
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '<') => return true,
            (None, _) => {}
        }
    }
    false
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
    Ok(view
        .commands
        .iter()
        .filter(|c| {
            loaded
                .policy
                .allow
                .first_pattern_hit(ToolName::RunBash, std::slice::from_ref(c))
                .is_none()
        })
        .map(|c| literal_rule(ToolName::RunBash, Some(c)))
        .collect())
}

/// Adds the narrowest rules for the call to `loaded`'s settings file, after
/// checking that with them the call is allowed; returns the rules that allow it
/// (some may have been there already).
pub fn remember_call(
    loaded: &Loaded,
    tool: &str,
    input: &Value,
) -> Result<Vec<String>, RememberCallError> {
    let rules = narrowest_rules(loaded, tool, input)?;
    let (name, parsed) = parse_call(tool, input)?;
    let check = |candidate: &CompiledSettings| {
        let mut next = loaded.clone();
        next.policy = candidate.clone();
        let decision = decide(name, &parsed, &next).decision;
        match decision.tier {
            Tier::Allow => Ok(()),
            tier => Err(format!(
                "with it the call would still be `{}` (rule `{}`), since deny and ask \
                 patterns win over allow rules",
                tier.as_str(),
                decision.rule_label()
            )),
        }
    };
    let file = loaded.paths.display(&loaded.paths.settings);
    add_allow_rules(&loaded.paths.settings, &file, &rules, check)?;
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::reads_input_redirect;

    #[test]
    fn only_an_unquoted_less_than_is_an_input_redirection() {
        for cmd in ["python3 < a.py", "sort<x", "cat 0<&3", "a '<' b | wc -l <f"] {
            assert!(reads_input_redirect(cmd), "{cmd:?}");
        }
        for cmd in [
            "echo '<'",
            "echo \"a<b\"",
            r"echo \<",
            "echo 'it''<'",
            "ls 2>&1",
        ] {
            assert!(!reads_input_redirect(cmd), "{cmd:?}");
        }
    }
}
