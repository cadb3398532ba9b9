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
    /// The directory's name under `skills/`, made printable.
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
                dir: String::new(),
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
