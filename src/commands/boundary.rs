//! What `check` warns about: settings that weaken the boundary (docs/policy.md), and the
//! one gap no path rule can close.
//!
//! An allowed path weakens the boundary when it overlaps a guarded place after
//! both are normalised (resolved against the root, links followed): write access
//! covering the root itself, or touching its `config/`, `policies/`, `transcripts/`
//! or socket directory; read access (which write access implies) to `/`, touching
//! `/proc` or `/sys`, covering a home directory or the API key file. "Covering"
//! is by path prefix, so read access to `/` covers everything and write access to
//! `.` covers the root. Pure apart from the resolution of links: the caller reads
//! `/etc/passwd`.

use std::path::{Path, PathBuf};

use crate::config::{Loaded, SandboxRequire, resolve};

/// The documented gap, stated by every `check`.
pub const HARD_LINK_GAP: &str = "a hard link placed inside an allowed tree by someone else \
    gives tools access to its inode under the allowed name; no path-based confinement \
    (Landlock, bubblewrap or Seatbelt) can see that. Keep files tools must not reach from \
    being hard-linked into allowed paths (e.g. keep them on another filesystem)";

/// What a daemon that is not root costs its tools (docs/policy.md `sandbox.user`), stated
/// by `check` when it runs as another user than root.
pub const SAME_UID_METADATA_COST: &str = "path-based chmod/chown/utimes/setxattr refused for \
    every path (tools share the daemon's uid, so nothing else would keep them off its own \
    files): `chmod +x` in the workspace fails; `touch` and fd-based changes to files a tool \
    can open for writing still work";

/// How an allowed path must relate to a guarded one to weaken the boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// The allowed path is the guarded one or above it.
    Covers,
    /// Either contains the other: being allowed a part of it is as bad.
    Overlaps,
    /// Covers it, or lies inside it and outside the harnessd root (so a workspace
    /// under someone's home is not a warning, `/home/alice/.ssh` is).
    CoversOrInsideOutsideRoot,
}

/// A place tools must not reach.
struct Guarded {
    path: PathBuf,
    what: String,
    reach: Reach,
}

/// `path` normalised the way tool paths are: links followed, missing parts kept.
fn normalise(path: &Path) -> PathBuf {
    crate::tools::walk(path).map_or_else(|_| fold(path), |w| w.path)
}

/// `.`, `..` and `//` folded without touching the filesystem: the fallback when
/// a path cannot be walked (a link loop).
fn fold(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// Whether `allowed` reaches `g`: `Some("")` when it covers it, `Some("part of ")`
/// when it lies inside it, `None` when it does not reach it.
fn hits(allowed: &Path, g: &Guarded, root: &Path) -> Option<&'static str> {
    let covers = g.path.starts_with(allowed);
    let inside = allowed.starts_with(&g.path);
    let inside_counts = match g.reach {
        Reach::Covers => false,
        Reach::Overlaps => true,
        Reach::CoversOrInsideOutsideRoot => !allowed.starts_with(root),
    };
    if covers {
        Some("")
    } else if inside && inside_counts {
        Some("part of ")
    } else {
        None
    }
}

/// The homes of accounts people log in to (uid 0 and uids from 1000, but not
/// `nobody`) in `/etc/passwd` text.
pub fn passwd_homes(passwd: &str) -> Vec<PathBuf> {
    passwd
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let uid: u32 = fields.get(2)?.parse().ok()?;
            let home = *fields.get(5)?;
            let person = uid == 0 || (1000..65534).contains(&uid);
            (person && home.starts_with('/') && home != "/").then(|| PathBuf::from(home))
        })
        .collect()
}

fn guarded_for_write(loaded: &Loaded) -> Vec<Guarded> {
    let p = &loaded.paths;
    let dir = |path: &Path| path.parent().map(Path::to_path_buf).unwrap_or_default();
    let socket = resolve(&p.root, &loaded.config.daemon.socket);
    let places = [
        (p.root.clone(), "the root itself", Reach::Covers),
        (
            p.root.join("config"),
            "the config directory",
            Reach::Overlaps,
        ),
        (dir(&p.settings), "the settings' directory", Reach::Overlaps),
        (
            p.transcripts.clone(),
            "the transcripts and audit log",
            Reach::Overlaps,
        ),
        (dir(&p.events), "the audit log's directory", Reach::Overlaps),
        (dir(&socket), "the socket directory", Reach::Overlaps),
    ];
    let mut list: Vec<Guarded> = Vec::new();
    for (path, what, reach) in places {
        let normal = normalise(&path);
        // A place is named once, even where two of these are one directory.
        if list.iter().any(|g| g.path == normal) {
            continue;
        }
        let shown = if path == p.root {
            path.display().to_string()
        } else {
            p.display(&path)
        };
        list.push(Guarded {
            path: normal,
            what: format!("{what} ({shown})"),
            reach,
        });
    }
    list
}

