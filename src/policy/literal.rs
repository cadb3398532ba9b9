//! The narrowest rule for one call: `tool(pattern)` whose pattern matches the
//! call's primary argument and nothing else. `approve --remember` writes these, so
//! a remembered approval can never grant more than the call that was approved.

use crate::protocol::ToolName;

/// `text` as a glob that matches exactly `text`: every glob metacharacter and the
/// escape character itself are backslash-escaped (rules are compiled with
/// backslash escapes on). A trailing ` *` becomes ` \*`, so the bare-command
/// widening of patterns ending in ` *` does not apply either.
pub fn literal_pattern(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '*' | '?' | '[' | ']' | '{' | '}') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The rule allowing `tool` with exactly `arg`; a tool without an argument
/// (`get_time`) gets the whole-tool rule, which is all that applies to it.
pub fn literal_rule(tool: ToolName, arg: Option<&str>) -> String {
    match arg {
        Some(arg) if tool != ToolName::GetTime => {
            format!("{}({})", tool.as_str(), literal_pattern(arg))
        }
        _ => tool.as_str().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Rule, RuleSet};

    /// Whether the rule written for `arg` matches `candidate`.
    fn matches(tool: ToolName, arg: &str, candidate: &str) -> bool {
        let rule = Rule::parse(&literal_rule(tool, Some(arg))).expect("a literal rule parses");
        let set = RuleSet::new(vec![rule]).expect("indexes");
        set.first_pattern_hit(tool, &[candidate]).is_some()
    }

    #[test]
    fn a_literal_rule_matches_its_argument_and_nothing_else() {
        let tricky = [
            "ls *",
            "echo a*b?c[d]{e,f}",
            r"printf 'a\nb' \*",
            "print(open('x').read())\nprint(1)",
            "workspace/notes (1).md",
        ];
        for arg in tricky {
            let tool = ToolName::RunPython;
            assert!(matches(tool, arg, arg), "{arg:?} must match itself");
            assert!(!matches(tool, arg, &format!("{arg}x")), "{arg:?} + x");
            assert!(!matches(tool, arg, &format!("x{arg}")), "x + {arg:?}");
        }
        // `ls *` as a literal is not the widening pattern: `ls` and `ls -la` stay out.
        assert!(!matches(ToolName::RunBash, "ls *", "ls"));
        assert!(!matches(ToolName::RunBash, "ls *", "ls -la"));
        assert!(!matches(ToolName::ReadFile, "a?c", "abc"));
    }

    #[test]
    fn get_time_gets_the_whole_tool_rule() {
        assert_eq!(literal_rule(ToolName::GetTime, None), "get_time");
        assert_eq!(
            literal_rule(ToolName::ReadFile, Some("workspace/a*")),
            r"read_file(workspace/a\*)"
        );
    }
}
