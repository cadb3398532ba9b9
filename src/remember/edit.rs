//! Adding allow rules to settings.json in place, the one place that edits the
//! file.
//!
//! The edit keeps the file as the operator wrote it (comments aside, which JSON
//! does not have: layout, key order, every other value) and only appends to
//! `tools.allow` (or, for a command tool's pattern, `tools.allow_write`). It is validated before anything is written: the new text must
//! parse as settings and pass the caller's check (that the call now decides
//! `allow`). It is written atomically (a temporary file in the same directory,
//! synced, renamed over the old one, the directory synced), keeping the file's
//! owner and mode. An edit an operator saves meanwhile is not lost: the file is
//! read again just before the rename and, if it changed, the whole edit is redone
//! on the new text.

use std::path::{Path, PathBuf};

use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstRootNode};

use crate::config::{CompiledSettings, ConfigError, Settings, SettingsContext};

/// How often a concurrent edit may force the edit to start again before giving up.
const ATTEMPTS: usize = 5;

/// Held for the whole of one edit (see [`add_allow_rules`]).
static EDITING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Why rules could not be added.
#[derive(Debug, thiserror::Error)]
pub enum RememberError {
    /// The file could not be read or written.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done: `read`, `write`, `rename`…
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file in place does not parse as settings (it is being edited, or
    /// broken); nothing is written over it.
    #[error("the settings file is not valid now, so nothing was added to it: {0}")]
    Invalid(ConfigError),
    /// The file's top level or its `tools` is not an object.
    #[error("{file}: no `tools` object to add an allow rule to")]
    NoTools {
        /// The settings file, as named in errors.
        file: String,
    },
    /// The edited text would not validate, or the caller's check refused it.
    #[error("the rule was not added: {0}")]
    Refused(String),
    /// The file kept changing under the edit.
    #[error("{} kept changing while the rule was being added; try again", path.display())]
    Contended {
        /// The file.
        path: PathBuf,
    },
}

fn io<'p>(op: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> RememberError + 'p {
    move |source| RememberError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Appends each of `rules` not already in `tools.allow` to the settings file at
/// `path` (named `file` in errors). `check` sees the settings as they would be and
/// may refuse them; nothing is written unless it accepts. Returns the rules added.
pub fn add_allow_rules(
    path: &Path,
    file: &str,
    rules: &[String],
    check: impl Fn(&CompiledSettings) -> Result<(), String>,
) -> Result<Vec<String>, RememberError> {
    add_allow_rules_in(path, file, rules, SettingsContext::default(), check)
}

/// [`add_allow_rules`] for the settings file of a root: the file, before and
/// after the edit, is validated with `context` (the root's pins and API key
/// variable), as loading the root validates it.
pub fn add_allow_rules_in(
    path: &Path,
    file: &str,
    rules: &[String],
    context: SettingsContext<'_>,
    check: impl Fn(&CompiledSettings) -> Result<(), String>,
) -> Result<Vec<String>, RememberError> {
    // A settings file that is a link is edited where it lives: renaming over the
    // link would replace it with a copy, and the operator's later edits of the
    // real file would silently stop applying.
    let real = std::fs::canonicalize(path).map_err(io("resolve", path))?;
    let path = real.as_path();
    // Remembers in one process run one at a time: the look before the rename
    // cannot see another remember's rename landing just after it, so two at once
    // lost one's rule while both reported it added. An operator's editor is
    // still caught by that look.
    let _one_at_a_time = EDITING.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..ATTEMPTS {
        let before = std::fs::read(path).map_err(io("read", path))?;
        // Not lossy: the loader refuses a file that is not UTF-8, and writing it
        // back with U+FFFD would change the operator's bytes and make it load.
        let text = String::from_utf8(before.clone()).map_err(|e| {
            RememberError::Invalid(ConfigError::invalid(
                file,
                None,
                "",
                format!("the file is not UTF-8 ({e})"),
            ))
        })?;
        let current = Settings::parse_in(&text, file, context).map_err(RememberError::Invalid)?;
        let tools = &current.settings.tools;
        let added: Vec<String> = rules
            .iter()
            .filter(|r| {
                let list = match list_for(r) {
                    "allow_write" => &tools.allow_write,
                    _ => &tools.allow,
                };
                !list.contains(r)
            })
            .cloned()
            .collect();
        let edited = if added.is_empty() {
            text.clone()
        } else {
            append_allow(&text, file, &added)?
        };
        let candidate = Settings::parse_in(&edited, file, context)
            .map_err(|e| RememberError::Refused(format!("the edited file would not load: {e}")))?;
        check(&candidate).map_err(RememberError::Refused)?;
        if added.is_empty() {
            return Ok(added);
        }
        if replace_if_unchanged(path, &before, edited.as_bytes())? {
            return Ok(added);
        }
    }
    Err(RememberError::Contended {
        path: path.to_path_buf(),
    })
}

/// Puts `previous` back in place of the settings file at `path` if it still
/// holds `written` (an edit saved since is kept); whether it did. For a remember
/// whose record failed: the rule must not stay in force unrecorded.
pub fn restore_settings(
    path: &Path,
    written: &[u8],
    previous: &[u8],
) -> Result<bool, RememberError> {
    let real = std::fs::canonicalize(path).map_err(io("resolve", path))?;
    let _one_at_a_time = EDITING.lock().unwrap_or_else(|e| e.into_inner());
    replace_if_unchanged(&real, written, previous)
}

/// The list a remembered rule goes to: a pattern rule of `run_bash` or
/// `run_python` to `allow_write`, since what the human approved ran with writes
/// and an `allow` pattern would run it read-only (docs/policy.md); any other to `allow`.
fn list_for(rule: &str) -> &'static str {
    match crate::policy::Rule::parse(rule) {
        Ok(r) if r.tool.runs_commands() && !r.is_whole_tool() => "allow_write",
        _ => "allow",
    }
}

/// `text` with each of `rules` appended to its list, `tools.allow` or
/// `tools.allow_write` (created when absent), the rest of the text untouched.
fn append_allow(text: &str, file: &str, rules: &[String]) -> Result<String, RememberError> {
    let no_tools = || RememberError::NoTools {
        file: file.to_string(),
    };
    let root = CstRootNode::parse(text, &ParseOptions::default())
        .map_err(|e| RememberError::Refused(format!("{file}: {e}")))?;
    let tools = root
        .object_value()
        .and_then(|o| o.object_value_or_create("tools"))
        .ok_or_else(no_tools)?;
    for rule in rules {
        let name = list_for(rule);
        let list = tools
            .array_value_or_create(name)
            .ok_or_else(|| RememberError::Refused(format!("{file}: tools.{name} is not a list")))?;
        list.append(CstInputValue::String(rule.clone()));
    }
    Ok(root.to_string())
}

/// Writes `new` to a temporary file beside `path` and renames it over `path`,
/// unless `path` no longer holds `old` (then `false`, nothing changed). The
/// temporary file gets the old file's mode and, when we may, its owner.
fn replace_if_unchanged(path: &Path, old: &[u8], new: &[u8]) -> Result<bool, RememberError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = crate::config::replace::temp_beside(path, "remember");
    let meta = std::fs::metadata(path).map_err(io("stat", path))?;
    let written = write_temp(&tmp, new, &meta);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // The last look before the rename: an edit saved since we read is kept, and
    // this edit is redone on top of it.
    let now = std::fs::read(path).map_err(io("read", path))?;
    if now != old {
        let _ = std::fs::remove_file(&tmp);
        return Ok(false);
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        RememberError::Io {
            op: "rename over",
            path: path.to_path_buf(),
            source: e,
        }
    })?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync the directory of", path))?;
    Ok(true)
}

