//! Fixtures: a temporary root wired to a fake API, and a runner for the real binary.

pub mod blessed;
pub mod console;
pub mod daemon;
pub mod mcp;
pub mod sandbox;
pub mod schema;

pub use harnessd_testkit::{fake_api, rss};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub use fake_api::{FakeApi, Reply};

/// The key every test passes; it must never show up in any record.
pub const SECRET_KEY: &str = "sk-ant-test-9f8e7d6c5b4a-DO-NOT-LEAK";

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_harnessd")
}

/// A new empty directory under the system's temporary directory, named `prefix`
/// and a random part, readable by every uid (the tools' users walk through it to
/// the workspace). Kept: a [`TestRoot`] removes its own on drop.
pub fn fresh_dir(prefix: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o755))
        .tempdir()
        .unwrap()
        .keep()
}

/// A root in a fresh temporary directory, removed on drop.
pub struct TestRoot {
    pub dir: PathBuf,
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        // Every line the test made harnessd write matches the shipped schema.
        let bad = schema::violations(&self.dir.join("transcripts"));
        // The host-wide registry entries of "auto" uids go with the root (this
        // one's, and those of roots a test made inside it); a later start would
        // take a stale entry over anyway.
        let me = self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone());
        for entry in std::fs::read_dir("/var/lib/harnessd/uids")
            .into_iter()
            .flatten()
            .flatten()
        {
            let named = std::fs::read_to_string(entry.path()).unwrap_or_default();
            if Path::new(named.trim_end()).starts_with(&me) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if !bad.is_empty() && !std::thread::panicking() {
            panic!(
                "events that break docs/events.schema.json:\n{}",
                bad.join("\n")
            );
        }
    }
}

impl TestRoot {
    /// `harnessd init` into a new directory, with config pointed at `api_url`.
    pub fn new(api_url: &str) -> TestRoot {
        let dir = fresh_dir("harnessd-it-");
        let out = Command::new(bin()).arg("init").arg(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let root = TestRoot { dir };
        root.set_config("api", "base_url", &format!("{api_url:?}"));
        root.set_config("api", "max_retries", "1");
        root
    }

    /// Sets `key = value` (a TOML literal) in `[section]` of config.toml, which may
    /// be dotted (`pricing."fake-model"`), keeping the rest of the file as it is.
    pub fn set_config(&self, section: &str, key: &str, value: &str) {
        let path = self.dir.join("config/config.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut doc: toml_edit::DocumentMut = text.parse().unwrap();
        let mut table = doc.as_table_mut();
        for part in toml_edit::Key::parse(section).unwrap() {
            let item = table.entry(part.get()).or_insert_with(|| {
                let mut t = toml_edit::Table::new();
                t.set_implicit(true);
                toml_edit::Item::Table(t)
            });
            table = item.as_table_mut().unwrap();
        }
        let value: toml_edit::Value = value.parse().unwrap();
        table.set_implicit(false);
        table.insert(key, toml_edit::Item::Value(value));
        std::fs::write(&path, doc.to_string()).unwrap();
    }

    /// Edits settings.json through a closure on its JSON value.
    pub fn edit_settings(&self, f: impl FnOnce(&mut Value)) {
        let path = self.dir.join("policies/settings.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    }

    /// The uid `sandbox.user = "auto"` gave this root, once a root daemon (or
    /// `check`) has chosen it: what its tools run as.
    pub fn kept_tool_uid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.dir.join("config/sandbox-uid")).ok()?;
        text.trim().parse().ok()
    }

    /// [`TestRoot::kept_tool_uid`], which must have been chosen by now.
    pub fn tool_uid(&self) -> u32 {
        self.kept_tool_uid()
            .expect("config/sandbox-uid is written when a root daemon loads the root")
    }

    pub fn workspace(&self) -> PathBuf {
        self.dir.join("workspace")
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.arg("--root").arg(&self.dir).args(args);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("ANTHROPIC_API_KEY", SECRET_KEY)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `harnessd --root <dir> ARGS` to the end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Every line of events.jsonl, parsed (panics on a line that does not parse).
    pub fn events(&self) -> Vec<Value> {
        let text =
            std::fs::read_to_string(self.dir.join("transcripts/events.jsonl")).unwrap_or_default();
        // A line still being written (no newline yet) is not read: a test may read
        // while a daemon appends.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l:?}: {e}"))
            })
            .collect()
    }

    pub fn events_of(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect()
    }

    /// The one transcript of the root.
    pub fn transcript(&self) -> Value {
        let dir = self.dir.join("transcripts");
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        assert_eq!(files.len(), 1, "expected one transcript, found {files:?}");
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap()
    }

    /// Every file under the root's transcripts dir, as text, with its path.
    pub fn all_records(&self) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        walk(&self.dir.join("transcripts"), &mut out);
        out
    }
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push((
                p.clone(),
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned(),
            ));
        }
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The tool_result blocks of a request's last message.
pub fn last_results(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .map(|c| {
            c.iter()
                .filter(|b| b["type"] == "tool_result")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `f` every 10 ms until it holds; fails the test after 20 s, naming `what`.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The events of a task that makes one tool call and then answers, in order.
pub const ONE_TOOL_TASK: [&str; 9] = [
    "task_started",
    "model_request",
    "model_response",
    "tool_requested",
    "policy_decision",
    "tool_finished",
    "model_request",
    "model_response",
    "task_finished",
];

/// `src/` of this package, for the tests that read the source (layering, lengths).
pub fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, recursively.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Gives `dir` and everything below it to `uid` (links themselves, never followed).
pub fn chown_tree(dir: &Path, uid: u32) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(uid), Some(uid)).unwrap();
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
}
