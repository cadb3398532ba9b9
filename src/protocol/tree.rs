//! Where a task sits in a tree of delegation: a child's id is its parent's id, a
//! dot, and a digest of the parent's `delegate` call, so every reader (the log's
//! envelope, the daemon's registry, `show`, `submit --wait`, a restart) knows a
//! child's parent from its id alone, and a resumed parent finds the child its open
//! call started without any lookup.

use super::sha256_hex;

/// Hex digits of the call's digest in a child's id: tool_use ids are unique within
/// a task (a repeat is a protocol error), and a collision of two of one task's
/// calls would find the first child's transcript on disk, which a new child
/// refuses to overwrite (the call fails instead).
const CHILD_DIGITS: usize = 10;

/// The id of the child task started by `parent`'s call `tool_use_id`.
pub fn child_task_id(parent: &str, tool_use_id: &str) -> String {
    let digest = sha256_hex(tool_use_id.as_bytes());
    format!("{parent}.{}", &digest[..CHILD_DIGITS])
}

/// The parent of task `id`, if it is a child (see [`child_task_id`]).
pub fn parent_task_id(id: &str) -> Option<&str> {
    id.rsplit_once('.').map(|(parent, _)| parent)
}

/// How deep `id` is in its tree: 0 for a task that was submitted or run, 1 for
/// its children, and so on.
pub fn delegation_depth(id: &str) -> u32 {
    id.bytes().filter(|b| *b == b'.').count() as u32
}

/// The task at the top of `id`'s tree (itself when it has no parent).
pub fn root_task_id(id: &str) -> &str {
    id.split_once('.').map_or(id, |(root, _)| root)
}

/// Whether `id` is `ancestor` itself or one of its descendants.
pub fn within_tree(id: &str, ancestor: &str) -> bool {
    id == ancestor
        || id
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Whether `id` is a task id this version writes or derives: a root id of ASCII
/// letters, digits and `-`, then child segments of hex digits. Ids from a request
/// or a command line are checked with this before they name a file.
pub fn is_task_id(id: &str) -> bool {
    let mut parts = id.split('.');
    let root = parts.next().unwrap_or_default();
    let root_ok = !root.is_empty() && root.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    root_ok && parts.all(|p| p.len() == CHILD_DIGITS && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_id_names_its_parent_and_depth() {
        let root = "t-20261202T001500Z-0abc12";
        let child = child_task_id(root, "toolu_01");
        assert_eq!(parent_task_id(&child), Some(root));
        assert_eq!(parent_task_id(root), None);
        let grandchild = child_task_id(&child, "toolu_01");
        assert_eq!(parent_task_id(&grandchild), Some(child.as_str()));
        assert_eq!(delegation_depth(root), 0);
        assert_eq!(delegation_depth(&grandchild), 2);
        assert_eq!(root_task_id(&grandchild), root);
        assert!(within_tree(&grandchild, root) && within_tree(&grandchild, &child));
        assert!(!within_tree(&child, &grandchild));
        // A sibling root whose id extends this one's is not in its tree.
        assert!(!within_tree("t-1x", "t-1"));
        assert_ne!(child, child_task_id(root, "toolu_02"));
    }

    #[test]
    fn only_written_ids_pass() {
        let root = "t-20261202T001500Z-0abc12";
        assert!(is_task_id(root));
        assert!(is_task_id(&child_task_id(root, "x")));
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            "a/b",
            "a.",
            ".a",
            "a.zzzzzzzzzz",
            "a.0123",
        ] {
            assert!(!is_task_id(bad), "{bad:?}");
        }
    }
}
