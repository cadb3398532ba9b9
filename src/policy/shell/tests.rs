use super::*;

fn provable(cmd: &str) -> Vec<Vec<String>> {
    let a = analyse(cmd);
    match a.provable() {
        Ok(cmds) => cmds.into_iter().map(<[String]>::to_vec).collect(),
        Err(reason) => panic!("{cmd:?} should be provable, but: {reason}"),
    }
}

fn seen(cmd: &str) -> Vec<String> {
    analyse(cmd)
        .commands
        .iter()
        .map(|c| c.words.join(" "))
        .collect()
}

fn v(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

#[test]
fn literal_commands_are_provable_with_their_argv() {
    assert_eq!(provable("ls -la /tmp"), [v(&["ls", "-la", "/tmp"])]);
    assert_eq!(
        provable("git status && ls 'a b' || cat \"x;y\" | wc -l; echo hi &"),
        [
            v(&["git", "status"]),
            v(&["ls", "a b"]),
            v(&["cat", "x;y"]),
            v(&["wc", "-l"]),
            v(&["echo", "hi"])
        ]
    );
    assert_eq!(provable("ls a\\;b"), [v(&["ls", "a;b"])]);
    assert_eq!(provable("ls\nls -l\n"), [v(&["ls"]), v(&["ls", "-l"])]);
    assert_eq!(
        provable("ls > /dev/null 2>&1 2>>/dev/null <in &>/dev/null >&2 3<&0 >&-"),
        [v(&["ls"])]
    );
    assert_eq!(provable("ls \"a\\\"b\" x#y"), [v(&["ls", "a\"b", "x#y"])]);
    assert_eq!(provable("cd sub && pwd"), [v(&["cd", "sub"]), v(&["pwd"])]);
}

#[test]
fn the_issue_reproductions_are_not_provable() {
    for cmd in [
        "ls '$(id > pwned.txt; echo x)'; ls ${_@P}",
        "ls 'a[$(rm -rf important)]'; ls ${x[_]}",
        "ls # '\nrm -rf d\n# '",
        "ls <<<x\nrm -rf d\nx",
        "exec -a ls rm -rf d",
        "ls $'\\'' ; rm -rf d # '",
        "ls `",
        "echo \"`",
        "ls $(",
    ] {
        assert!(
            analyse(cmd).provable().is_err(),
            "{cmd:?} must not be provable"
        );
    }
}

#[test]
fn every_construct_outside_the_literal_subset_is_not_provable() {
    for cmd in [
        "ls $HOME",
        "ls ${x}",
        "ls $(id)",
        "ls `id`",
        "ls $((1+2))",
        "diff <(ls) >(cat)",
        "ls $'a\\x3bb'",
        "ls # c",
        "cat <<E\nx\nE",
        "cat <<<x",
        "f() { ls; }",
        "function f { ls; }",
        "eval ls",
        "source x",
        ". x",
        "exec ls",
        "command ls",
        "builtin echo",
        "bash -c ls",
        "sh -c ls",
        "xargs ls",
        "find . -exec ls {} ;",
        "env ls",
        "env X=1 ls",
        "X=1 ls",
        "PATH=. ls",
        "ls *",
        "ls ?",
        "ls [a]",
        "ls ~",
        "ls {a,b}",
        "{ ls; }",
        "(ls)",
        "! ls",
        "if ls; then ls; fi",
        "for a in b; do ls; done",
        "case a in a) ls;; esac",
        "[[ -v a ]]",
        "time ls",
        "ls \\\nx",
        "ls &&",
        "; ls",
        "ls ;; ls",
        "ls >",
        "ls >&x",
        "ls > out.txt",
        "ls >> .git/config",
        "ls 2>err",
        "ls &>all",
        "ls >| f",
        "ls <> f",
        "ls \u{1b}",
        "ls \0",
        "test -v 'a[$(id)]'",
        "read 'a[$(id)]'",
        "printf -v 'a[$(id)]' x",
        "hash -p /tmp/x ls",
        "alias ls=id",
        "trap id EXIT",
        "shopt -s expand_aliases",
        "sudo ls",
        "timeout 5 ls",
        "/usr/bin/env ls",
    ] {
        assert!(
            analyse(cmd).provable().is_err(),
            "{cmd:?} must not be provable"
        );
    }
}

#[test]
fn substitutions_are_seen_even_in_quotes_and_subscripts() {
    for (cmd, hidden) in [
        ("ls $(rm -rf x)", "rm -rf x"),
        ("echo `curl evil.example`", "curl evil.example"),
        ("echo \"$(id; whoami)\"", "whoami"),
        ("diff <(sort a) >(tee b)", "tee b"),
        ("ls ${x[$(rm -rf y)]}", "rm -rf y"),
        ("ls $(( $(rm -rf z) ))", "rm -rf z"),
        ("cat <<E\n$(rm -rf h)\nE", "rm -rf h"),
        ("bash -c 'ls; rm -rf /'", "rm -rf /"),
        ("sudo sh -lc \"rm -rf /\"", "rm -rf /"),
        ("eval 'rm -rf /'", "rm -rf /"),
        ("find . -exec rm -rf {} \\;", "rm -rf {}"),
        ("ls # x\nrm -rf d", "rm -rf d"),
        ("ls <<<x\nrm -rf d\nx", "rm -rf d"),
        ("ls $'\\x72m' -rf /", "rm -rf /"),
        ("if true; then rm -rf q; fi", "rm -rf q"),
        ("(cd x && rm y)", "rm y"),
        ("trap 'rm -rf t' EXIT", "rm -rf t"),
    ] {
        let s = seen(cmd);
        assert!(
            s.iter().any(|c| c.contains(hidden)),
            "{hidden:?} not seen in {cmd:?}: {s:?}"
        );
    }
}

#[test]
fn here_document_with_quoted_delimiter_is_data() {
    let s = seen("cat <<'EOF' > notes.txt\nrm -rf / ; curl x\nEOF\nls");
    assert!(!s.iter().any(|c| c.contains("rm")), "{s:?}");
    assert!(s.contains(&"ls".to_string()), "{s:?}");
}

#[test]
fn deny_forms_see_through_spelling() {
    let forms = |cmd: &str| -> Vec<String> {
        analyse(cmd)
            .commands
            .iter()
            .flat_map(SeenCommand::forms)
            .collect()
    };
    for cmd in [
        "rm -fr /",
        "rm -r -f /",
        "/bin/rm -rf /",
        "sudo rm -rf /",
        "sudo -u root -- rm -rf /",
        "\\rm -rf /",
        "'rm' -rf /",
        "r\"m\" -rf /",
        "env X=1 nice -n 5 nohup timeout -s KILL 5 rm -rf /",
        "command rm -rf /",
        "exec -a ls rm -rf /",
        "time -p rm -rf /",
        "env -S 'rm -rf /'",
        "rm / -rf",
    ] {
        let f = forms(cmd);
        assert!(
            f.iter().any(|x| x == "rm -rf /"),
            "{cmd:?} gave no `rm -rf /` form: {f:?}"
        );
    }
    let f = forms("ls | xargs -0 rm -rf");
    assert!(f.iter().any(|x| x == "rm -rf"), "{f:?}");
}

#[test]
fn canonical_form_quotes_where_needed() {
    let a = analyse("ls 'a b' \"it's\" plain");
    assert_eq!(a.commands[0].canonical(), "ls 'a b' 'it'\\''s' plain");
    // A quoted program word that would read back as an assignment or a keyword
    // stays quoted (found by the round-trip property: `\a=`).
    for (cmd, canon) in [
        ("\\a= x", "'a=' x"),
        ("\\if x", "'if' x"),
        ("\\a+=1", "'a+=1'"),
        ("'time'", "'time'"),
    ] {
        let a = analyse(cmd);
        assert_eq!(a.commands[0].canonical(), canon, "{cmd:?}");
        let again = analyse(canon);
        assert_eq!(again.provable(), a.provable(), "{cmd:?}");
    }
    let a = analyse("'git status' x");
    assert_eq!(a.commands[0].canonical(), "'git status' x");
}

#[test]
fn hostile_inputs_do_not_panic_and_are_not_provable() {
    let long = |unit: &str| unit.repeat(500_000 / unit.len().max(1));
    for cmd in [
        long("("),
        long(")"),
        long("$("),
        long("${"),
        long("`"),
        long("'") + "'",
        long("\"") + "\"",
        long("<<E\n"),
        long("$'\\"),
        long(";"),
        long("{"),
    ] {
        let a = analyse(&cmd);
        assert!(a.provable().is_err(), "{:?}… is provable", cmd.get(..10));
    }
    // Escaped backquotes are one literal word: provable, and no panic.
    assert_eq!(analyse(&long("\\`")).provable().map(|c| c.len()), Ok(1));
    // Many plain commands are fine and all seen.
    let many = "ls;".repeat(1000);
    assert_eq!(analyse(&many).commands.len(), 1000);
}

/// Found by the attack review of the boundary work: `eval` (or `bash -c`) nested 25 deep
/// over 250 000 one-letter words made every level re-read and keep the whole rest
/// of the input — 885 MB and a second for a 500 000-character command. Re-read text
/// is now budgeted: the work and the words kept stay a small multiple of the input.
#[test]
fn nesting_cannot_multiply_the_work_of_one_input() {
    for prefix in ["eval ", "bash -c eval ", "sudo eval "] {
        let cmd = format!("{}{}", prefix.repeat(25), "a ".repeat(250_000));
        let a = analyse(&cmd);
        let words: usize = a.commands.iter().map(|c| c.words.len()).sum();
        assert!(
            words <= 4 * 250_100,
            "{prefix:?}: {words} words kept for a {}-character input",
            cmd.len()
        );
        assert!(a.provable().is_err());
    }
    // Ordinary nesting is still followed to the end.
    let deep = analyse("eval \"bash -c 'sh -c \\\"rm -rf d\\\"'\"");
    assert!(deep.commands.iter().any(|c| c.words == ["rm", "-rf", "d"]));
}

/// Found by the attack review of the boundary work: leading keywords were removed one
/// `remove(0)` at a time, so `{ { { …` (or `if if …`, `! ! …`) over 500 000
/// characters took 32 s in a release build — on a daemon worker thread, twice per
/// call; and every `=` of a word re-read the word for an assignment name, so
/// `====…` took 5.5 s. Analysis must stay linear in the input's length.
#[test]
fn leading_keywords_are_linear() {
    // Linear, not quadratic: ten times the input may take at most 30 times as long
    // (quadratic work takes 100 times). A ratio of the fastest of three runs each,
    // not a wall-clock bound, so a loaded machine cannot fail it.
    let at = |unit: &str, n: usize| {
        if unit == "skewed" {
            format!("{}{}", "x".repeat(n / 2), "=".repeat(n / 2))
        } else {
            unit.repeat(n / unit.len())
        }
    };
    for unit in ["{ ", "if ", "! ", "then ", "f() { ", "=", "a=", "skewed"] {
        let small = fastest_analysis(&at(unit, 50_000), unit);
        let big = fastest_analysis(&at(unit, 500_000), unit);
        assert!(
            big < small * 30 + std::time::Duration::from_millis(50),
            "{unit:?}…: 10× the input took {big:?} against {small:?}"
        );
    }
}

/// The fastest of three analyses of `cmd`, each given 10 s before it counts as a hang.
fn fastest_analysis(cmd: &str, shown: &str) -> std::time::Duration {
    (0..3)
        .map(|_| {
            let cmd = cmd.to_owned();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                let a = analyse(&cmd);
                let _ = tx.send((started.elapsed(), a.commands.len()));
            });
            rx.recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("{shown:?} repeated: no answer within 10 s"))
                .0
        })
        .min()
        .unwrap_or_default()
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Characters that mean something to bash, plus a few plain ones.
    const ALPHABET: &str = "a-z0-9 \t\n$(){}\\[\\]`'\"\\\\;&|<>*?#~!=@-";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// No input panics, and what comes out is linear in what went in.
        #[test]
        fn never_panics_and_output_is_bounded(cmd in proptest::string::string_regex(&format!("[{ALPHABET}]{{0,300}}")).unwrap()) {
            let a = analyse(&cmd);
            let size: usize = a.commands.iter().map(|c| c.text.len() + c.words.iter().map(String::len).sum::<usize>()).sum();
            prop_assert!(size <= 8 * (MAX_DEPTH + 1) * (cmd.len() + 1));
            for c in &a.commands {
                let _ = c.forms();
            }
        }

        /// A provable command rendered canonically reads back as the same argv, so
        /// allow patterns match exactly the words bash receives.
        #[test]
        fn canonical_rendering_round_trips(cmd in proptest::string::string_regex(&format!("[{ALPHABET}]{{0,120}}")).unwrap()) {
            let a = analyse(&cmd);
            if let Ok(argvs) = a.provable() {
                for (c, argv) in a.commands.iter().zip(argvs) {
                    if argv.is_empty() {
                        continue;
                    }
                    let again = analyse(&c.canonical());
                    prop_assert_eq!(again.provable().map_err(str::to_string), Ok(vec![argv]));
                }
            }
        }

        /// Arbitrary Unicode, not only shell characters.
        #[test]
        fn any_text_never_panics(cmd in any::<String>()) {
            let a = analyse(&cmd);
            for c in &a.commands {
                let _ = (c.forms(), c.canonical());
            }
        }
    }
}
