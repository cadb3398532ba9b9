//! The module layering of the library, checked on its source: every `crate::X`
//! path in `src/**/*.rs` (in `use` lines and inline, tests included) is an edge
//! from the file's top-level module to `X`. The test fails on
//!
//! - an import cycle between top-level modules, and
//! - an import against [`LAYERS`]: a module may import only modules of a lower
//!   layer, never one of its own layer or above,
//!
//! except for the edges listed in [`KNOWN_EXCEPTIONS`], each with the issue that
//! removes it. An exception that no longer occurs fails the test too, so the list
//! only shrinks.
//!
//! `src/main.rs` is the binary crate (its `crate::` is not the library's) and
//! `src/lib.rs` only declares modules; both are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common::{rust_files, src_dir};

/// The intended layering, lowest first. The product's data flow, config → scheduler →
/// agent loop → policy → exec → sandbox with events on the side, is how data
/// moves; imports run from the module that acts to the module it uses:
///
/// - `protocol` (the shared vocabulary: tool names, usage and prices, task status
///   and stop reason, tier, approval request, the audit log's closed sets, the
///   control API's bodies), `text`, `sandbox`, `disk` (free space): leaves. The sandbox helper is the
///   confined child side and depends on nothing of harnessd, least of all on
///   `config`: the parent hands it its own `Confinement`/`Limits` types.
/// - `policy`: compiles rule lists given as plain data and decides; no files.
/// - `config`: parses the two files into plain data and calls `policy` to compile
///   the rules (config → policy, never back).
/// - `events` (the audit log), `llm` (the model client), `exec` (spawns the
///   helper, converting settings into sandbox types), `approval`: each on its own;
///   `llm` reports failed attempts to its caller instead of writing events.
/// - `telemetry`: traces made from the audit log's records, over `events`.
/// - `tools`: the tool runner, over policy, exec and sandbox; `hooks`: operator
///   programs run confined at fixed points; `notify`: notification sinks, readers
///   of the audit log over config and events.
/// - `mcp`: MCP servers (their processes through `exec`, the SDK's client, the
///   pins), over `tools` for the result a call becomes.
/// - `agent` (the turn loop), `reload`: wire the layers below.
/// - `services`: the start/stop core `run` and `serve` share (audit log, executor
///   and probe, live config, reloader); `control`: the control API's messages and
///   its client, shared by the server (`daemon`) and the clients (`commands`);
///   `remember`: "always allow this call", over `tools` (which rules), `config`
///   (the file) and `reload` (the policy in force at once), for `serve` and `run`.
/// - `daemon` and `cli`: the service and the clap types.
/// - `cli_render`: completions and the man page, rendered from `cli`.
/// - `commands`: one module per subcommand, the top.
const LAYERS: &[&[&str]] = &[
    &["protocol", "text", "sandbox", "disk"],
    &["policy"],
    &["config", "knowledge"],
    &["events", "llm", "exec", "approval"],
    &["telemetry"],
    &["tools", "hooks", "notify"],
    &["mcp"],
    &["agent", "reload"],
    &["services", "control", "remember"],
    &["daemon", "cli"],
    &["cli_render"],
    &["commands"],
];

/// Edges that break the layering today, with the issue that removes each. None
/// today; the list stays so that a needed exception is named, not hidden.
const KNOWN_EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// The top-level module a file under `src/` belongs to; `None` for the crate
/// roots.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        name => Some(name.trim_end_matches(".rs").to_string()),
    }
}

/// `text` without comments (line, doc and block comments), so prose that
/// mentions `crate::x` is not an import.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut depth = 1;
                let mut prev = ' ';
                for n in chars.by_ref() {
                    match (prev, n) {
                        ('*', '/') => depth -= 1,
                        ('/', '*') => depth += 1,
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                    // A closing `*/` must not also open: reset after a match.
                    prev = if matches!((prev, n), ('*', '/') | ('/', '*')) {
                        ' '
                    } else {
                        n
                    };
                }
            }
            _ => out.push(c),
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The top-level modules named by `crate::` paths in `code`: `crate::x::…`,
/// `crate::x` and each first segment of `crate::{x::…, y}`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let start = from + at;
        from = start + "crate::".len();
        // `$crate::`, `my_crate::` are not this crate's root.
        if start > 0 && (is_ident(bytes[start - 1] as char) || bytes[start - 1] == b'$') {
            continue;
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            // First segments at depth 1 of the braced group.
            let mut depth = 1;
            let mut segment_start = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && c == ',' {
                    if !name.is_empty() {
                        found.insert(std::mem::take(&mut name));
                    }
                    segment_start = true;
                    continue;
                }
                if depth == 1 && segment_start {
                    if is_ident(c) {
                        name.push(c);
                        continue;
                    }
                    if !name.is_empty() {
                        found.insert(std::mem::take(&mut name));
                        segment_start = false;
                    }
                }
            }
            if !name.is_empty() {
                found.insert(name);
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// Edges between top-level modules: importer → imported → files that do it.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn import_graph() -> (BTreeSet<String>, Graph) {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut modules = BTreeSet::new();
    let mut graph = Graph::new();
    for file in files {
        let Some(module) = top_module(&src, &file) else {
            continue;
        };
        modules.insert(module.clone());
        let text = std::fs::read_to_string(&file).expect("read source");
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .display()
            .to_string();
        for target in crate_refs(&strip_comments(&text)) {
            if target != module {
                graph
                    .entry(module.clone())
                    .or_default()
                    .entry(target)
                    .or_default()
                    .insert(rel.clone());
            }
        }
    }
    (modules, graph)
}

