//! Rules on MCP tools and the decision for one MCP call.
//!
//! A rule names a whole server (`mcp__git`, `mcp__git__*`), one tool
//! (`mcp__git__git_log`), or one tool with a key pattern
//! (`mcp__git__git_log(repo_path=workspace/*, max_count=*)`, optionally closed by
//! `!`): each named key's value must match its glob — a string as itself, any
//! other value as its canonical compact JSON (keys sorted, so `{"b":2,"a":1}`
//! and `{"a":1,"b":2}` are one text) — and with `!` the call may hold no other
//! key. `\` escapes `* ? [ ] { } , = ( ) \`; an unescaped `,` inside `{…}` or
//! `[…]` belongs to the glob, so `max_count={1,2}` works as a glob would.
//!
//! Precedence extends the built-in one by the server level and harnessd's own
//! raises: an unknown server, an unpinned tool or a drifted one is denied above
//! every allow; then any deny > key-pattern ask > key-pattern allow (or
//! allow_write) > tool ask > tool allow > server ask > server allow > default.
//! A definition the server marks destructive raises an allow to ask; nothing
//! lowers a tier.

use std::collections::BTreeSet;

use globset::GlobMatcher;
use serde_json::Value;

use super::Decision;
use super::rules::{glob, quoted};
use crate::protocol::Tier;
use crate::protocol::audit::Profile;
use crate::protocol::canonical_json;
use crate::protocol::mcp::{PREFIX, PinFile, SEPARATOR, ToolDefinition, valid_server_name};

/// One rule on MCP tools.
#[derive(Debug, Clone)]
pub struct McpRule {
    /// The rule as written.
    pub text: String,
    /// The server it is about.
    pub server: String,
    /// The tool, or `None` for every tool of the server.
    pub tool: Option<String>,
    /// The key pattern, or `None` for every call of the tool.
    keys: Option<KeyPattern>,
}

/// `(key=glob, …[, !])`, compiled.
#[derive(Debug, Clone)]
struct KeyPattern {
    /// Each named key with the glob its value must match.
    keys: Vec<(String, GlobMatcher)>,
    /// The list ended with `!`: the call may hold no other key.
    exclusive: bool,
}

/// How specific a rule is: what it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// A key pattern of one tool.
    Keys,
    /// Every call of one tool.
    Tool,
    /// Every tool of a server.
    Server,
}

/// Whether `text` is a rule about MCP tools (and so parsed by [`McpRule::parse`]).
pub fn is_mcp_rule(text: &str) -> bool {
    text.trim_start().starts_with(PREFIX)
}

