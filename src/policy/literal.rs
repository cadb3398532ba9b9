//! The narrowest rule for one call: `tool(pattern)` whose pattern matches the
//! call's primary argument and nothing else. `approve --remember` writes these, so
//! a remembered approval can never grant more than the call that was approved.
//! For an MCP tool that is every key of the call with its value, closed by `!`.

use serde_json::{Map, Value};

use crate::protocol::mcp::model_name;
use crate::protocol::{ToolName, canonical_json};

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

/// `text` as a key or value of an MCP key pattern that stands for exactly
/// `text`: the glob metacharacters, the pattern's own separators (`, = ( )`) and
/// the escape character are escaped, and so is white space at either end, which
/// the pattern would otherwise trim.
fn literal_key_part(text: &str) -> String {
    let last = text.chars().count().saturating_sub(1);
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.chars().enumerate() {
        let edge_space = c.is_whitespace() && (i == 0 || i == last);
        if edge_space
            || matches!(
                c,
                '\\' | '*' | '?' | '[' | ']' | '{' | '}' | ',' | '=' | '(' | ')'
            )
        {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The rule allowing `server`'s `tool` with exactly `input`: every key in sorted
/// order with its value as a literal (a string as itself, anything else as its
/// canonical compact JSON), closed by `!` so that no other key may be added. A
/// call without keys gets `mcp__s__t(!)`, which matches only an empty input.
pub fn literal_mcp_rule(server: &str, tool: &str, input: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = input.keys().collect();
    keys.sort();
    let mut items: Vec<String> = keys
        .into_iter()
        .map(|k| {
            let value = match &input[k.as_str()] {
                Value::String(s) => literal_key_part(s),
                other => literal_key_part(&canonical_json(other)),
            };
            format!("{}={value}", literal_key_part(k))
        })
        .collect();
    items.push("!".into());
    format!("{}({})", model_name(server, tool), items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Rule, RuleSet};
    use crate::protocol::mcp::{PinFile, PinnedTool, ToolDefinition};
    use serde_json::json;

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

    /// `git`'s `git_log`, pinned, with the properties the MCP test names.
    fn pinned_git_log() -> (ToolDefinition, PinFile) {
        let definition = ToolDefinition {
            name: "git_log".into(),
            title: None,
            description: None,
            input_schema: json!({"type": "object", "properties": {
                "path": {}, "max_count": {}, "opts": {}, "a=b": {}, "flag": {}, "extra": {}
            }}),
            output_schema: None,
            annotations: None,
        };
        let mut pins = PinFile::default();
        pins.servers.entry("git".into()).or_default().tools.insert(
            "git_log".into(),
            PinnedTool {
                sha256: definition.sha256(),
                definition: definition.clone(),
            },
        );
        (definition, pins)
    }

    /// The remembered rule of an MCP call compiles against the pinned schema and
    /// allows that call only: not another value, not one more key.
    #[test]
    fn a_literal_mcp_rule_matches_its_call_and_nothing_else() {
        use crate::policy::{McpSubject, Policy, RuleLists, decide_mcp};
        use crate::protocol::Tier;
        let call = json!({
            "path": r"workspace/a*b?[c]{d},e=f(g)\h ",
            "max_count": 5,
            "opts": {"z": [1, "x,y"], "a": null},
            "a=b": " lead",
            "flag": true,
        });
        let object = call.as_object().expect("object");
        let rule = literal_mcp_rule("git", "git_log", object);
        assert!(
            rule.starts_with("mcp__git__git_log(a\\=b=\\ lead, flag=true, max_count=5, "),
            "{rule}"
        );
        assert!(rule.ends_with(", !)"), "{rule}");
        let (definition, pins) = pinned_git_log();
        let (allow, servers) = (vec![rule.clone()], vec!["git".to_string()]);
        let policy = Policy::compile(RuleLists {
            default: Tier::Deny,
            allow: &allow,
            allow_write: &[],
            ask: &[],
            deny: &[],
            mcp_servers: &servers,
            pins: &pins,
        })
        .unwrap_or_else(|e| panic!("{rule}: {e}"));
        let tier = |input: serde_json::Value| {
            decide_mcp(
                &policy,
                McpSubject {
                    server: "git",
                    tool: "git_log",
                    input: &input,
                    pinned: Some(&definition),
                    current: true,
                },
            )
            .tier
        };
        assert_eq!(tier(call.clone()), Tier::Allow, "{rule}");
        // The same object with its keys in another order is the same call.
        let reordered: serde_json::Value = serde_json::from_str(
            r#"{"flag": true, "opts": {"a": null, "z": [1, "x,y"]}, "a=b": " lead", "max_count": 5, "path": "workspace/a*b?[c]{d},e=f(g)\\h "}"#,
        )
        .expect("json");
        assert_eq!(tier(reordered), Tier::Allow, "{rule}");
        let mut more = call.clone();
        more["extra"] = json!(1);
        assert_eq!(tier(more), Tier::Deny);
        for (key, other) in [
            ("path", json!("workspace/aXb?[c]{d},e=f(g)\\h ")),
            ("path", json!("workspace/a*b?[c]{d},e=f(g)\\h")),
            ("max_count", json!("5x")),
            ("max_count", json!(6)),
            ("opts", json!({"z": [1, "x,y"]})),
            ("a=b", json!("lead")),
            ("flag", json!(false)),
        ] {
            let mut changed = call.clone();
            changed[key] = other;
            assert_eq!(tier(changed), Tier::Deny, "{key}");
        }
        let mut fewer = call.clone();
        fewer.as_object_mut().expect("object").remove("flag");
        assert_eq!(tier(fewer), Tier::Deny);
        // No keys: the rule matches only an empty input.
        let empty = literal_mcp_rule("git", "git_log", &serde_json::Map::new());
        assert_eq!(empty, "mcp__git__git_log(!)");
    }
}
