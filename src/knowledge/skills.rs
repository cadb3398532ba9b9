//! Skills: `skills/<name>/SKILL.md` under the root, read into memory at a task's
//! start. What is offered is exactly what was read then: `load_skill` answers
//! from memory, so a file edited mid-task does not change what the task loads,
//! and the sha256 recorded in `task_started` is of the bytes it serves.
//!
//! Every open is relative to a descriptor and refuses links (`O_NOFOLLOW`): a
//! symbolic link for `skills/`, a skill's directory or its `SKILL.md` is not
//! followed, and that skill is not offered.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

use super::front_matter;

/// The skills directory, under the root.
pub const SKILLS_DIR: &str = "skills";
/// A skill's file, in its directory.
pub const SKILL_FILE: &str = "SKILL.md";
/// Largest `SKILL.md` offered, in bytes.
pub const MAX_SKILL_BYTES: u64 = 64 * 1024;
/// Most skill directories read at a start; the rest are reported, not read, so
/// a task's memory for skills stays bounded (this many × [`MAX_SKILL_BYTES`]).
pub const MAX_SKILLS: usize = 256;

/// One skill offered to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name (equal to its directory's).
    pub name: String,
    /// Its description, as written.
    pub description: String,
    /// The text after the front matter: what `load_skill` returns.
    pub body: String,
    /// sha256 of `SKILL.md`'s bytes, hex.
    pub sha256: String,
}

impl Skill {
    /// The skill's directory, relative to the root.
    pub fn dir(&self) -> String {
        format!("{SKILLS_DIR}/{}", self.name)
    }
}

/// A skill directory that is not offered, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The directory's name under `skills/`, made printable (`skills` itself when
    /// the directory cannot be read).
    pub dir: String,
    /// The file the problem is in, relative to the root.
    pub file: String,
    /// Its line, when the problem is in the text.
    pub line: Option<usize>,
    /// What is wrong, for the operator.
    pub reason: String,
}

impl Refused {
    /// `file:line: reason` (or `file: reason`).
    pub fn describe(&self) -> String {
        match self.line {
            Some(line) => format!("{}:{line}: {}", self.file, self.reason),
            None => format!("{}: {}", self.file, self.reason),
        }
    }
}

/// The skills of a root as read at one start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skills {
    /// Offered, by name.
    pub offered: Vec<Skill>,
    /// Not offered, by directory name.
    pub refused: Vec<Refused>,
}

impl Skills {
    /// The offered skill called `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.offered.iter().find(|s| s.name == name)
    }

    /// The offered names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.offered.iter().map(|s| s.name.as_str()).collect()
    }
}

/// Reads every skill under `root/skills/`. A missing directory is no skills;
/// whatever is wrong with one skill refuses that one, never the others.
pub fn scan(root: &Path) -> Skills {
    let mut skills = Skills::default();
    let dir = root.join(SKILLS_DIR);
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match nix::fcntl::open(&dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return skills,
        Err(e) => {
            skills.refused.push(Refused {
                dir: SKILLS_DIR.into(),
                file: SKILLS_DIR.into(),
                line: None,
                reason: open_error(e, "directory"),
            });
            return skills;
        }
    };
    // Names only come from the listing; every open below is relative to `fd`.
    let mut names: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    for (i, name) in names.into_iter().enumerate() {
        let file = format!(
            "{SKILLS_DIR}/{}/{SKILL_FILE}",
            crate::text::escape_line(&name)
        );
        if i >= MAX_SKILLS {
            skills.refused.push(Refused {
                dir: crate::text::escape_line(&name).into_owned(),
                file,
                line: None,
                reason: format!("not read: at most {MAX_SKILLS} skill directories are read"),
            });
            continue;
        }
        match read_skill(&fd, &name) {
            Ok(skill) => skills.offered.push(skill),
            Err(SkillError::Dir(reason)) => skills.refused.push(Refused {
                file: format!("{SKILLS_DIR}/{}", crate::text::escape_line(&name)),
                dir: crate::text::escape_line(&name).into_owned(),
                line: None,
                reason,
            }),
            Err(SkillError::File(line, reason)) => skills.refused.push(Refused {
                dir: crate::text::escape_line(&name).into_owned(),
                file,
                line,
                reason,
            }),
        }
    }
    skills
}

/// Why an open failed, for the operator: a link is named as one.
fn open_error(e: Errno, what: &str) -> String {
    match e {
        Errno::ELOOP | Errno::ENOTDIR => {
            format!(
                "not a {what} (a symbolic link, or another kind of file): links are not followed"
            )
        }
        e => format!("cannot open it: {}", std::io::Error::from(e)),
    }
}

/// Why one skill is refused: its directory, or its file (at a line, if any).
enum SkillError {
    Dir(String),
    File(Option<usize>, String),
}