impl McpRule {
    /// Parses `mcp__<server>`, `mcp__<server>__*`, `mcp__<server>__<tool>` or
    /// `mcp__<server>__<tool>(key=glob, …)`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<McpRule, String> {
        let full = text;
        let text = text.trim();
        let (name, pattern) = match text.find('(') {
            None => (text.trim(), None),
            Some(open) => {
                let inner = text[open + 1..].strip_suffix(')').ok_or_else(|| {
                    format!(
                        "rule {} opens a pattern with '(' but does not end with ')'",
                        quoted(text)
                    )
                })?;
                (text[..open].trim(), Some(inner))
            }
        };
        let rest = name.strip_prefix(PREFIX).unwrap_or(name);
        let (server, tool) = match rest.split_once(SEPARATOR) {
            Some((server, "*")) => (server, None),
            Some((server, tool)) => (server, Some(tool)),
            None => (rest, None),
        };
        if !valid_server_name(server) {
            return Err(format!(
                "rule {} names {} as an MCP server, which is not a server name",
                quoted(text),
                quoted(server)
            ));
        }
        match tool {
            Some("") => {
                return Err(format!(
                    "rule {} names no tool after `{PREFIX}{server}{SEPARATOR}`; write \
                     `{PREFIX}{server}` for every tool of the server",
                    quoted(text)
                ));
            }
            Some(t) if t.contains(['*', '?', '[', ']', '{', '}']) => {
                return Err(format!(
                    "rule {}: a tool name is not a glob; `{PREFIX}{server}{SEPARATOR}*` names \
                     every tool of the server",
                    quoted(text)
                ));
            }
            _ => {}
        }
        let keys = match (pattern, tool) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(format!(
                    "rule {}: a key pattern is about one tool's input, not a whole server's",
                    quoted(text)
                ));
            }
            (Some(p), Some(_)) => {
                Some(KeyPattern::parse(p).map_err(|why| format!("rule {}: {why}", quoted(text)))?)
            }
        };
        Ok(McpRule {
            text: full.to_string(),
            server: server.to_string(),
            tool: tool.map(str::to_string),
            keys,
        })
    }

    /// The input keys the rule's pattern names (none for a rule without one).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys
            .iter()
            .flat_map(|k| k.keys.iter().map(|(name, _)| name.as_str()))
    }

    /// Whether the rule has a key pattern.
    pub fn has_pattern(&self) -> bool {
        self.keys.is_some()
    }

    fn level(&self) -> Level {
        match (&self.tool, &self.keys) {
            (None, _) => Level::Server,
            (Some(_), None) => Level::Tool,
            (Some(_), Some(_)) => Level::Keys,
        }
    }

    /// Whether the rule covers `server`'s `tool` called with `input`.
    fn covers(&self, server: &str, tool: &str, input: &Value) -> bool {
        self.server == server
            && self.tool.as_deref().is_none_or(|t| t == tool)
            && self.keys.as_ref().is_none_or(|k| k.matches(input))
    }

    /// Checks the rule against the settings: its server must be configured, and
    /// when its tool is pinned, every key it names must be a property of the
    /// tool's input schema. A tool not pinned is accepted (pins change while
    /// harnessd runs; `check` warns about a rule that matches no pinned tool).
    pub fn check(&self, servers: &BTreeSet<String>, pins: &PinFile) -> Result<(), String> {
        if !servers.contains(&self.server) {
            let known: Vec<&str> = servers.iter().map(String::as_str).collect();
            return Err(format!(
                "rule {} names MCP server {}, which is not in mcp.servers{}",
                quoted(&self.text),
                quoted(&self.server),
                if known.is_empty() {
                    " (no server is configured)".to_string()
                } else {
                    format!("; servers: {}", known.join(", "))
                }
            ));
        }
        let Some(tool) = &self.tool else {
            return Ok(());
        };
        let Some(pinned) = pins.tool(&self.server, tool) else {
            return Ok(());
        };
        let properties: Vec<&str> = pinned.definition.input_properties().collect();
        if let Some(key) = self.keys().find(|k| !properties.contains(k)) {
            return Err(format!(
                "rule {} names key {}, which is not a property of {}'s pinned input schema \
                 (properties: {})",
                quoted(&self.text),
                quoted(key),
                tool,
                if properties.is_empty() {
                    "none".to_string()
                } else {
                    properties.join(", ")
                }
            ));
        }
        Ok(())
    }
}

/// One character of a pattern and whether it was escaped.
type Unit = (char, bool);

impl KeyPattern {
    fn parse(pattern: &str) -> Result<KeyPattern, String> {
        let items = split_items(pattern)?;
        let mut keys: Vec<(String, GlobMatcher)> = Vec::new();
        let mut exclusive = false;
        let last = items.len().saturating_sub(1);
        for (i, item) in items.iter().enumerate() {
            if item.as_slice() == [('!', false)] {
                if i != last {
                    return Err("`!` must close the key list".into());
                }
                exclusive = true;
                continue;
            }
            if item.is_empty() {
                return Err("an empty item in the key list".into());
            }
            let Some(eq) = item.iter().position(|&u| u == ('=', false)) else {
                return Err(format!(
                    "{} is not `key=glob`: an MCP tool's patterns name its input keys \
                     (`tool(key=glob, …)`), there is no positional pattern",
                    quoted(&render(item))
                ));
            };
            let key: String = trim(&item[..eq]).iter().map(|(c, _)| c).collect();
            if key.is_empty() {
                return Err(format!("{} names no key", quoted(&render(item))));
            }
            if keys.iter().any(|(k, _)| *k == key) {
                return Err(format!("key {} is named twice", quoted(&key)));
            }
            let value = render(trim(&item[eq + 1..]));
            keys.push((key, glob(&value)?.compile_matcher()));
        }
        Ok(KeyPattern { keys, exclusive })
    }

