//! What changed between two snapshots, for `config_loaded`: every leaf key whose
//! value differs, and for lists (rules, paths) the items added and removed.

use serde_json::Value;

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => out.push((prefix.to_string(), other.clone())),
    }
}

/// Human-readable differences from `old` to `new` (both serialised configs).
pub fn changes(old: &Value, new: &Value) -> Vec<String> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    flatten("", old, &mut a);
    flatten("", new, &mut b);
    let mut out = Vec::new();
    for (key, new_value) in &b {
        let old_value = a.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        match (old_value, new_value) {
            (Some(Value::Array(x)), Value::Array(y)) => {
                for item in y.iter().filter(|i| !x.contains(i)) {
                    out.push(format!("{key}: added {item}"));
                }
                for item in x.iter().filter(|i| !y.contains(i)) {
                    out.push(format!("{key}: removed {item}"));
                }
            }
            (Some(o), n) if o != n => out.push(format!("{key}: {o} → {n}")),
            (None, n) => out.push(format!("{key}: set to {n}")),
            _ => {}
        }
    }
    for (key, _) in a.iter().filter(|(k, _)| !b.iter().any(|(kb, _)| kb == k)) {
        out.push(format!("{key}: removed"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_and_leaves() {
        let old =
            json!({"tools": {"deny": ["a", "b"], "default": "ask"}, "loop": {"max_turns": 12}});
        let new =
            json!({"tools": {"deny": ["b", "c"], "default": "ask"}, "loop": {"max_turns": 5}});
        assert_eq!(
            changes(&old, &new),
            [
                "tools.deny: added \"c\"",
                "tools.deny: removed \"a\"",
                "loop.max_turns: 12 → 5"
            ]
        );
        assert!(changes(&old, &old).is_empty());
    }
}