/// A cycle in `edges`, as the modules along it, if there is one.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if !state.contains_key(node.as_str()) {
            let mut stack = Vec::new();
            if let Some(c) = visit(node, edges, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

fn is_exception(from: &str, to: &str) -> bool {
    KNOWN_EXCEPTIONS
        .iter()
        .any(|(f, t, _)| *f == from && *t == to)
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

#[test]
fn modules_import_only_down_the_layers_and_never_in_a_circle() {
    let (modules, graph) = import_graph();
    let mut problems = Vec::new();

    for module in &modules {
        if layer_of(module).is_none() {
            problems.push(format!(
                "module `{module}` is in no layer: add it to LAYERS in tests/it/architecture.rs"
            ));
        }
    }

    let mut kept: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in &graph {
        for (to, files) in targets {
            if is_exception(from, to) {
                continue;
            }
            kept.entry(from.clone()).or_default().insert(to.clone());
            if let (Some(a), Some(b)) = (layer_of(from), layer_of(to))
                && b >= a
            {
                problems.push(format!(
                    "`{from}` (layer {a}) imports `{to}` (layer {b}), which is not below it, in: {}",
                    files.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }

    if let Some(cycle) = find_cycle(&kept) {
        problems.push(format!("import cycle: {}", cycle.join(" → ")));
    }

    for (from, to, issue) in KNOWN_EXCEPTIONS {
        let present = graph.get(*from).is_some_and(|t| t.contains_key(*to));
        if !present {
            problems.push(format!(
                "known exception `{from}` → `{to}` ({issue}) no longer occurs: remove it from \
                 KNOWN_EXCEPTIONS"
            ));
        }
    }

    assert!(
        problems.is_empty(),
        "module layering violated:\n  {}",
        problems.join("\n  ")
    );
}

/// The modules every layer may speak, and which therefore must speak nothing of
/// the crate themselves: an import from one of them would drag its target under
/// every layer.
const VOCABULARY_LEAVES: &[&str] = &["protocol"];

/// The edges out of `leaf` in `graph`, as `leaf → target (files)` lines.
fn imports_of(graph: &Graph, leaf: &str) -> Vec<String> {
    graph
        .get(leaf)
        .into_iter()
        .flatten()
        .map(|(to, files)| {
            let files: Vec<_> = files.iter().cloned().collect();
            format!("`{leaf}` imports `{to}` in: {}", files.join(", "))
        })
        .collect()
}

#[test]
fn the_vocabulary_imports_nothing_of_the_crate() {
    let (modules, graph) = import_graph();
    let mut problems = Vec::new();
    for leaf in VOCABULARY_LEAVES {
        assert!(modules.contains(*leaf), "no module `{leaf}` under src/");
        problems.extend(imports_of(&graph, leaf));
    }
    assert!(
        problems.is_empty(),
        "the vocabulary must be a leaf:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn an_import_out_of_the_vocabulary_is_found() {
    let mut graph = Graph::new();
    graph
        .entry("protocol".into())
        .or_default()
        .entry("agent".into())
        .or_default()
        .insert("protocol/control.rs".into());
    let found = imports_of(&graph, "protocol");
    assert_eq!(
        found,
        ["`protocol` imports `agent` in: protocol/control.rs"],
        "{found:?}"
    );
    assert!(imports_of(&Graph::new(), "protocol").is_empty());
}

#[test]
fn the_scanner_sees_every_form_of_crate_path() {
    let code = strip_comments(
        "use crate::config::{A, B};\n\
         use crate::{events::Event, llm, policy::{self, Tier}};\n\
         let x = crate::text::escape(s);\n\
         // use crate::daemon;\n\
         /* crate::commands::x */\n\
         let s = \"// not a comment\"; let m = $crate::sandbox::x; my_crate::exec::y();\n",
    );
    let refs: Vec<String> = crate_refs(&code).into_iter().collect();
    assert_eq!(refs, ["config", "events", "llm", "policy", "text"]);
}

#[test]
fn a_cycle_is_found() {
    let edges: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(f, t)| (f.to_string(), BTreeSet::from([t.to_string()])))
        .collect();
    let cycle = find_cycle(&edges).expect("a cycle");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
    let mut acyclic = edges.clone();
    acyclic.remove("c");
    assert_eq!(find_cycle(&acyclic), None);
}

/// Processes are spawned in `exec` (and exec'd by the sandbox helper) alone: a
/// program started anywhere else would run unconfined.
#[test]
fn only_exec_and_the_sandbox_helper_start_processes() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let spawners: Vec<String> = files
        .iter()
        .filter(|f| {
            !f.starts_with(src_dir().join("exec")) && !f.starts_with(src_dir().join("sandbox"))
        })
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            [
                "process::Command",
                "Command::new",
                "posix_spawn",
                "nix::unistd::fork",
            ]
            .iter()
            .any(|needle| text.contains(needle))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        spawners.is_empty(),
        "processes started outside exec: {spawners:?}"
    );
}
