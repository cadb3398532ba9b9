//! Rules and their index. A rule is `tool` or `tool(pattern)`; a [`RuleSet`] holds
//! one tier's rules in file order with, per tool, every pattern compiled into one
//! [`GlobSet`], so a decision is one automaton pass per string, not one per rule.

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

use crate::protocol::ToolName;

/// One rule: `tool` or `tool(pattern)`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule as written.
    pub text: String,
    /// The tool it is about.
    pub tool: ToolName,
    /// The globs of its pattern: the pattern, and for one ending in ` *` the same
    /// without it, so `ls *` matches `ls`. Empty for a whole-tool rule.
    globs: Vec<Glob>,
}

/// How many characters of a rule an error quotes: a rule of megabytes is named
/// by its start, not printed whole on one line.
const QUOTED_CHARS: usize = 200;

/// `text` as an error quotes it: escaped (`{:?}`), cut after [`QUOTED_CHARS`]
/// characters with `…`.
pub(super) fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((end, _)) => format!("{:?}…", &text[..end]),
        None => format!("{text:?}"),
    }
}

pub(super) fn glob(pattern: &str) -> Result<Glob, String> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|e| {
            let why = e.kind().to_string();
            format!(
                "pattern {} is not a valid glob: {}",
                quoted(pattern),
                quoted(&why)
            )
        })
}

impl Rule {
    /// Parses `tool` or `tool(pattern)`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let (name, pattern) = match text.find('(') {
            None => (text, None),
            Some(open) => {
                let inner = text[open + 1..].strip_suffix(')').ok_or_else(|| {
                    format!(
                        "rule {} opens a pattern with '(' but does not end with ')'",
                        quoted(text)
                    )
                })?;
                (&text[..open], Some(inner))
            }
        };
        let tool = ToolName::parse(name.trim()).ok_or_else(|| {
            format!(
                "rule {} names unknown tool {}; known tools: {}",
                quoted(text),
                quoted(name),
                ToolName::ALL_NAMES.join(", ")
            )
        })?;
        let globs = match pattern {
            None => Vec::new(),
            Some(_) if tool == ToolName::GetTime => {
                return Err(format!(
                    "rule {}: get_time takes no argument, so only `get_time` applies",
                    quoted(text)
                ));
            }
            Some("") => return Err(format!("rule {} has an empty pattern", quoted(text))),
            Some(p) => {
                let mut globs = vec![glob(p)?];
                if let Some(bare) = p.strip_suffix(" *") {
                    globs.push(glob(bare)?);
                }
                globs
            }
        };
        Ok(Rule {
            text: text.to_string(),
            tool,
            globs,
        })
    }

    /// The pattern as written, or `None` for a whole-tool rule.
    pub fn pattern(&self) -> Option<&str> {
        if self.is_whole_tool() {
            return None;
        }
        let open = self.text.find('(')?;
        self.text.get(open + 1..self.text.len().checked_sub(1)?)
    }

    /// Whether the rule has no pattern (it covers every call of its tool).
    pub fn is_whole_tool(&self) -> bool {
        self.globs.is_empty()
    }
}

/// The rules of one tool within a tier.
#[derive(Debug, Clone, Default)]
struct ToolRules {
    /// The first whole-tool rule, as an index into the set's rules.
    whole: Option<usize>,
    /// Every pattern glob of the tool's rules.
    globs: GlobSet,
    /// For each glob in `globs`, the index of its rule.
    owners: Vec<usize>,
}

/// One tier's rules, in file order, indexed by tool.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<Rule>,
    by_tool: Vec<ToolRules>,
}

impl RuleSet {
    /// Indexes `rules` (already parsed).
    pub fn new(rules: Vec<Rule>) -> Result<RuleSet, String> {
        let mut by_tool = Vec::with_capacity(ToolName::ALL.len());
        for tool in ToolName::ALL {
            let mut builder = GlobSetBuilder::new();
            let mut entry = ToolRules::default();
            for (i, rule) in rules.iter().enumerate().filter(|(_, r)| r.tool == tool) {
                if rule.is_whole_tool() {
                    entry.whole.get_or_insert(i);
                }
                for g in &rule.globs {
                    builder.add(g.clone());
                    entry.owners.push(i);
                }
            }
            entry.globs = builder.build().map_err(|e| e.to_string())?;
            by_tool.push(entry);
        }
        Ok(RuleSet { rules, by_tool })
    }

    /// The rules in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, Rule> {
        self.rules.iter()
    }

    fn tool(&self, tool: ToolName) -> &ToolRules {
        &self.by_tool[tool as usize]
    }

    /// The first whole-tool rule for `tool`.
    pub fn whole_tool(&self, tool: ToolName) -> Option<&Rule> {
        self.tool(tool).whole.map(|i| &self.rules[i])
    }

    /// The earliest pattern rule of `tool` matching any of `subjects`.
    pub fn first_pattern_hit<S: AsRef<str>>(
        &self,
        tool: ToolName,
        subjects: &[S],
    ) -> Option<&Rule> {
        let t = self.tool(tool);
        if t.owners.is_empty() {
            return None;
        }
        subjects
            .iter()
            .flat_map(|s| t.globs.matches(s.as_ref()))
            .map(|g| t.owners[g])
            .min()
            .map(|i| &self.rules[i])
    }

    /// The earliest rule of `tool` — whole-tool or a pattern matching any of
    /// `subjects`.
    pub fn first_hit<S: AsRef<str>>(&self, tool: ToolName, subjects: &[S]) -> Option<&Rule> {
        let whole = self.tool(tool).whole;
        let pattern = self
            .first_pattern_hit(tool, subjects)
            .and_then(|r| self.rules.iter().position(|x| std::ptr::eq(x, r)));
        whole
            .into_iter()
            .chain(pattern)
            .min()
            .map(|i| &self.rules[i])
    }
}
