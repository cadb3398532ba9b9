//! The audit log's hash chain, rotation and `audit verify` (docs/events.md), on logs
//! written by the real binary and then tampered with as an attacker would.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{FakeApi, Reply, TestRoot, stderr, stdout};

/// Every file of the root's log, oldest first (rotated by seq, then the live one),
/// found here independently of the daemon's own listing.
pub fn log_files(root: &TestRoot) -> Vec<PathBuf> {
    let dir = root.dir.join("transcripts");
    let mut rotated: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let range = name.strip_prefix("events-")?.strip_suffix(".jsonl")?;
            Some((range.split('-').next()?.parse().ok()?, e.path()))
        })
        .collect();
    rotated.sort();
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    files.push(dir.join("events.jsonl"));
    files
}

/// Every line of every file, in order, as raw text.
pub fn all_lines(root: &TestRoot) -> Vec<String> {
    log_files(root)
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The reference check, written here and not in the daemon: seq goes up by one and
/// each `prev` is the SHA-256 of the line before, from 64 zeros.
pub fn assert_chain(lines: &[String]) {
    let mut prev = "0".repeat(64);
    for (i, line) in lines.iter().enumerate() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["seq"], json!(i as u64 + 1), "seq of line {i}: {line}");
        assert_eq!(v["prev"], json!(prev), "prev of line {i}: {line}");
        prev = sha256_hex(line.as_bytes());
    }
}

/// A root whose log went through several rotations and a crash repair.
fn rotated_root() -> (FakeApi, TestRoot) {
    let mut script = Vec::new();
    for i in 0..4 {
        script.push(Reply::tool(
            &format!("t{i}"),
            "read_file",
            json!({"path": "scores.csv"}),
        ));
        script.push(Reply::text(&format!("answer {i}")));
    }
    let api = FakeApi::start(script);
    let root = TestRoot::new(&api.url);
    root.set_config("audit", "rotate_mb", "0.003");
    for i in 0..2 {
        assert_eq!(
            root.run(&["run", &format!("task {i}")]).status.code(),
            Some(0)
        );
    }
    // A crash mid-write: the next start moves the partial line aside.
    let live = root.dir.join("transcripts/events.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":999,\"ts\":\"20").unwrap();
    for i in 2..4 {
        assert_eq!(
            root.run(&["run", &format!("task {i}")]).status.code(),
            Some(0)
        );
    }
    (api, root)
}

#[test]
fn an_untouched_log_verifies_across_rotations_and_a_crash_repair() {
    let (_api, root) = rotated_root();
    let files = log_files(&root);
    assert!(files.len() >= 3, "expected rotations, got {files:?}");
    let lines = all_lines(&root);
    assert_chain(&lines);
    let kinds: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["type"].clone())
        .collect();
    assert!(kinds.contains(&json!("events_repaired")));
    assert!(kinds.contains(&json!("log_rotated")));
    // Each rotated file's name is its seq range, and the next file starts with the
    // line recording the rotation.
    for pair in files.windows(2) {
        let name = pair[0].file_name().unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&pair[0]).unwrap();
        let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(
            name,
            format!("events-{}-{}.jsonl", first["seq"], last["seq"])
        );
        let next = std::fs::read_to_string(&pair[1]).unwrap();
        let opener: Value = serde_json::from_str(next.lines().next().unwrap()).unwrap();
        assert_eq!(opener["type"], "log_rotated");
        assert_eq!(opener["file"], json!(name));
    }
    let out = root.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let head = sha256_hex(lines.last().unwrap().as_bytes());
    assert!(stdout(&out).contains(&head), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("{} lines", lines.len())),
        "{}",
        stdout(&out)
    );
}

/// The longest file of the log (the one tampered with) and its lines.
fn target(root: &TestRoot) -> (PathBuf, Vec<String>) {
    let file = log_files(root)
        .into_iter()
        .max_by_key(|f| std::fs::read_to_string(f).unwrap().lines().count())
        .unwrap();
    let lines = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (file, lines)
}

pub(crate) fn write_lines(file: &Path, lines: &[String]) {
    std::fs::write(file, lines.join("\n") + "\n").unwrap();
}

