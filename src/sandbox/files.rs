//! File jobs, performed by the helper itself after confinement: success prints the
//! result on stdout (exit 0), failure prints a message for the model on stderr
//! (exit 1).

use std::io::Write;
use std::path::Path;

use super::Job;

const DEFAULT_LIMIT: u64 = 2000;

/// Performs a file job and returns the helper's exit code.
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
        Job::Bash { .. } | Job::Python { .. } | Job::Exec { .. } | Job::Probe => {
            Err("not a file job".into())
        }
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
    let hint = match e.kind() {
        std::io::ErrorKind::NotFound => " (check the path with list_dir)",
        std::io::ErrorKind::PermissionDenied => {
            " (the sandbox does not allow this path; use a path inside the workspace)"
        }
        _ => "",
    };
    format!("cannot {op} {}: {e}{hint}", path.display())
}

fn read_text(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| io_err("read", path, e))?;
    String::from_utf8(bytes).map_err(|_| {
        format!(
            "{} is not UTF-8 text; inspect it with run_bash (e.g. `file` or `xxd | head`)",
            path.display()
        )
    })
}

fn read_file(path: &Path, offset: u64, limit: u64) -> Result<String, String> {
    let text = read_text(path)?;
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
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_err("create directory", parent, e))?;
    }
    std::fs::write(path, content).map_err(|e| io_err("write", path, e))?;
    Ok(format!(
        "wrote {} bytes to {}",
        content.len(),
        path.display()
    ))
}

fn edit_file(path: &Path, old: &str, new: &str) -> Result<String, String> {
    let text = read_text(path)?;
    match text.matches(old).count() {
        0 => Err(format!(
            "old_string not found in {}; read the file again and copy the text exactly",
            path.display()
        )),
        1 => {
            let edited = text.replacen(old, new, 1);
            std::fs::write(path, &edited).map_err(|e| io_err("write", path, e))?;
            Ok(format!("edited {}", path.display()))
        }
        n => Err(format!(
            "old_string occurs {n} times in {}; include more surrounding text so it occurs once",
            path.display()
        )),
    }
}

fn list_dir(path: &Path) -> Result<String, String> {
    let entries = std::fs::read_dir(path).map_err(|e| io_err("list", path, e))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
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
