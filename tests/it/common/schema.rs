//! Every line harnessd writes to a test root's audit log is checked against the
//! shipped JSON Schema (`docs/events.schema.json`, generated from the event types)
//! and read back through the typed [`Record`] when the root is dropped, so the
//! whole integration suite exercises both the writer and the reader.

use std::path::Path;

use harnessd::events::{Event, Record};
use serde_json::Value;

/// The JSON lines of the log files (`events*.jsonl`) under `dir`, as
/// (file name, line number, line). Lines that are not JSON at all are not
/// harnessd's (tests write such lines on purpose to check readers report them)
/// and are skipped.
fn json_lines(dir: &Path) -> Vec<(String, usize, String, Value)> {
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
            if let Ok(value) = serde_json::from_str::<Value>(line) {
                out.push((name.clone(), n + 1, line.to_string(), value));
            }
        }
    }
    out
}

/// Why `line` does not read back through the types: not a record at all, or an
/// event this version does not know ([`Event::Unknown`]).
fn unreadable(line: &str) -> Option<&'static str> {
    match Record::parse(line.as_bytes()) {
        None => Some("not a record (no seq, or a field of the envelope of the wrong type)"),
        Some(Record {
            event: Event::Unknown,
            ..
        }) => Some("reads back as an unknown event"),
        Some(_) => None,
    }
}

/// The lines of the log files under `dir` that do not read back through the
/// typed [`Record`], one message per line.
pub fn unreadable_lines(dir: &Path) -> Vec<String> {
    json_lines(dir)
        .into_iter()
        .filter_map(|(name, n, line, _)| {
            unreadable(&line).map(|why| format!("{name}:{n}: {why}\n{line}"))
        })
        .collect()
}

/// The schema violations and typed read-back failures in the log files under
/// `dir`, one message per bad line.
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
    for (name, n, line, value) in json_lines(dir) {
        let mut why = Vec::new();
        if let Err(e) = schemas.validate(&value, index) {
            why.push(format!("{e:#}"));
        }
        if let Some(e) = unreadable(&line) {
            why.push(e.to_string());
        }
        if !why.is_empty() {
            out.push(format!("{name}:{n}: {}\n{line}", why.join("; ")));
        }
    }
    out
}