/// Runs `audit verify` and checks it exits 1 naming `file:line` and `what`.
fn assert_broken(root: &TestRoot, file: &Path, line: usize, what: &str) {
    let out = root.run(&["audit", "verify"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let at = format!("{}:{line}:", file.file_name().unwrap().to_str().unwrap());
    assert!(err.contains(&at), "expected {at} in {err}");
    assert!(err.contains(what), "expected {what:?} in {err}");
}

#[test]
fn each_tampering_makes_verify_name_the_line() {
    let (_api, root) = rotated_root();
    let (file, pristine) = target(&root);
    assert!(pristine.len() >= 6, "{pristine:?}");
    let mid = pristine.len() / 2;

    // One byte of a middle line, JSON still valid.
    let mut lines = pristine.clone();
    let at = lines[mid].find("\"ts\":\"").unwrap() + 6;
    let mut bytes = lines[mid].clone().into_bytes();
    bytes[at] = if bytes[at] == b'2' { b'3' } else { b'2' };
    lines[mid] = String::from_utf8(bytes).unwrap();
    write_lines(&file, &lines);
    assert_broken(&root, &file, mid + 1, "edited");

    // A deleted line: the one after it now stands at its place.
    let mut lines = pristine.clone();
    lines.remove(mid);
    write_lines(&file, &lines);
    assert_broken(&root, &file, mid + 1, "deleted");

    // Two lines swapped.
    let mut lines = pristine.clone();
    lines.swap(mid, mid + 1);
    write_lines(&file, &lines);
    assert_broken(&root, &file, mid + 1, "reordered");

    // The tail cut mid-line.
    write_lines(&file, &pristine);
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    assert_broken(&root, &file, pristine.len(), "truncated");

    // A forged line with the next seq, at the end of the live file.
    write_lines(&file, &pristine);
    let live = root.dir.join("transcripts/events.jsonl");
    let mut live_lines: Vec<String> = std::fs::read_to_string(&live)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let last: Value = serde_json::from_str(live_lines.last().unwrap()).unwrap();
    let forged = json!({"seq": last["seq"].as_u64().unwrap() + 1, "ts": last["ts"],
        "prev": last["prev"], "type": "task_cancelled", "by": "cli"});
    live_lines.push(forged.to_string());
    write_lines(&live, &live_lines);
    assert_broken(&root, &live, live_lines.len(), "foreign");

    // Put back, it verifies again: the checks above failed for the tampering only.
    live_lines.pop();
    write_lines(&live, &live_lines);
    let out = root.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_log_from_before_the_chain_is_accepted_and_says_where_the_chain_begins() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    let old = "{\"seq\":1,\"ts\":\"2026-01-01T00:00:00.000Z\",\"type\":\"daemon_stopping\",\"reason\":\"x\"}\n\
               {\"seq\":2,\"ts\":\"2026-01-01T00:00:00.000Z\",\"type\":\"daemon_stopping\",\"reason\":\"y\"}\n";
    std::fs::create_dir_all(root.dir.join("transcripts")).unwrap();
    std::fs::write(root.dir.join("transcripts/events.jsonl"), old).unwrap();
    assert_eq!(root.run(&["run", "go"]).status.code(), Some(0));
    let out = root.run(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("the first 2 lines were written without prev")
            && stdout(&out).contains("events.jsonl:3 (seq 3)"),
        "{}",
        stdout(&out)
    );
    let lines = all_lines(&root);
    let third: Value = serde_json::from_str(&lines[2]).unwrap();
    assert_eq!(third["prev"], json!(sha256_hex(lines[1].as_bytes())));
}

#[test]
fn the_daemon_logs_the_chain_head_at_start_and_stop() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    let mut d = crate::common::daemon::Daemon::start(&root);
    let id = d.submit("go");
    d.wait_finished(&id);
    assert!(d.terminate(), "the daemon exits 0 on SIGTERM");
    let diag = std::fs::read_to_string(&d.log).unwrap();
    let head = |when: &str| -> (u64, String) {
        let prefix = format!("harnessd: audit log chain head at {when}: seq ");
        let line = diag
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {when} head in {diag}"));
        let (seq, hash) = line.split_once(' ').unwrap();
        (seq.parse().unwrap(), hash.to_string())
    };
    let lines = all_lines(&root);
    // The stop head is the log's last line; the start head the line before the
    // first task line, each named by seq and hash.
    for (seq, hash) in [head("start"), head("stop")] {
        let line = &lines[seq as usize - 1];
        assert_eq!(sha256_hex(line.as_bytes()), hash, "seq {seq}");
    }
    assert_eq!(head("stop").0, lines.len() as u64);
    assert!(head("start").0 < head("stop").0);
}

/// The daemon's last diagnostic (the chain head at stop, logged as it exits)
/// reaches the `HARNESSD_LOG_DIR` file: the file writer's guard is dropped when
/// `main` returns, where `process::exit` would drop the lines still queued for it.
#[test]
fn the_last_log_line_reaches_the_log_dir_at_exit() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    let logs = root.dir.join("logs");
    let mut d = crate::common::daemon::Daemon::start_with_env(
        &root,
        &[("HARNESSD_LOG_DIR", logs.to_str().unwrap())],
    );
    let id = d.submit("go");
    d.wait_finished(&id);
    assert!(d.terminate(), "the daemon exits 0 on SIGTERM");
    let files: Vec<PathBuf> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.contains("harnessd: audit log chain head at stop: seq "),
        "the file ends before the stop head:\n{text}"
    );
    // The same line on stderr, bare, as before.
    let diag = std::fs::read_to_string(&d.log).unwrap();
    assert!(
        diag.lines()
            .any(|l| l.starts_with("harnessd: audit log chain head at stop: seq ")),
        "{diag}"
    );
}

