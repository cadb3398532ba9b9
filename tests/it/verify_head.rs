//! `audit verify --head SEQ:HASH` finds the head's own line: a log rewritten whole
//! with a fresh chain and its seqs moved past the head's verifies on its own but
//! fails against the logged head.

use crate::audit::{sha256_hex, write_lines};
use crate::common::{FakeApi, Reply, TestRoot, stderr};

/// `audit verify --head SEQ:HASH` compared the hash only if a line with that seq
/// was met, and otherwise checked only that the log did not end before it. A log
/// rewritten whole with its seqs moved past the head's (a fresh chain from the
/// genesis hash, so it verifies on its own) never holds that seq, and passed
/// against the real head. The head's line must now be found.
#[test]
fn a_rewritten_log_that_skips_the_heads_seq_fails_against_the_head() {
    let api = FakeApi::start(vec![Reply::text("one")]);
    let root = TestRoot::new(&api.url);
    let out = root.run(&["run", "first"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = root.run(&["audit", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let head_seq = report["head_seq"].as_u64().unwrap();
    let head = format!("{head_seq}:{}", report["head"].as_str().unwrap());
    let file = root.dir.join("transcripts/events.jsonl");
    let pristine = std::fs::read_to_string(&file).unwrap();
    let mut prev = "0".repeat(64);
    let mut forged = Vec::new();
    for line in pristine.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["seq"] = (v["seq"].as_u64().unwrap() + head_seq).into();
        v["prev"] = prev.clone().into();
        let text = v.to_string();
        prev = sha256_hex(text.as_bytes());
        forged.push(text);
    }
    write_lines(&file, &forged);
    assert_eq!(root.run(&["audit", "verify"]).status.code(), Some(0));
    let out = root.run(&["audit", "verify", "--head", &head]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("seq {head_seq}")),
        "{}",
        stderr(&out)
    );
    // The head an empty log has (logged before its first line) has no line to find.
    let genesis = format!("0:{}", "0".repeat(64));
    let out = root.run(&["audit", "verify", "--head", &genesis]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