fn guarded_for_read(loaded: &Loaded, homes: &[PathBuf]) -> Vec<Guarded> {
    let mut list = vec![
        Guarded {
            path: "/".into(),
            what: "the whole filesystem (/)".into(),
            reach: Reach::Covers,
        },
        Guarded {
            path: "/proc".into(),
            what: "/proc (other processes' environment, memory maps and descriptors)".into(),
            reach: Reach::Overlaps,
        },
        Guarded {
            path: "/sys".into(),
            what: "/sys".into(),
            reach: Reach::Overlaps,
        },
    ];
    let mut seen = Vec::new();
    for home in [PathBuf::from("/home"), PathBuf::from("/root")]
        .iter()
        .chain(homes)
    {
        let path = normalise(home);
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        list.push(Guarded {
            what: format!("home directory {}", home.display()),
            path,
            reach: Reach::CoversOrInsideOutsideRoot,
        });
    }
    if let Some(key) = &loaded.config.api.api_key_file {
        let key = resolve(&loaded.paths.root, key);
        list.push(Guarded {
            what: format!("the API key file ({})", loaded.paths.display(&key)),
            path: normalise(&key),
            reach: Reach::Covers,
        });
    }
    list
}

/// The warning when `workspace` and `transcripts` are on one filesystem (same
/// `st_dev`): the audit log's reserve bounds what tool output may take, but writes
/// into the workspace are bounded only by its filesystem (docs/sandbox.md). Either missing:
/// nothing to compare yet.
pub fn shared_filesystem(workspace: &Path, transcripts: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let (w, t) = (
        std::fs::metadata(workspace).ok()?,
        std::fs::metadata(transcripts).ok()?,
    );
    (w.dev() == t.dev()).then(|| {
        "workspace and transcripts/ share a filesystem: a tool can fill the audit log's disk; \
         put the workspace on its own filesystem or a project quota"
            .to_string()
    })
}

/// The path lists `check` judges: `allowed_paths`, and each stdio server's own
/// `read` and `write` (a server is confined like a tool), each with its key and
/// whom it gives access.
fn path_lists(s: &crate::config::Settings) -> Vec<(String, String, &Vec<String>)> {
    let mut lists = vec![
        (
            "allowed_paths.read".to_string(),
            "tools".to_string(),
            &s.allowed_paths.read,
        ),
        (
            "allowed_paths.write".to_string(),
            "tools".to_string(),
            &s.allowed_paths.write,
        ),
    ];
    for (name, server) in &s.mcp.servers {
        for (list, entries) in [("read", &server.read), ("write", &server.write)] {
            if let Some(entries) = entries {
                lists.push((
                    format!("mcp.servers.{name}.{list}"),
                    format!("server {name}"),
                    entries,
                ));
            }
        }
    }
    lists
}

/// Every warning `check` prints about the settings, in a stable order.
pub fn warnings(loaded: &Loaded, homes: &[PathBuf]) -> Vec<String> {
    let s = &loaded.policy.settings;
    let root = normalise(&loaded.paths.root);
    let write_guard = guarded_for_write(loaded);
    let read_guard = guarded_for_read(loaded, homes);
    let mut out = Vec::new();
    let lists = path_lists(s);
    for (list, who, entries) in lists {
        for entry in entries.iter() {
            let allowed = normalise(&resolve(&loaded.paths.root, entry));
            let mut check = |access: &str, guard: &[Guarded], advice: &str| {
                let what: Vec<String> = guard
                    .iter()
                    .filter_map(|g| hits(&allowed, g, &root).map(|how| format!("{how}{}", g.what)))
                    .collect();
                if !what.is_empty() {
                    out.push(format!(
                        "{list} entry {entry:?} gives {who} {access} access to {}; {advice}",
                        what.join(", ")
                    ));
                }
            };
            let (actor, readers) = if who == "tools" {
                ("a tool", "tools need")
            } else {
                ("the server", "the server needs")
            };
            if list.ends_with(".write") {
                check(
                    "write",
                    &write_guard,
                    &format!(
                        "{actor} could then change its own policy, the audit record or the \
                         control socket: allow writing to the workspace (or directories outside \
                         the root) only"
                    ),
                );
            }
            // Write access includes read access (docs/sandbox.md: read ∪ write).
            check(
                "read",
                &read_guard,
                &format!("list only the directories {readers} to read"),
            );
        }
    }
    out.extend(rule_warnings(s));
    if let Some(w) = shared_filesystem(&loaded.paths.workspace, &loaded.paths.transcripts) {
        out.push(w);
    }
    if s.sandbox.network {
        out.push(
            "sandbox.network is true: tools may open any socket (TCP, UDP, DNS) and reach the \
             network; set it to false unless tools need it"
                .into(),
        );
    }
    if s.sandbox.require == SandboxRequire::BestEffort {
        out.push(
            "sandbox.require is \"best_effort\": tools run even when a layer of the sandbox \
             cannot be enforced (each tool_finished event says which); set it to \"full\" to \
             refuse them instead"
                .into(),
        );
    }
    out
}

