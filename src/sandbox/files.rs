//! File jobs, performed by the helper itself after confinement: success prints the
//! result on stdout (exit 0), failure prints a message for the model on stderr
//! (exit 1). Every file is opened through [`open_judged`]: exactly the path the
//! daemon judged, following no link.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::Job;
use super::open::{Access, open_judged};

const DEFAULT_LIMIT: u64 = 2000;

/// Performs a file job and returns the helper's exit code.
// The helper's stderr is the job's answer to the model on failure, not a diagnostic.
#[allow(clippy::print_stderr)]
pub fn run(job: Job) -> i32 {
    let result = match job {
        Job::ReadFile {
            path,
            offset,
            limit,
        } => read_file(&path, offset.unwrap_or(1), limit.unwrap_or(DEFAULT_LIMIT)),
        Job::WriteFile { path, content } => write_file(&path, &content),
        Job::EditFile {
            path,
            old_string,
            new_string,
        } => edit_file(&path, &old_string, &new_string),
        Job::ListDir { path } => list_dir(&path),
        Job::Bash { .. }
        | Job::Python { .. }
        | Job::Exec { .. }
        | Job::Probe
        | Job::McpServer { .. }
        | Job::Hook { .. } => Err("not a file job".into()),
    };
    match result {
        Ok(text) => {
            let mut out = std::io::stdout().lock();
            if out
                .write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                return 1;
            }
            0
        }
        Err(message) => {
            eprintln!("{message}");
            1
        }
    }
}

fn io_err(op: &str, path: &Path, e: std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => super::open::failed(op, path, nix::errno::Errno::from_raw(n)),
        None => format!("cannot {op} {}: {e}", path.display()),
    }
}

/// The whole of an open file, as UTF-8.
fn read_text(file: &mut File, path: &Path) -> Result<String, String> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| io_err("read", path, e))?;
    String::from_utf8(bytes).map_err(|_| {
        format!(
            "{} is not UTF-8 text; inspect it with run_bash (e.g. `file` or `xxd | head`)",
            path.display()
        )
    })
}

fn read_file(path: &Path, offset: u64, limit: u64) -> Result<String, String> {
    let mut file = open_judged(path, Access::Read, "read")?;
    let text = read_text(&mut file, path)?;
    let total = text.lines().count() as u64;
    let start = offset.saturating_sub(1);
    if start >= total && total > 0 {
        return Err(format!(
            "offset {offset} is past the end: {} has {total} lines",
            path.display()
        ));
    }
    let selected: Vec<&str> = text
        .lines()
        .skip(start as usize)
        .take(limit as usize)
        .collect();
    let mut out = selected.join("\n");
    if text.ends_with('\n') || start + (selected.len() as u64) < total {
        out.push('\n');
    }
    let end = start + selected.len() as u64;
    if end < total {
        out.push_str(&format!(
            "[lines {}-{end} of {total}; call read_file with offset={} to read on]\n",
            start + 1,
            end + 1
        ));
    }
    Ok(out)
}

fn write_file(path: &Path, content: &str) -> Result<String, String> {
    let mut file = open_judged(path, Access::Create, "write")?;
    file.write_all(content.as_bytes())
        .map_err(|e| io_err("write", path, e))?;
    Ok(format!(
        "wrote {} bytes to {}",
        content.len(),
        path.display()
    ))
}

fn edit_file(path: &Path, old: &str, new: &str) -> Result<String, String> {
    // One descriptor for the read and the write: the file edited is the file read.
    let mut file = open_judged(path, Access::ReadWrite, "edit")?;
    let text = read_text(&mut file, path)?;
    match text.matches(old).count() {
        0 => Err(format!(
            "old_string not found in {}; read the file again and copy the text exactly",
            path.display()
        )),
        1 => {
            let edited = text.replacen(old, new, 1);
            file.set_len(0)
                .and_then(|()| file.seek(SeekFrom::Start(0)))
                .and_then(|_| file.write_all(edited.as_bytes()))
                .map_err(|e| io_err("write", path, e))?;
            Ok(format!("edited {}", path.display()))
        }
        n => Err(format!(
            "old_string occurs {n} times in {}; include more surrounding text so it occurs once",
            path.display()
        )),
    }
}

fn list_dir(path: &Path) -> Result<String, String> {
    let dir = open_judged(path, Access::Directory, "list")?;
    // Listing "." after fchdir reads the directory that was opened, by descriptor,
    // with no name to resolve again. The helper exits after this job, so its
    // working directory is nobody else's concern.
    nix::unistd::fchdir(&dir).map_err(|e| super::open::failed("list", path, e))?;
    let entries = std::fs::read_dir(".").map_err(|e| io_err("list", path, e))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            // d_type, or an lstat of "./name": a link is reported, not followed.
            match entry.file_type() {
                Ok(t) if t.is_dir() => format!("{name}/"),
                Ok(t) if t.is_symlink() => format!("{name}@"),
                _ => name,
            }
        })
        .collect();
    names.sort();
    if names.is_empty() {
        return Ok(format!("{} is empty\n", path.display()));
    }
    Ok(names.join("\n") + "\n")
}
