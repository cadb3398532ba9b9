//! Paths of file tools: resolved against the workspace for the executor, and
//! normalised for policy matching so `./workspace//x/../secrets/k` or a symlink to
//! a denied file is matched as what it really names.

use std::path::{Component, Path, PathBuf};

/// `raw` resolved against the workspace unless absolute. No normalisation: the
/// kernel resolves what the child process opens.
pub fn resolve_in_workspace(workspace: &Path, raw: &str) -> PathBuf {
    crate::config::resolve(workspace, raw)
}

/// Folds `.`, `..` and repeated separators without touching the filesystem.
fn fold(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Resolves symlinks in the longest prefix of `path` that exists, then folds the
/// rest lexically, the way the kernel would once the missing parts are created.
fn resolve_links(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = existing.canonicalize() {
            let mut out = canonical;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return fold(&out);
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return fold(path),
        }
    }
}

/// The form a file tool's path takes in policy rules: resolved against the
/// workspace, normalised, symlinks resolved, then relative to the root when inside
/// it (`workspace/secrets/k`) and absolute otherwise.
pub fn normalize_for_policy(root: &Path, workspace: &Path, raw: &str) -> String {
    let joined = fold(&resolve_in_workspace(workspace, raw));
    let resolved = resolve_links(&joined);
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    match resolved.strip_prefix(&root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => resolved.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dodges_are_folded() {
        let dir = std::env::temp_dir().join(format!("harnessd-paths-{}", std::process::id()));
        let ws = dir.join("workspace");
        std::fs::create_dir_all(ws.join("secrets")).unwrap();
        std::fs::create_dir_all(ws.join("x")).unwrap();
        let n = |raw| normalize_for_policy(&dir, &ws, raw);
        assert_eq!(n("secrets/k"), "workspace/secrets/k");
        assert_eq!(n("./x/..//secrets/./k"), "workspace/secrets/k");
        assert_eq!(n("../workspace/secrets/k"), "workspace/secrets/k");
        assert_eq!(n("/etc/../etc/shadow"), "/etc/shadow");
        std::os::unix::fs::symlink(ws.join("secrets"), ws.join("link")).unwrap();
        assert_eq!(n("link/k"), "workspace/secrets/k");
        assert_eq!(n("new/dir/../file"), "workspace/new/file");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
