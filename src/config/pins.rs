//! `policies/mcp.lock.json`: the pinned tool definitions, read for the policy (a
//! key-pattern rule is checked against its tool's pinned input schema) and
//! written when a server's tools are accepted.
//!
//! The file is harnessd's to write and the operator's to review: a missing file
//! is no pins, a file that does not parse, has another format version, or
//! whose hashes do not match its definitions is an error naming the file, line and
//! key — a definition edited by hand without its hash would otherwise be shown to
//! the model under a hash that still matches the server. Writes are atomic
//! (temporary file, synced, renamed, directory synced), so a reader never sees
//! half a file.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::error::{ConfigError, find_json_value};
use crate::protocol::mcp::{
    LOCK_FILE, LOCK_VERSION, PinFile, PinnedTool, ServerPins, ToolDefinition, valid_server_name,
};

/// The lock file of the root at `root`.
pub fn lock_file(root: &Path) -> PathBuf {
    root.join(LOCK_FILE)
}

/// The pins of the root at `root`: its lock file parsed, or no pins when there is
/// none. Errors name the file as [`LOCK_FILE`].
pub fn load_pins(root: &Path) -> Result<PinFile, ConfigError> {
    let path = lock_file(root);
    let bytes = match super::read_regular(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PinFile::default()),
        Err(source) => return Err(ConfigError::Read { path, source }),
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        ConfigError::invalid(LOCK_FILE, None, "", format!("the file is not UTF-8 ({e})"))
    })?;
    parse_pins(&text, LOCK_FILE)
}

/// Parses and checks the text of a lock file; `file` names it in errors.
pub fn parse_pins(text: &str, file: &str) -> Result<PinFile, ConfigError> {
    if text.trim().is_empty() {
        return Err(ConfigError::invalid(
            file,
            None,
            "",
            "the file is empty; harnessd writes it (`harnessd mcp pin SERVER`), or delete it \
             to start with no pins",
        ));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let pins: PinFile = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| super::error::json_error(text, file, &e.path().to_string(), e.inner()))?;
    let bad = |key: String, message: String| {
        ConfigError::invalid(file, find_json_value(text, &key), key, message)
    };
    if pins.version != LOCK_VERSION {
        return Err(bad(
            "version".into(),
            format!(
                "format {} is not the one this harnessd reads ({LOCK_VERSION})",
                pins.version
            ),
        ));
    }
    for (server, entry) in &pins.servers {
        if !valid_server_name(server) {
            return Err(bad(
                format!("servers.{server}"),
                format!("{server:?} is not a server name"),
            ));
        }
        for (name, pinned) in &entry.tools {
            let key = format!("servers.{server}.tools.{name}");
            if pinned.definition.name != *name {
                return Err(bad(
                    format!("{key}.definition.name"),
                    format!(
                        "the definition is of {:?}, pinned as {name:?}",
                        pinned.definition.name
                    ),
                ));
            }
            if pinned.definition.sha256() != pinned.sha256 {
                return Err(bad(
                    format!("{key}.sha256"),
                    "does not match the definition: a pinned definition is written by \
                     `harnessd mcp pin`, never edited by hand"
                        .into(),
                ));
            }
        }
    }
    Ok(pins)
}

/// Writes `pins` to `path` atomically ([`PinFile::to_text`]): a temporary file
/// beside it, synced, renamed over it, the directory synced. An existing file
/// keeps its permission bits and, when we may, its owner; a new one (or one
/// replacing a symlink) is 0644.
pub fn save_pins(path: &Path, pins: &PinFile) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = super::replace::temp_beside(path, "pin");
    // The file itself, not what a symlink there points to: the rename replaces the
    // link, and the new file must not take a stranger's owner or mode.
    let like = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_file());
    // Permission bits only: a lock file is never set-id.
    let mode = like.as_ref().map_or(0o644, |m| m.mode() & 0o777);
    let owner = like.as_ref().map(|m| (m.uid(), m.gid()));
    let written = super::replace::write_new(&tmp, pins.to_text().as_bytes(), mode, owner)
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Replaces `server`'s entry of `file` with exactly `listed`: each tool with its
/// definition and hash. A tool no longer listed is no longer pinned.
pub fn pin_server(file: &mut PinFile, server: &str, listed: &[ToolDefinition]) {
    let tools = listed
        .iter()
        .map(|def| {
            let pinned = PinnedTool {
                sha256: def.sha256(),
                definition: def.clone(),
            };
            (def.name.clone(), pinned)
        })
        .collect();
    file.servers
        .insert(server.to_string(), ServerPins { tools });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(name: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            title: None,
            description: Some("d".into()),
            input_schema: json!({"type": "object", "properties": {"a": {}}}),
            output_schema: None,
            annotations: None,
        }
    }

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "harnessd-pins-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(dir.join("policies")).expect("scratch dir");
        dir
    }

    #[test]
    fn a_missing_lock_file_is_no_pins_and_a_saved_one_reads_back() {
        let root = scratch();
        assert_eq!(load_pins(&root).expect("no file"), PinFile::default());
        let mut pins = PinFile::default();
        pin_server(&mut pins, "git", &[def("b"), def("a")]);
        pin_server(&mut pins, "time", &[def("now")]);
        save_pins(&lock_file(&root), &pins).expect("saved");
        let back = load_pins(&root).expect("reads");
        assert_eq!(back, pins);
        // Re-pinning replaces the server's entry whole.
        pin_server(&mut pins, "git", &[def("c")]);
        assert_eq!(pins.servers["git"].tools.keys().collect::<Vec<_>>(), ["c"]);
        assert!(pins.tool("time", "now").is_some());
        // No temporary file is left beside it.
        let left: Vec<_> = std::fs::read_dir(root.join("policies"))
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, ["mcp.lock.json"]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_bad_lock_file_is_a_located_error_naming_it() {
        let err = |text: &str| parse_pins(text, LOCK_FILE).expect_err("bad").to_string();
        let s = err("{\n  \"version\": 2,\n  \"servers\": {}\n}\n");
        assert!(
            s.starts_with("policies/mcp.lock.json:2:14: key `version`"),
            "{s}"
        );
        let s = err("{\"version\": 1, \"servers\": {\"git\": {\"tools\": 3}}}");
        assert!(s.starts_with("policies/mcp.lock.json:1:"), "{s}");
        assert!(s.contains("servers.git.tools"), "{s}");
        assert!(err("{\"version\": 1,").contains("policies/mcp.lock.json"));
        assert!(err("  \n").contains("empty"));
        // A definition changed by hand without its hash is refused.
        let mut pins = PinFile::default();
        pin_server(&mut pins, "git", &[def("a")]);
        let text = pins.to_text().replace("\"d\"", "\"poisoned\"");
        let s = err(&text);
        assert!(s.contains("key `servers.git.tools.a.sha256`"), "{s}");
        let line = text
            .lines()
            .position(|l| l.contains("\"sha256\""))
            .expect("sha line")
            + 1;
        assert!(
            s.starts_with(&format!("policies/mcp.lock.json:{line}:")),
            "{s}"
        );
    }
}