#[test]
fn the_schema_check_rejects_a_stray_field_a_wrong_type_and_an_unknown_event() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "go"]).status.code(), Some(0));
    let good = all_lines(&root);
    let dir = root.dir.join("schema-check");
    std::fs::create_dir_all(&dir).unwrap();
    let mut stray: Value = serde_json::from_str(&good[2]).unwrap();
    stray["pad"] = json!(1);
    let mut wrong: Value = serde_json::from_str(&good[3]).unwrap();
    wrong["seq"] = json!("three");
    let mut unknown: Value = serde_json::from_str(&good[4]).unwrap();
    unknown["type"] = json!("tool_request");
    let text = format!("{}\n{stray}\n{wrong}\n{unknown}\n", good.join("\n"));
    std::fs::write(dir.join("events.jsonl"), text).unwrap();
    let bad = crate::common::schema::violations(&dir);
    assert_eq!(bad.len(), 3, "{bad:#?}");
    let n = good.len();
    for (i, v) in bad.iter().enumerate() {
        assert!(
            v.starts_with(&format!("events.jsonl:{}:", n + 1 + i)),
            "{v}"
        );
    }
}

/// Every line a run writes reads back through the typed `Record` (none is
/// `Unknown`), while a line of a type this version does not know, or without an
/// envelope, is reported: the check the whole suite runs on every root's log.
#[test]
fn every_line_reads_back_through_the_types_and_an_unknown_event_is_reported() {
    let api = FakeApi::start(vec![Reply::text("a")]);
    let root = TestRoot::new(&api.url);
    assert_eq!(root.run(&["run", "go"]).status.code(), Some(0));
    let good = all_lines(&root);
    assert!(
        crate::common::schema::unreadable_lines(&root.dir.join("transcripts")).is_empty(),
        "{good:#?}"
    );
    for line in &good {
        let record = harnessd::events::Record::parse(line.as_bytes()).expect(line);
        let value: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            Some(value["type"].as_str().unwrap()),
            record.kind(),
            "{line}"
        );
        assert_eq!(value["seq"], json!(record.seq));
    }
    let dir = root.dir.join("typed-check");
    std::fs::create_dir_all(&dir).unwrap();
    let mut later: Value = serde_json::from_str(&good[1]).unwrap();
    later["type"] = json!("hook_fired");
    let mut no_seq: Value = serde_json::from_str(&good[2]).unwrap();
    no_seq.as_object_mut().unwrap().remove("seq");
    let text = format!("{}\n{later}\n{no_seq}\n", good.join("\n"));
    std::fs::write(dir.join("events.jsonl"), text).unwrap();
    let bad = crate::common::schema::unreadable_lines(&dir);
    assert_eq!(bad.len(), 2, "{bad:#?}");
    assert!(bad[0].contains("unknown event"), "{}", bad[0]);
    assert!(bad[1].contains("not a record"), "{}", bad[1]);
}

/// A log rewritten whole with a recomputed chain, or cut at a line boundary,
/// verifies on its own; against the head logged to journald it does not.
#[test]
fn a_rewritten_or_cut_log_fails_against_the_logged_head() {
    let api = FakeApi::start(vec![Reply::text("one"), Reply::text("two")]);
    let root = TestRoot::new(&api.url);
    for prompt in ["first", "second"] {
        let out = root.run(&["run", prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let out = root.run(&["audit", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let head = format!(
        "{}:{}",
        report["head_seq"],
        report["head"].as_str().unwrap()
    );
    let verify_head = |root: &TestRoot| root.run(&["audit", "verify", "--head", &head]);
    assert_eq!(verify_head(&root).status.code(), Some(0), "{head}");
    let file = root.dir.join("transcripts/events.jsonl");
    let pristine: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();

    // Rewritten: one answer changed, every prev after it recomputed.
    let mut prev = "0".repeat(64);
    let mut forged = Vec::new();
    for line in &pristine {
        let mut v: Value = serde_json::from_str(line).unwrap();
        if v["type"] == "task_started" {
            v["source"] = json!("forged");
        }
        v["prev"] = json!(prev);
        let text = v.to_string();
        prev = sha256_hex(text.as_bytes());
        forged.push(text);
    }
    write_lines(&file, &forged);
    assert_chain(&forged);
    assert_eq!(root.run(&["audit", "verify"]).status.code(), Some(0));
    let out = verify_head(&root);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("rewritten"), "{}", stderr(&out));

    // Cut: the last two lines gone, the rest untouched.
    write_lines(&file, &pristine[..pristine.len() - 2]);
    assert_eq!(root.run(&["audit", "verify"]).status.code(), Some(0));
    let out = verify_head(&root);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));

    // A malformed head is a usage error.
    let out = root.run(&["audit", "verify", "--head", "12:nothex"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