/// Creates `tmp` exclusively with `bytes`, the mode and owner of `like`, synced.
/// Writes the replacement with the old file's mode (set-id bits too: the file is
/// the operator's, kept as it was) and, when we may, its owner.
fn write_temp(tmp: &Path, bytes: &[u8], like: &std::fs::Metadata) -> Result<(), RememberError> {
    use std::os::unix::fs::MetadataExt;
    let owner = Some((like.uid(), like.gid()));
    crate::config::replace::write_new(tmp, bytes, like.mode() & 0o7777, owner)
        .map_err(io("write", tmp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(text: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "harnessd-remember-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("settings.json");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn a_command_tools_rule_goes_to_allow_write() {
        let (dir, path) = scratch(&crate::config::defaults::default_settings());
        let rule = "run_bash(sort -o out f)".to_string();
        add_allow_rules(&path, "settings.json", std::slice::from_ref(&rule), |_| {
            Ok(())
        })
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = Settings::parse(&text, "settings.json").unwrap();
        assert_eq!(parsed.settings.tools.allow_write, vec![rule.clone()]);
        assert!(!parsed.settings.tools.allow.contains(&rule));
        // Already there: nothing added.
        let again = add_allow_rules(&path, "settings.json", &[rule], |_| Ok(())).unwrap();
        assert!(again.is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_rule_is_appended_and_everything_else_is_kept_as_written() {
        let shipped = crate::config::defaults::default_settings();
        let (dir, path) = scratch(&shipped);
        // A file-tool rule goes to `allow` (a command tool's to `allow_write`).
        let rule = "write_file(workspace/\"hi\"\n\\[x])".to_string();
        let added = add_allow_rules(&path, "settings.json", std::slice::from_ref(&rule), |_| {
            Ok(())
        })
        .unwrap();
        assert_eq!(added, vec![rule.clone()]);
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = Settings::parse(&text, "settings.json").unwrap();
        assert_eq!(parsed.settings.tools.allow.last(), Some(&rule));
        // Only the allow list changed: its last entry gained a comma, and the new
        // rule's line follows it; every other line is as written.
        let mut lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("write_file(workspace/"))
            .unwrap();
        lines.remove(at);
        let changed: Vec<(&str, &str)> = shipped
            .lines()
            .zip(lines.iter().copied())
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(shipped.lines().count(), lines.len());
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert_eq!(format!("{},", changed[0].0), changed[0].1);
        // A second time adds nothing.
        let again = add_allow_rules(&path, "settings.json", &[rule], |_| Ok(())).unwrap();
        assert!(again.is_empty());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_refused_check_or_a_broken_file_writes_nothing() {
        let shipped = crate::config::defaults::default_settings();
        let (dir, path) = scratch(&shipped);
        let err = add_allow_rules(&path, "settings.json", &["read_file(x)".into()], |_| {
            Err("still ask".into())
        })
        .unwrap_err();
        assert!(err.to_string().contains("still ask"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), shipped);
        // A rule naming no tool would make the file invalid: refused, not written.
        let err =
            add_allow_rules(&path, "settings.json", &["nosuch(x)".into()], |_| Ok(())).unwrap_err();
        assert!(matches!(err, RememberError::Refused(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), shipped);
        std::fs::write(&path, "{ \"tools\": ").unwrap();
        let err = add_allow_rules(&path, "settings.json", &["read_file(x)".into()], |_| Ok(()))
            .unwrap_err();
        assert!(matches!(err, RememberError::Invalid(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{ \"tools\": ");
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_edit_saved_meanwhile_is_kept() {
        let shipped = crate::config::defaults::default_settings();
        let (dir, path) = scratch(&shipped);
        let edited = shipped.replace("\"max_chars\": 8000", "\"max_chars\": 1234");
        // The operator saves while the check runs (after the read, before the
        // rename): the rule is added to their version, not to the old one.
        let saved = std::cell::Cell::new(false);
        add_allow_rules(&path, "settings.json", &["read_file(x)".into()], |_| {
            if !saved.replace(true) {
                std::fs::write(&path, &edited).unwrap();
            }
            Ok(())
        })
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let parsed = Settings::parse(&text, "settings.json").unwrap();
        assert_eq!(parsed.settings.output.max_chars, 1234);
        assert!(parsed.settings.tools.allow.contains(&"read_file(x)".into()));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_symlinked_settings_file_is_edited_where_it_lives() {
        // An operator keeping the real file elsewhere (config management, /etc)
        // links to it: the rule goes into that file, and the link stays a link.
        let shipped = crate::config::defaults::default_settings();
        let (dir, real) = scratch(&shipped);
        let link_dir = dir.join("root");
        std::fs::create_dir_all(&link_dir).unwrap();
        let link = link_dir.join("settings.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        add_allow_rules(&link, "settings.json", &["read_file(x)".into()], |_| Ok(())).unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the link was replaced by a copy: later edits of the real file would be ignored"
        );
        let text = std::fs::read_to_string(&real).unwrap();
        let parsed = Settings::parse(&text, "settings.json").unwrap();
        assert!(parsed.settings.tools.allow.contains(&"read_file(x)".into()));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_file_that_is_not_utf8_is_left_alone() {
        // The loader refuses such a file (the daemon keeps its policy); remember
        // must not "repair" it by writing U+FFFD over the operator's bytes.
        let shipped = crate::config::defaults::default_settings();
        let mut bytes = shipped
            .replace("\"read_file\",", "\"read_file(workspace/caf\u{1})\",")
            .into_bytes();
        let at = bytes.iter().position(|&b| b == 1).unwrap();
        bytes[at] = 0xe9; // Latin-1 `é`
        let (dir, path) = scratch("");
        std::fs::write(&path, &bytes).unwrap();
        let result = add_allow_rules(&path, "settings.json", &["read_file(x)".into()], |_| Ok(()));
        assert!(
            matches!(result, Err(RememberError::Invalid(_))),
            "{result:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn concurrent_remembers_lose_no_rule() {
        // Two approvals remembered at once in one daemon: each rule reported as
        // added must be in the file afterwards (a lost update would leave the
        // operator believing a call is remembered when it is not).
        let shipped = crate::config::defaults::default_settings();
        let (dir, path) = scratch(&shipped);
        let results: Vec<(String, Result<Vec<String>, RememberError>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..12)
                .map(|i| {
                    let path = path.clone();
                    s.spawn(move || {
                        let rule = format!("read_file(workspace/f{i})");
                        let r = add_allow_rules(
                            &path,
                            "settings.json",
                            std::slice::from_ref(&rule),
                            |_| Ok(()),
                        );
                        (rule, r)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let allow = Settings::parse(&text, "settings.json")
            .unwrap()
            .settings
            .tools
            .allow;
        for (rule, result) in results {
            let added = result.unwrap_or_else(|e| panic!("{rule}: {e}"));
            assert_eq!(added, vec![rule.clone()]);
            assert!(
                allow.contains(&rule),
                "{rule} was reported added but is not in the file"
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_file_keeps_its_mode_whatever_the_umask() {
        // A group-writable policy (the operators group edits it) stays so: the
        // new file's mode is set, not filtered through the daemon's umask
        // (0o666 loses a bit under any umask but 0).
        use std::os::unix::fs::PermissionsExt;
        let shipped = crate::config::defaults::default_settings();
        let (dir, path) = scratch(&shipped);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        add_allow_rules(&path, "settings.json", &["read_file(x)".into()], |_| Ok(())).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o666, "{mode:o}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
