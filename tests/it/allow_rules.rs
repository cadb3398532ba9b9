//! The reported smuggling attacks on allow patterns through the real loop, with the shipped policy
//! (`allow run_bash(ls *)`, `deny run_bash(rm -rf *)`), no TTY and no `--yes`: a
//! command that smuggles another past an allow pattern is never run without
//! approval, every spelling of `rm -rf` is denied, and none of it panics.

use serde_json::{Value, json};

use crate::common::{TestRoot, stderr, stdout};
use crate::hostile_commands::one_turn;

#[test]
fn allow_patterns_cannot_be_talked_around() {
    let attacks = [
        "ls '$(id > pwned1.txt; echo x)'; ls ${_@P}",
        "ls 'a[$(rm -rf important)]'; ls ${x[_]}",
        "ls # '\nrm -rf d1\n# '",
        "ls <<<x\nrm -rf d2\nx",
        "exec -a ls rm -rf d3",
        "ls $'\\'' ; rm -rf d4 # '",
        "ls `touch pwned2.txt`",
        "ls \"`\"",
        // Reproduction 1: these panicked the old splitter (exit 101, no task_finished).
        "ls `",
        "echo \"`",
    ];
    let (root, results, decisions) = one_turn(
        |root| {
            let ws = root.workspace();
            for d in ["important", "d1", "d2", "d3", "d4"] {
                std::fs::create_dir_all(ws.join(d)).unwrap();
                std::fs::write(ws.join(d).join("keep"), "x").unwrap();
            }
        },
        &attacks,
    );
    assert_eq!(results.len(), attacks.len());
    for (i, d) in decisions.iter().enumerate() {
        assert_ne!(d["tier"], "allow", "{:?} was allowed: {d}", attacks[i]);
        assert_eq!(d["provable"], false, "{d}");
        assert!(
            d["not_provable"].as_str().is_some_and(|r| !r.is_empty()),
            "{d}"
        );
    }
    assert!(results.iter().all(|r| r["is_error"] == true), "{results:?}");
    let ws = root.workspace();
    for d in ["important", "d1", "d2", "d3", "d4"] {
        assert!(ws.join(d).join("keep").exists(), "{d} was deleted");
    }
    for f in ["pwned1.txt", "pwned2.txt"] {
        assert!(!ws.join(f).exists(), "{f} was created");
    }
}

#[test]
fn every_spelling_of_a_denied_command_is_denied() {
    let spellings = [
        "rm -fr d",
        "rm -r -f d",
        "/bin/rm -rf d",
        "sudo rm -rf d",
        "\\rm -rf d",
        "'rm' -rf d",
        "ls; env X=1 nice -n 5 rm -rf d",
        "ls $(timeout 5 rm -r -f d)",
    ];
    let (_root, results, decisions) = one_turn(|_| {}, &spellings);
    for (i, d) in decisions.iter().enumerate() {
        assert_eq!(d["tier"], "deny", "{:?}: {d}", spellings[i]);
        assert_eq!(d["rule"], "run_bash(rm -rf *)", "{d}");
    }
    assert!(
        results
            .iter()
            .all(|r| r["content"].as_str().unwrap().contains("denied by policy"))
    );
}

#[test]
fn a_provable_listing_is_allowed_and_recorded_with_its_commands() {
    let (_root, results, decisions) = one_turn(|_| {}, &["ls -a; ls 'scores.csv'"]);
    assert_eq!(decisions[0]["tier"], "allow", "{}", decisions[0]);
    assert_eq!(decisions[0]["provable"], true);
    assert_eq!(decisions[0]["commands"], json!(["ls -a", "ls scores.csv"]));
    assert_ne!(results[0]["is_error"], true, "{:?}", results[0]);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("exit_code: 0")
    );
}

#[test]
fn policy_test_reads_unbalanced_commands_without_panicking() {
    let root = TestRoot::new("http://127.0.0.1:9");
    for cmd in ["ls `", "echo \"`", "ls $(", "ls '", "ls ${", "(((", "ls <<"] {
        let out = root.run(&["policy", "test", "--json", "run_bash", cmd]);
        assert!(
            out.status.code().is_some_and(|c| c != 101),
            "{cmd:?}: {}",
            stderr(&out)
        );
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_ne!(v["tier"], "allow", "{cmd:?}");
        assert_eq!(v["provable"], false, "{cmd:?}");
    }
}