    fn matches(&self, input: &Value) -> bool {
        let Some(object) = input.as_object() else {
            return false;
        };
        let named = self.keys.iter().all(|(key, glob)| match object.get(key) {
            None => false,
            Some(Value::String(s)) => glob.is_match(s),
            Some(other) => glob.is_match(canonical_json(other)),
        });
        named && (!self.exclusive || object.len() == self.keys.len())
    }
}

/// The items of a key list: split at each `,` that is neither escaped nor inside
/// a glob's `{…}` or `[…]`, each trimmed of unescaped white space.
fn split_items(pattern: &str) -> Result<Vec<Vec<Unit>>, String> {
    let mut items = vec![Vec::new()];
    let (mut braces, mut class) = (0usize, false);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        let unit = if c == '\\' {
            let next = chars
                .next()
                .ok_or_else(|| "the pattern ends with a lone `\\`".to_string())?;
            (next, true)
        } else {
            (c, false)
        };
        match unit {
            ('[', false) if !class => class = true,
            (']', false) if class => class = false,
            ('{', false) if !class => braces += 1,
            ('}', false) if !class => braces = braces.saturating_sub(1),
            (',', false) if !class && braces == 0 => {
                items.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(item) = items.last_mut() {
            item.push(unit);
        }
    }
    Ok(items.iter().map(|item| trim(item).to_vec()).collect())
}

fn trim(units: &[Unit]) -> &[Unit] {
    let blank = |u: &Unit| u.0.is_whitespace() && !u.1;
    let start = units.iter().position(|u| !blank(u)).unwrap_or(units.len());
    let end = units
        .iter()
        .rposition(|u| !blank(u))
        .map_or(start, |e| e + 1);
    &units[start..end]
}

/// Units as glob text: each escaped character escaped again, for globset.
fn render(units: &[Unit]) -> String {
    let mut out = String::with_capacity(units.len());
    for &(c, escaped) in units {
        if escaped {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The MCP rules of every list, with the servers they may name.
#[derive(Debug, Clone, Default)]
pub struct McpPolicy {
    /// The servers of `mcp.servers`.
    pub servers: BTreeSet<String>,
    /// MCP rules of `tools.deny`, in file order.
    pub deny: Vec<McpRule>,
    /// Of `tools.ask`.
    pub ask: Vec<McpRule>,
    /// Of `tools.allow`.
    pub allow: Vec<McpRule>,
    /// Of `tools.allow_write`: the same as `allow` for MCP tools, whose calls run
    /// in the server, not in a tool process.
    pub allow_write: Vec<McpRule>,
}

/// An MCP call as policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct McpSubject<'a> {
    /// The server, as named in `mcp.servers`.
    pub server: &'a str,
    /// The tool, as the server names it.
    pub tool: &'a str,
    /// The call's input object.
    pub input: &'a Value,
    /// The tool's pinned definition; `None` when it is not pinned.
    pub pinned: Option<&'a ToolDefinition>,
    /// `false` when the server now lists a definition other than the pinned one.
    pub current: bool,
}

/// The `rule` of a call denied because its server is not in `mcp.servers` (a
/// task that outlived a reload, say): one of harnessd's raises, above every rule.
pub const UNKNOWN_SERVER: &str = "mcp:unknown_server";
/// The `rule` of a call denied because its tool has no pinned definition.
pub const UNPINNED: &str = "mcp:unpinned";
/// The `rule` of a call denied because the server lists a definition of the tool
/// other than the pinned one.
pub const DRIFTED: &str = "mcp:drifted";

/// Decides one MCP call (see the module's doc for the order).
pub fn decide_mcp(policy: &super::Policy, subject: McpSubject<'_>) -> Decision {
    let m = &policy.mcp;
    let McpSubject {
        server,
        tool,
        input,
        ..
    } = subject;
    let decided = |tier, rule: Option<&str>, raised: Option<String>| Decision {
        tier,
        rule: rule.map(str::to_string),
        profile: Profile::Write,
        raised,
        unseen: None,
        shell: None,
    };
    if !m.servers.contains(server) {
        let why = format!("{server} is not in mcp.servers");
        return decided(Tier::Deny, Some(UNKNOWN_SERVER), Some(why));
    }
    let Some(pinned) = subject.pinned else {
        let why = format!(
            "{tool} has no pinned definition; `harnessd mcp pin {server}` accepts the server's tools"
        );
        return decided(Tier::Deny, Some(UNPINNED), Some(why));
    };
    if !subject.current {
        let why = format!(
            "{server} now lists a definition of {tool} other than the pinned one; review it, then \
             `harnessd mcp pin {server}`"
        );
        return decided(Tier::Deny, Some(DRIFTED), Some(why));
    }
    if let Some(r) = m.deny.iter().find(|r| r.covers(server, tool, input)) {
        return decided(Tier::Deny, Some(&r.text), None);
    }
    // `allow_write` first, as for built-in tools: the label names the list the
    // operator wrote for it.
    let asks: [&[McpRule]; 1] = [&m.ask];
    let allows: [&[McpRule]; 2] = [&m.allow_write, &m.allow];
    let found = [Level::Keys, Level::Tool, Level::Server]
        .into_iter()
        .flat_map(|level| {
            [
                (level, Tier::Ask, &asks[..]),
                (level, Tier::Allow, &allows[..]),
            ]
        })
        .find_map(|(level, tier, lists)| {
            lists.iter().find_map(|rules| {
                rules
                    .iter()
                    .find(|r| r.level() == level && r.covers(server, tool, input))
                    .map(|r| (tier, r))
            })
        });
    let d = match found {
        Some((tier, r)) => decided(tier, Some(&r.text), None),
        None => decided(policy.default, None, None),
    };
    if d.tier == Tier::Allow && pinned.destructive() {
        return Decision {
            tier: Tier::Ask,
            raised: Some(format!("the server marks {tool} destructive")),
            ..d
        };
    }
    d
}

/// Whether `server`'s `tool` is refused outright (a deny rule of the tool or the
/// server without a key pattern), so it is not advertised to the model at all.
pub fn mcp_denied_outright(policy: &super::Policy, server: &str, tool: &str) -> bool {
    policy.mcp.deny.iter().any(|r| {
        r.keys.is_none() && r.server == server && r.tool.as_deref().is_none_or(|t| t == tool)
    })
}

/// A rule on MCP tools that matches no pinned tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpinnedRule {
    /// Its list: `deny`, `ask`, `allow` or `allow_write`.
    pub list: &'static str,
    /// The rule as written.
    pub rule: String,
}

/// The MCP rules that match no tool of `pins`: a tool rule whose tool is not
/// pinned, a server rule whose server has no pinned tool. Not errors — pins
/// change while harnessd runs — but `check` says so.
pub fn unpinned_mcp_rules(policy: &super::Policy, pins: &PinFile) -> Vec<UnpinnedRule> {
    let m = &policy.mcp;
    [
        ("deny", &m.deny),
        ("ask", &m.ask),
        ("allow", &m.allow),
        ("allow_write", &m.allow_write),
    ]
    .into_iter()
    .flat_map(|(list, rules)| {
        rules
            .iter()
            .filter(|r| match &r.tool {
                Some(t) => pins.tool(&r.server, t).is_none(),
                None => pins
                    .servers
                    .get(&r.server)
                    .is_none_or(|s| s.tools.is_empty()),
            })
            .map(move |r| UnpinnedRule {
                list,
                rule: r.text.clone(),
            })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, RuleLists};
    use crate::protocol::mcp::{PinFile, PinnedTool, ToolAnnotations};
    use serde_json::json;

    fn def(name: &str, properties: &[&str], destructive: bool) -> ToolDefinition {
        let props: serde_json::Map<String, Value> = properties
            .iter()
            .map(|p| (p.to_string(), json!({})))
            .collect();
        ToolDefinition {
            name: name.into(),
            title: None,
            description: Some(format!("{name} tool")),
            input_schema: json!({"type": "object", "properties": props}),
            output_schema: None,
            annotations: destructive.then(|| ToolAnnotations {
                destructive_hint: Some(true),
                ..ToolAnnotations::default()
            }),
        }
    }

    /// `git` pins `git_log` (repo_path, max_count, opts) and `git_reset`
    /// (destructive); `time` is configured, nothing of it is pinned.
    fn pins() -> PinFile {
        let mut file = PinFile::default();
        let tools = [
            def("git_log", &["repo_path", "max_count", "opts"], false),
            def("git_reset", &["repo_path"], true),
        ];
        let entry = file.servers.entry("git".into()).or_default();
        for d in tools {
            entry.tools.insert(
                d.name.clone(),
                PinnedTool {
                    sha256: d.sha256(),
                    definition: d,
                },
            );
        }
        file
    }

    fn compile(
        default: Tier,
        deny: &[&str],
        ask: &[&str],
        allow: &[&str],
    ) -> Result<Policy, String> {
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (deny, ask, allow) = (owned(deny), owned(ask), owned(allow));
        let servers = owned(&["git", "time"]);
        let pins = pins();
        Policy::compile(RuleLists {
            default,
            allow: &allow,
            allow_write: &[],
            ask: &ask,
            deny: &deny,
            mcp_servers: &servers,
            pins: &pins,
        })
        .map_err(|e| e.to_string())
    }

    fn policy(deny: &[&str], ask: &[&str], allow: &[&str]) -> Policy {
        compile(Tier::Ask, deny, ask, allow).expect("valid rules")
    }

    /// The decision for `git`'s `tool` with `input`, pinned as in [`pins`] and current.
    fn decide(p: &Policy, tool: &str, input: Value) -> Decision {
        let pins = pins();
        decide_mcp(
            p,
            McpSubject {
                server: "git",
                tool,
                input: &input,
                pinned: pins.tool("git", tool).map(|t| &t.definition),
                current: true,
            },
        )
    }

    /// Whether the one allow rule `rule` allows `git_log` with `input`.
    fn allows(rule: &str, input: Value) -> bool {
        let p = compile(Tier::Deny, &[], &[], &[rule]).expect("valid rule");
        decide(&p, "git_log", input).tier == Tier::Allow
    }

    #[test]
    fn every_rule_form_covers_what_it_names() {
        let call = json!({"repo_path": "workspace/r"});
        for rule in [
            "mcp__git",
            "mcp__git__*",
            "mcp__git__git_log",
            "mcp__git__git_log(repo_path=workspace/*)",
            " mcp__git__git_log (repo_path = workspace/* ) ",
        ] {
            assert!(allows(rule, call.clone()), "{rule}");
        }
        for rule in [
            "mcp__time",
            "mcp__git__git_status",
            "mcp__git__git_log(repo_path=/etc/*)",
        ] {
            assert!(!allows(rule, call.clone()), "{rule}");
        }
        let r = McpRule::parse("mcp__git__*").expect("parses");
        assert_eq!((r.server.as_str(), r.tool.as_deref()), ("git", None));
        let r = McpRule::parse("mcp__a__b__c").expect("parses");
        assert_eq!((r.server.as_str(), r.tool.as_deref()), ("a", Some("b__c")));
    }

    #[test]
    fn key_values_match_as_strings_or_canonical_json() {
        // A number as its JSON text, `*` across slashes.
        assert!(allows(
            "mcp__git__git_log(max_count=5)",
            json!({"max_count": 5})
        ));
        assert!(!allows(
            "mcp__git__git_log(max_count=5)",
            json!({"max_count": 50})
        ));
        assert!(allows(
            "mcp__git__git_log(max_count=*)",
            json!({"max_count": 50})
        ));
        assert!(allows(
            "mcp__git__git_log(repo_path=*)",
            json!({"repo_path": "a/b/c"})
        ));
        // An object as canonical JSON, whatever order its keys were written in.
        let rule = r#"mcp__git__git_log(opts=\{"a":1\,"b":2\})"#;
        let reordered: Value = serde_json::from_str(r#"{"opts": {"b": 2, "a": 1}}"#).unwrap();
        assert!(allows(rule, reordered));
        assert!(!allows(rule, json!({"opts": {"a": 1, "b": 3}})));
        // Unescaped commas inside `{…}` belong to the glob.
        assert!(allows(
            "mcp__git__git_log(max_count={1,2}, repo_path=x)",
            json!({"max_count": 2, "repo_path": "x"})
        ));
        assert!(!allows(
            "mcp__git__git_log(max_count={1,2}, repo_path=x)",
            json!({"max_count": 3, "repo_path": "x"})
        ));
        // A string is itself, not its JSON: no quotes.
        assert!(!allows(
            r#"mcp__git__git_log(repo_path="x")"#,
            json!({"repo_path": "x"})
        ));
        assert!(allows(
            "mcp__git__git_log(repo_path=true)",
            json!({"repo_path": true})
        ));
    }

    #[test]
    fn escapes_make_every_special_character_literal() {
        let rule = r"mcp__git__git_log(repo_path=a\*b\?\[c\]\{d\}\,e\=f\(g\)\\h)";
        assert!(allows(rule, json!({"repo_path": r"a*b?[c]{d},e=f(g)\h"})));
        assert!(!allows(rule, json!({"repo_path": r"aXb?[c]{d},e=f(g)\h"})));
        // An escaped space at an end is kept; unescaped ones are trimmed.
        assert!(allows(
            r"mcp__git__git_log(repo_path=\ x\ )",
            json!({"repo_path": " x "})
        ));
        assert!(!allows(
            r"mcp__git__git_log(repo_path=\ x\ )",
            json!({"repo_path": "x"})
        ));
        // The first unescaped `=` splits; later ones are the glob's.
        assert!(allows(
            "mcp__git__git_log(repo_path=a=b)",
            json!({"repo_path": "a=b"})
        ));
        // An empty glob matches the empty string only.
        assert!(allows(
            "mcp__git__git_log(repo_path=)",
            json!({"repo_path": ""})
        ));
        assert!(!allows(
            "mcp__git__git_log(repo_path=)",
            json!({"repo_path": "x"})
        ));
    }

    #[test]
    fn a_missing_key_is_no_match_and_bang_closes_the_list() {
        assert!(!allows(
            "mcp__git__git_log(max_count=*)",
            json!({"repo_path": "x"})
        ));
        assert!(!allows(
            "mcp__git__git_log(max_count=*)",
            json!("not an object")
        ));
        let open = "mcp__git__git_log(repo_path=x)";
        assert!(allows(open, json!({"repo_path": "x", "max_count": 1})));
        let closed = "mcp__git__git_log(repo_path=x, !)";
        assert!(allows(closed, json!({"repo_path": "x"})));
        assert!(!allows(closed, json!({"repo_path": "x", "max_count": 1})));
        assert!(allows("mcp__git__git_log(!)", json!({})));
        assert!(!allows("mcp__git__git_log(!)", json!({"repo_path": "x"})));
    }

    #[test]
    fn bad_mcp_rules_are_errors() {
        let err = |rule: &str| compile(Tier::Ask, &[rule], &[], &[]).expect_err(rule);
        for (rule, says) in [
            ("mcp__git__git_log(workspace/*)", "no positional pattern"),
            ("mcp__git(repo_path=x)", "not a whole server's"),
            ("mcp__git__*(repo_path=x)", "not a whole server's"),
            ("mcp__nope__x", "not in mcp.servers; servers: git, time"),
            ("mcp__nope", "not in mcp.servers"),
            ("mcp__Git__x", "not a server name"),
            ("mcp__git__", "names no tool"),
            ("mcp__git__git_*", "not a glob"),
            (
                "mcp__git__git_log(path=x)",
                "not a property of git_log's pinned input schema (properties: repo_path, max_count, opts)",
            ),
            ("mcp__git__git_log(!, repo_path=x)", "`!` must close"),
            ("mcp__git__git_log(repo_path=x, repo_path=y)", "named twice"),
            ("mcp__git__git_log(=x)", "names no key"),
            ("mcp__git__git_log(repo_path=x,)", "empty item"),
            ("mcp__git__git_log()", "empty item"),
            ("mcp__git__git_log(repo_path=x", "does not end with ')'"),
            ("mcp__git__git_log(repo_path=[)", "not a valid glob"),
            (r"mcp__git__git_log(repo_path=x\)", "lone `\\`"),
        ] {
            let e = err(rule);
            assert!(e.contains(says), "{rule}: {e}");
            assert!(e.starts_with("deny rule 0: "), "{rule}: {e}");
        }
        // A tool that is not pinned takes any key: pins change while harnessd runs.
        compile(
            Tier::Ask,
            &["mcp__git__git_status(anything=x)", "mcp__time__now(tz=*)"],
            &[],
            &[],
        )
        .expect("unpinned tools accept key patterns");
    }

    /// Every tier with no rule, a server rule, a tool rule, a matching or a
    /// non-matching key pattern, under every default: the documented order decides.
    #[test]
    fn mcp_precedence_matrix() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        enum R {
            None,
            Server,
            Tool,
            Hit,
            Miss,
        }
        let rule = |r: R, star: bool| match r {
            R::None => None,
            R::Server if star => Some("mcp__git__*"),
            R::Server => Some("mcp__git"),
            R::Tool => Some("mcp__git__git_log"),
            R::Hit => Some("mcp__git__git_log(repo_path=workspace/*)"),
            R::Miss => Some("mcp__git__git_log(repo_path=/etc/*)"),
        };
        let all = [R::None, R::Server, R::Tool, R::Hit, R::Miss];
        let mut cases = 0;
        for deny in all {
            for ask in all {
                for allow in all {
                    for default in [Tier::Allow, Tier::Ask, Tier::Deny] {
                        let list = |r: R, star| rule(r, star).into_iter().collect::<Vec<_>>();
                        let p = compile(
                            default,
                            &list(deny, false),
                            &list(ask, true),
                            &list(allow, false),
                        )
                        .expect("valid");
                        let d = decide(
                            &p,
                            "git_log",
                            json!({"repo_path": "workspace/r", "max_count": 3}),
                        );
                        let expected = if matches!(deny, R::Server | R::Tool | R::Hit) {
                            Tier::Deny
                        } else if ask == R::Hit {
                            Tier::Ask
                        } else if allow == R::Hit {
                            Tier::Allow
                        } else if ask == R::Tool {
                            Tier::Ask
                        } else if allow == R::Tool {
                            Tier::Allow
                        } else if ask == R::Server {
                            Tier::Ask
                        } else if allow == R::Server {
                            Tier::Allow
                        } else {
                            default
                        };
                        let what = format!(
                            "deny {deny:?} ask {ask:?} allow {allow:?} default {default:?}"
                        );
                        assert_eq!(d.tier, expected, "{what}");
                        assert_eq!(d.profile, Profile::Write, "{what}");
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 375);
    }

    #[test]
    fn deny_is_the_first_in_file_order_and_allow_write_counts_as_allow() {
        let p = policy(&["mcp__git__git_log(max_count=*)", "mcp__git"], &[], &[]);
        let d = decide(&p, "git_log", json!({"max_count": 1}));
        assert_eq!(
            (d.tier, d.rule.as_deref()),
            (Tier::Deny, Some("mcp__git__git_log(max_count=*)"))
        );
        let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (servers, pins) = (owned(&["git"]), pins());
        let allow_write = owned(&["mcp__git__git_log(max_count=1)"]);
        let ask = owned(&["mcp__git__git_log"]);
        let p = Policy::compile(RuleLists {
            default: Tier::Deny,
            allow: &[],
            allow_write: &allow_write,
            ask: &ask,
            deny: &[],
            mcp_servers: &servers,
            pins: &pins,
        })
        .expect("valid");
        let d = decide(&p, "git_log", json!({"max_count": 1}));
        assert_eq!(
            (d.tier, d.rule.as_deref()),
            (Tier::Allow, Some("mcp__git__git_log(max_count=1)"))
        );
    }

    #[test]
    fn unpinned_drifted_and_unknown_are_denied_above_every_allow() {
        let p = compile(
            Tier::Allow,
            &[],
            &[],
            &["mcp__git", "mcp__git__git_status", "mcp__time"],
        )
        .expect("valid");
        let input = json!({});
        let d = decide(&p, "git_status", input.clone());
        assert_eq!((d.tier, d.rule.as_deref()), (Tier::Deny, Some(UNPINNED)));
        assert!(
            d.raised
                .as_deref()
                .is_some_and(|r| r.contains("harnessd mcp pin git")),
            "{d:?}"
        );
        let pins = pins();
        let pinned = pins.tool("git", "git_log").map(|t| &t.definition);
        let subject = |server, current| McpSubject {
            server,
            tool: "git_log",
            input: &input,
            pinned,
            current,
        };
        let d = decide_mcp(&p, subject("git", false));
        assert_eq!((d.tier, d.rule.as_deref()), (Tier::Deny, Some(DRIFTED)));
        let d = decide_mcp(&p, subject("gone", true));
        assert_eq!(
            (d.tier, d.rule.as_deref()),
            (Tier::Deny, Some(UNKNOWN_SERVER))
        );
        assert_eq!(decide_mcp(&p, subject("git", true)).tier, Tier::Allow);
    }

    #[test]
    fn a_destructive_tool_is_raised_to_ask_and_nothing_lowers_a_tier() {
        let p = compile(Tier::Allow, &[], &[], &["mcp__git"]).expect("valid");
        let d = decide(&p, "git_reset", json!({"repo_path": "x"}));
        assert_eq!(d.tier, Tier::Ask);
        assert_eq!(
            d.raised.as_deref(),
            Some("the server marks git_reset destructive")
        );
        assert_eq!(d.rule.as_deref(), Some("mcp__git"));
        // Deny stays deny; a read-only hint lowers nothing.
        let p = compile(Tier::Allow, &["mcp__git__git_reset"], &[], &["mcp__git"]).expect("valid");
        assert_eq!(decide(&p, "git_reset", json!({})).tier, Tier::Deny);
        let mut read_only = def("git_log", &[], false);
        read_only.annotations = Some(ToolAnnotations {
            read_only_hint: Some(true),
            ..ToolAnnotations::default()
        });
        let p = compile(Tier::Ask, &[], &[], &[]).expect("valid");
        let d = decide_mcp(
            &p,
            McpSubject {
                server: "git",
                tool: "git_log",
                input: &json!({}),
                pinned: Some(&read_only),
                current: true,
            },
        );
        assert_eq!(d.tier, Tier::Ask);
    }

    #[test]
    fn denied_outright_and_rules_matching_no_pinned_tool() {
        let p = policy(
            &[
                "mcp__git__git_reset",
                "mcp__time",
                "mcp__git__git_log(max_count=9)",
            ],
            &["mcp__git__git_status"],
            &["mcp__git__git_log"],
        );
        assert!(mcp_denied_outright(&p, "git", "git_reset"));
        assert!(mcp_denied_outright(&p, "time", "anything"));
        assert!(!mcp_denied_outright(&p, "git", "git_log"));
        let unpinned = unpinned_mcp_rules(&p, &pins());
        let rules: Vec<(&str, &str)> = unpinned.iter().map(|u| (u.list, u.rule.as_str())).collect();
        assert_eq!(
            rules,
            [("deny", "mcp__time"), ("ask", "mcp__git__git_status")]
        );
    }
}