/// Warnings about `run_bash` allow rules (docs/policy.md): a rule for a program with
/// *runs* entries never allows the commands that use them (they are not
/// provable), which the operator may not expect; an `allow_write` rule for a
/// program that runs workspace code grants whatever the workspace holds then.
fn rule_warnings(s: &crate::config::Settings) -> Vec<String> {
    use crate::policy::programs::{Effect, entries_of, example};
    let mut out = Vec::new();
    let lists = [
        ("allow", &s.tools.allow),
        ("allow_write", &s.tools.allow_write),
    ];
    for (list, rules) in lists {
        for rule in rules.iter() {
            let Some(pattern) = rule
                .strip_prefix("run_bash(")
                .and_then(|r| r.strip_suffix(')'))
            else {
                continue;
            };
            let program = pattern.split(' ').next().unwrap_or_default();
            let entries = entries_of(program);
            // Only the entries whose example this rule's pattern would match: the
            // rule was written broadly enough to cover a command that uses them.
            let covers = |example: &str| {
                crate::policy::Rule::parse(rule)
                    .ok()
                    .and_then(|r| crate::policy::RuleSet::new(vec![r]).ok())
                    .is_some_and(|set| {
                        set.first_pattern_hit(crate::tools::ToolName::RunBash, &[example])
                            .is_some()
                    })
            };
            let runs: Vec<&str> = entries
                .iter()
                .filter(|e| e.effect == Effect::Runs)
                .filter(|e| {
                    example(e).is_some_and(|ex| covers(&ex.replacen(e.program, program, 1)))
                })
                .map(|e| e.what)
                .collect();
            if !runs.is_empty() {
                out.push(format!(
                    "tools.{list} rule {rule:?}: `{program}` can run other text ({}); commands \
                     using that are not provable, so this rule never allows them",
                    runs.join(", ")
                ));
            }
            if list == "allow_write" && entries.iter().any(|e| e.effect == Effect::WorkspaceCode) {
                out.push(format!(
                    "tools.allow_write rule {rule:?}: `{program}` runs code the workspace holds, \
                     with writes and without asking: whatever a tool or the model put there runs"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_homes_are_those_of_people() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      bin:x:2:2:bin:/bin:/usr/sbin/nologin\n\
                      alice:x:1000:1000::/home/alice:/bin/bash\n\
                      nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n\
                      weird:x:1001:1001::/:/bin/sh\n\
                      broken line\n\
                      carol:x:notanumber:1::/home/carol:/bin/sh\n";
        assert_eq!(
            passwd_homes(passwd),
            [PathBuf::from("/root"), PathBuf::from("/home/alice")]
        );
    }

    #[test]
    fn reach_is_by_path_prefix() {
        let root = PathBuf::from("/srv/h");
        let g = |path: &str, reach| Guarded {
            path: path.into(),
            what: String::new(),
            reach,
        };
        let covers = g("/srv/h", Reach::Covers);
        assert_eq!(hits(Path::new("/"), &covers, &root), Some(""));
        assert_eq!(hits(Path::new("/srv/h"), &covers, &root), Some(""));
        assert_eq!(hits(Path::new("/srv/h/workspace"), &covers, &root), None);
        assert_eq!(hits(Path::new("/srv/hh"), &covers, &root), None);
        let proc = g("/proc", Reach::Overlaps);
        assert_eq!(
            hits(Path::new("/proc/self"), &proc, &root),
            Some("part of ")
        );
        assert_eq!(hits(Path::new("/processes"), &proc, &root), None);
        let home = g("/home", Reach::CoversOrInsideOutsideRoot);
        let ssh = Path::new("/home/alice/.ssh");
        assert_eq!(hits(ssh, &home, &root), Some("part of "));
        let home_root = PathBuf::from("/home/alice/h");
        let ws = Path::new("/home/alice/h/workspace");
        assert_eq!(hits(ws, &home, &home_root), None);
    }
}