/// Reads one skill.
fn read_skill(skills: &OwnedFd, name: &str) -> Result<Skill, SkillError> {
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let dir = openat(skills.as_fd(), name, dir_flags, Mode::empty())
        .map_err(|e| SkillError::Dir(open_error(e, "directory")))?;
    // O_NONBLOCK: a FIFO planted as SKILL.md does not hang the start.
    let file_flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = openat(dir.as_fd(), SKILL_FILE, file_flags, Mode::empty()).map_err(|e| match e {
        Errno::ENOENT => SkillError::Dir(format!("the directory has no {SKILL_FILE}")),
        e => SkillError::File(None, open_error(e, "regular file")),
    })?;
    let bytes =
        read_regular(File::from(fd), MAX_SKILL_BYTES).map_err(|why| SkillError::File(None, why))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        SkillError::File(Some(line), "not UTF-8 text".to_string())
    })?;
    let fm =
        front_matter::parse(text).map_err(|e| SkillError::File(Some(e.line()), e.to_string()))?;
    if fm.name != name {
        return Err(SkillError::File(
            Some(fm.name_line),
            format!(
                "name {:?} differs from its directory {:?}; rename one to match",
                fm.name,
                crate::text::escape_line(name)
            ),
        ));
    }
    Ok(Skill {
        name: fm.name,
        description: fm.description,
        body: text[fm.body_start..].to_string(),
        sha256: crate::protocol::sha256_hex(&bytes),
    })
}

/// Reads a regular file of at most `max` bytes; anything else is the reason.
pub(super) fn read_regular(file: File, max: u64) -> Result<Vec<u8>, String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > max {
        return Err(format!("{} bytes; at most {max}", meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // One more than allowed: a file that grew since fstat is still refused.
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("more than {max} bytes"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(root: &Path, dir: &str, content: &[u8]) {
        let d = root.join(SKILLS_DIR).join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(SKILL_FILE), content).unwrap();
    }

    fn reason<'a>(s: &'a Skills, dir: &str) -> &'a Refused {
        s.refused
            .iter()
            .find(|r| r.dir == dir)
            .unwrap_or_else(|| panic!("{dir} not refused: {s:?}"))
    }

    #[test]
    fn no_skills_directory_is_no_skills() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(scan(root.path()), Skills::default());
    }

    #[test]
    fn each_bad_skill_is_refused_alone_and_the_good_one_offered() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        skill(r, "good", b"---\nname: good\ndescription: d\n---\nbody\n");
        let big = format!(
            "---\nname: big\ndescription: d\n---\n{}",
            "x".repeat(70_000)
        );
        skill(r, "big", big.as_bytes());
        skill(
            r,
            "latin1",
            b"---\nname: latin1\ndescription: caf\xe9\n---\n",
        );
        std::fs::create_dir_all(r.join("skills/empty")).unwrap();
        std::fs::write(r.join("skills/stray.md"), "not a skill").unwrap();
        // SKILL.md a link to a good skill's file; a FIFO that must not hang the scan.
        std::fs::create_dir_all(r.join("skills/link-file")).unwrap();
        std::os::unix::fs::symlink(
            r.join("skills/good/SKILL.md"),
            r.join("skills/link-file/SKILL.md"),
        )
        .unwrap();
        std::fs::create_dir_all(r.join("skills/fifo")).unwrap();
        nix::unistd::mkfifo(
            &r.join("skills/fifo/SKILL.md"),
            Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let s = scan(r);
        assert_eq!(s.names(), ["good"]);
        assert_eq!(s.offered[0].body, "body\n");
        assert_eq!(s.offered[0].sha256.len(), 64);
        assert!(reason(&s, "big").reason.contains("at most 65536"), "{s:?}");
        assert_eq!(reason(&s, "latin1").line, Some(3));
        assert!(reason(&s, "empty").reason.contains("no SKILL.md"));
        assert_eq!(reason(&s, "empty").file, "skills/empty");
        assert!(reason(&s, "stray.md").reason.contains("not a directory"));
        assert!(reason(&s, "link-file").reason.contains("symbolic link"));
        assert!(reason(&s, "fifo").reason.contains("not a regular file"));
    }

    #[test]
    fn a_linked_skills_directory_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        skill(&elsewhere, "a", b"---\nname: a\ndescription: d\n---\n");
        std::os::unix::fs::symlink(elsewhere.join(SKILLS_DIR), root.path().join(SKILLS_DIR))
            .unwrap();
        let s = scan(root.path());
        assert!(s.offered.is_empty());
        assert_eq!(s.refused[0].file, "skills");
        assert!(
            s.refused[0].reason.contains("links are not followed"),
            "{s:?}"
        );
    }
}
