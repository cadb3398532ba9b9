//! Every line harnessd writes to a test root's audit log is checked against the
//! shipped JSON Schema (`docs/events.schema.json`, generated from the event types)
//! when the root is dropped, so the whole integration suite exercises it.

use std::path::Path;

use serde_json::Value;

/// The schema violations in the log files (`events*.jsonl`) under `dir`, one
/// message per bad line. Lines that are not JSON at all are not harnessd's (tests
/// write such lines on purpose to check readers report them) and are skipped.
pub fn violations(dir: &Path) -> Vec<String> {
    let schema: Value =
        serde_json::from_str(include_str!("../../../docs/events.schema.json")).unwrap();
    let mut compiler = boon::Compiler::new();
    let mut schemas = boon::Schemas::new();
    compiler
        .add_resource("file:///events.schema.json", schema)
        .unwrap();
    let index = compiler
        .compile("file:///events.schema.json", &mut schemas)
        .unwrap();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("events") && name.ends_with(".jsonl")) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if let Err(e) = schemas.validate(&value, index) {
                out.push(format!("{name}:{}: {e:#}\n{line}", n + 1));
            }
        }
    }
    out
}
