//! The one digest the audit log, the config snapshot and the spool names use.

use sha2::{Digest, Sha256};

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `value` as compact JSON with every object's keys sorted: one text for one value,
/// whatever order its maps were built in (serde_json here keeps insertion order).
pub fn canonical_json(value: &serde_json::Value) -> String {
    sorted(value).to_string()
}

/// [`canonical_json`] with a two-space indent: a file meant for review and diffs.
pub fn canonical_pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(&sorted(value)).unwrap_or_default()
}

fn sorted(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}
