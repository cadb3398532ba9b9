//! Property tests for the parsers of model text outside the shell analysis (which
//! has its own in `policy/shell/tests.rs`): tool-input validation, path judgement
//! and the terminal escaping of hostile text. No input panics; the escaped form
//! never holds a hidden character.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{ToolInput, ToolName, paths};
use crate::text;

/// Arbitrary JSON, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("path".to_string()),
                        Just("command".to_string()),
                        Just("code".to_string()),
                        Just("content".to_string()),
                        Just("offset".to_string()),
                        Just("limit".to_string()),
                        Just("timeout_secs".to_string()),
                        any::<String>(),
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn tool_input_validation_never_panics(input in any_json()) {
        for tool in ToolName::ALL {
            let _ = ToolInput::parse(tool, &input);
        }
    }

    /// Path strings made of the characters that matter to a path walk.
    #[test]
    fn path_judgement_never_panics(raw in "[./a\\x00-\\x1f\u{202e}é]{0,80}|/proc/[a-z/.]{0,20}") {
        let root = std::env::temp_dir();
        let _ = paths::judge(&root, &root.join("harnessd-props-ws"), &raw);
    }

    #[test]
    fn escaped_text_hides_nothing(s in any::<String>()) {
        for out in [text::escape_line(&s), text::escape_text(&s)] {
            prop_assert!(!out.chars().any(|c| text::is_hidden(c) && c != '\n' && c != '\t'));
        }
        prop_assert!(!text::escape_line(&s).contains(['\n', '\t']));
        let _ = text::render_input(&json!({"command": s}), 40);
    }
}
