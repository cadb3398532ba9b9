//! Token counts: what a model response reports and what a task sums, and the
//! prices that turn them into US dollars.
//!
//! Two modules that must not know each other speak it: the model client parses
//! it from responses and the audit log records it.

use serde::{Deserialize, Serialize};

/// Token counts of one response, or summed over a task.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Usage {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
    }

    /// Input (cached or not) plus output: what `loop.token_budget` counts.
    pub fn total(&self) -> u64 {
        self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
    }
}

/// Prices of one model in US dollars per million tokens (`[pricing."<model>"]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Input written to the prompt cache (5-minute cache).
    pub cache_write: f64,
    /// Input read from the prompt cache.
    pub cache_read: f64,
}

impl Price {
    const fn of(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Price {
        Price {
            input,
            output,
            cache_write,
            cache_read,
        }
    }

    /// What `usage` costs at these prices, in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        // u64 → f64 loses precision only past 2^53 tokens.
        let per_token = |n: u64, per_million: f64| n as f64 * per_million / 1_000_000.0;
        per_token(usage.input_tokens, self.input)
            + per_token(usage.output_tokens, self.output)
            + per_token(usage.cache_creation_input_tokens, self.cache_write)
            + per_token(usage.cache_read_input_tokens, self.cache_read)
    }
}

/// Built-in prices of current Claude models (Anthropic's list prices, USD per
/// million tokens; standard context, 5-minute cache writes). A model id matches an
/// entry equal to it or the entry followed by a `-` suffix (a dated snapshot such
/// as `claude-sonnet-4-5-20250929`).
pub const BUILT_IN_PRICES: [(&str, Price); 10] = [
    ("claude-opus-4-5", Price::of(5.0, 25.0, 6.25, 0.50)),
    ("claude-opus-4-1", Price::of(15.0, 75.0, 18.75, 1.50)),
    ("claude-opus-4", Price::of(15.0, 75.0, 18.75, 1.50)),
    ("claude-sonnet-4-5", Price::of(3.0, 15.0, 3.75, 0.30)),
    ("claude-sonnet-4", Price::of(3.0, 15.0, 3.75, 0.30)),
    ("claude-3-7-sonnet", Price::of(3.0, 15.0, 3.75, 0.30)),
    ("claude-haiku-4-5", Price::of(1.0, 5.0, 1.25, 0.10)),
    ("claude-3-5-haiku", Price::of(0.80, 4.0, 1.0, 0.08)),
    ("claude-3-haiku", Price::of(0.25, 1.25, 0.30, 0.03)),
    ("claude-3-opus", Price::of(15.0, 75.0, 18.75, 1.50)),
];

/// The price of `model`: an entry of `overrides` (exact id) first, then the
/// longest built-in entry that matches; `None` when the model is unpriced.
pub fn price_of<'a>(
    model: &str,
    overrides: impl IntoIterator<Item = (&'a String, &'a Price)>,
) -> Option<Price> {
    if let Some((_, p)) = overrides.into_iter().find(|(m, _)| m.as_str() == model) {
        return Some(*p);
    }
    BUILT_IN_PRICES
        .iter()
        .filter(|(id, _)| {
            model == *id
                || model
                    .strip_prefix(id)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
        .max_by_key(|(id, _)| id.len())
        .map(|(_, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_ids_match_the_longest_entry_and_overrides_win() {
        let none: [(&String, &Price); 0] = [];
        let sonnet = price_of("claude-sonnet-4-5-20250929", none).unwrap();
        assert_eq!(sonnet.input, 3.0);
        let opus41 = price_of("claude-opus-4-1-20250805", []).unwrap();
        assert_eq!(opus41.output, 75.0);
        assert_eq!(price_of("claude-opus-4-5", []).unwrap().output, 25.0);
        assert_eq!(price_of("claude-sonnet-45", []), None);
        assert_eq!(price_of("fake-model", []), None);
        let mine = (String::from("fake-model"), Price::of(1.0, 2.0, 3.0, 4.0));
        assert_eq!(price_of("fake-model", [(&mine.0, &mine.1)]), Some(mine.1));
    }

    #[test]
    fn cost_counts_every_kind_of_token() {
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_creation_input_tokens: 200_000,
            cache_read_input_tokens: 2_000_000,
        };
        let c = Price::of(3.0, 15.0, 3.75, 0.30).cost(&usage);
        assert!((c - (3.0 + 1.5 + 0.75 + 0.6)).abs() < 1e-9, "{c}");
    }
}
