//! A hook's answer read: one JSON object on stdout from a run that exited 0, and
//! what it says for its point. Anything else is a failure, said in words for the
//! record (escaped and cut: a hook's text is not trusted either).

use serde_json::{Map, Value};

use crate::config::Hook;
use crate::exec::{Ending, HOOK_STDOUT_BYTES, HookRun};
use crate::policy::PreAnswer;

/// Characters of a hook's reason kept in the record.
const REASON_CHARS: usize = 500;

/// The object a run answered, or why there is none.
pub(super) fn object(run: &HookRun, hook: &Hook) -> Result<Map<String, Value>, String> {
    match &run.ending {
        Ending::Exited(0) => {}
        Ending::Exited(code) => return Err(format!("exited with code {code}")),
        Ending::Signaled(sig) => return Err(format!("killed by signal {sig}")),
        Ending::TimedOut => {
            return Err(format!("timed out after {} s", hook.timeout_secs()));
        }
        Ending::Flooded => return Err("flooded its output".into()),
        Ending::Cancelled => return Err("cancelled".into()),
        Ending::SpawnFailed(e) => return Err(format!("did not start: {}", cut(e))),
    }
    let Some(stdout) = &run.stdout else {
        return Err(format!("answered more than {HOOK_STDOUT_BYTES} bytes"));
    };
    match serde_json::from_slice::<Value>(stdout) {
        Ok(Value::Object(o)) => match serde_json::from_slice::<OnceEach>(stdout) {
            Ok(_) => Ok(o),
            Err(e) => Err(format!("answered nonsense: {}", cut(&e.to_string()))),
        },
        Ok(_) | Err(_) => Err(format!(
            "answered nonsense, not one JSON object: {}",
            cut(&String::from_utf8_lossy(stdout))
        )),
    }
}

/// An object whose keys each occur once. Parsers differ on which of two values
/// of a key wins (serde_json keeps the last), so an answer naming one twice says
/// nothing for sure — and model text spliced into a hook's answer after its
/// `"decision": "deny"` would otherwise have the last word.
struct OnceEach;

impl<'de> serde::Deserialize<'de> for OnceEach {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OnceEach, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = OnceEach;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<OnceEach, A::Error> {
                let mut seen = std::collections::BTreeSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format_args!(
                            "named `{key}` twice"
                        )));
                    }
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(OnceEach)
            }
        }
        d.deserialize_map(V)
    }
}

/// A pre_tool answer: `{"decision": "deny" | "ask" | "allow" | "continue",
/// "reason"?: "…"}`.
pub fn parse_pre(o: &Map<String, Value>) -> Result<(PreAnswer, Option<String>), String> {
    let decision = match o.get("decision").and_then(Value::as_str) {
        Some("deny") => PreAnswer::Deny,
        Some("ask") => PreAnswer::Ask,
        Some("allow") => PreAnswer::Allow,
        Some("continue") => PreAnswer::Continue,
        _ => {
            return Err(
                "answered no decision (\"deny\", \"ask\", \"allow\" or \"continue\")".into(),
            );
        }
    };
    Ok((decision, reason(o)?))
}

/// A post_tool answer: `{"result": "…"}` replaces the model's text; `{}` or
/// `{"decision": "continue"}` keeps it.
pub fn parse_post(o: &Map<String, Value>) -> Result<Option<String>, String> {
    match o.get("result") {
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err("answered a `result` that is not a string".into()),
        None => Ok(None),
    }
}

pub(super) fn reason(o: &Map<String, Value>) -> Result<Option<String>, String> {
    match o.get("reason") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(r)) => Ok(Some(cut(r))),
        Some(_) => Err("answered a `reason` that is not a string".into()),
    }
}

/// `text` cut to [`REASON_CHARS`] and made one inert line.
fn cut(text: &str) -> String {
    let (text, _) = crate::text::truncate_middle(text.trim(), REASON_CHARS, 0);
    crate::text::escape_line(&text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn a_pre_tool_answer_names_one_of_four_decisions() {
        assert_eq!(
            parse_pre(&obj(r#"{"decision": "deny", "reason": "no\u001b[31m"}"#)).unwrap(),
            (PreAnswer::Deny, Some("no\\x1b[31m".into()))
        );
        assert_eq!(
            parse_pre(&obj(r#"{"decision": "continue"}"#)).unwrap().0,
            PreAnswer::Continue
        );
        assert!(parse_pre(&obj(r#"{"decision": "maybe"}"#)).is_err());
        assert!(parse_pre(&obj(r#"{"reason": "x"}"#)).is_err());
        assert!(parse_pre(&obj(r#"{"decision": "allow", "reason": 3}"#)).is_err());
    }

    #[test]
    fn an_answer_naming_a_key_twice_is_nonsense() {
        let run = |text: &str| HookRun {
            ending: Ending::Exited(0),
            stdout: Some(text.as_bytes().to_vec()),
            duration: std::time::Duration::ZERO,
        };
        let hook = Hook::default();
        let e = object(&run(r#"{"decision": "deny", "decision": "allow"}"#), &hook).unwrap_err();
        assert!(e.contains("named `decision` twice"), "{e}");
        // Only the answer's own keys: a value may hold any object.
        let o = object(
            &run(r#"{"decision": "continue", "x": [{"a": 1}, {"a": 2}]}"#),
            &hook,
        );
        assert!(o.is_ok(), "{o:?}");
    }

    #[test]
    fn a_post_tool_answer_replaces_only_with_a_string() {
        assert_eq!(
            parse_post(&obj(r#"{"result": "x"}"#)).unwrap(),
            Some("x".into())
        );
        assert_eq!(parse_post(&obj("{}")).unwrap(), None);
        assert!(parse_post(&obj(r#"{"result": 1}"#)).is_err());
    }
}
