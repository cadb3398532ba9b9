//! Blocks of the docs that tests keep equal to what the code generates or the
//! binary prints, between `<!-- BEGIN KIND: name -->` and `<!-- END KIND: name -->`:
//! checked, or rewritten when `HARNESSD_BLESS_DOCS` is set.

use std::path::PathBuf;

/// One kind of kept block.
pub struct Kept<'a> {
    /// The marker's word: `GENERATED`, `SAMPLE`.
    pub kind: &'a str,
    /// What a stale block is, for the failure: "is stale", "is not what the binary prints".
    pub stale: &'a str,
    /// The test module whose blessed run rewrites it: `docs::`, `readme::`.
    pub module: &'a str,
}

impl Kept<'_> {
    /// Checks (or, blessed, rewrites) block `name` of `file` (relative to the
    /// repository) against `generated`; `same` says whether the block as written
    /// matches it.
    pub fn check(&self, file: &str, name: &str, generated: &str, same: impl Fn(&str) -> bool) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let begin = format!("<!-- BEGIN {}: {name} -->\n", self.kind);
        let end = format!("<!-- END {}: {name} -->", self.kind);
        let (Some(b), Some(e)) = (text.find(&begin), text.find(&end)) else {
            panic!("{file} has no block {begin:?} … {end:?}");
        };
        if same(&text[b + begin.len()..e]) {
            return;
        }
        if std::env::var_os("HARNESSD_BLESS_DOCS").is_some() {
            let new = format!("{}{generated}{}", &text[..b + begin.len()], &text[e..]);
            std::fs::write(&path, new).unwrap();
            return;
        }
        panic!(
            "{file}: the block {name} {}; run `HARNESSD_BLESS_DOCS=1 cargo test --test it {}` \
             and commit the result.\n--- generated ---\n{generated}",
            self.stale, self.module
        );
    }
}
