//! Cutting long text, so what is kept says what was cut: in the middle, so head and
//! tail survive (the model's view of a tool result, `output.max_chars`, and event
//! string fields, 4096 characters), or after the head (a workspace's `AGENTS.md`).

/// Keeps the first and last characters of `text` around a marker
/// `[… N chars omitted …]` on a line of its own; `extra` is added to N for bytes
/// the caller already dropped. Returns the text and whether it was cut.
///
/// The cap is exact: every character of the result except the marker itself —
/// the newlines that put the marker on its own line included — counts, and there
/// are at most `max_chars` of them (docs/policy.md).
pub fn truncate_middle(text: &str, max_chars: usize, extra: u64) -> (String, bool) {
    let count = text.chars().count();
    if count <= max_chars && extra == 0 {
        return (text.to_string(), false);
    }
    let (head, tail) = split_budget(text, count, max_chars);
    let omitted = (count - head - tail) as u64 + extra;
    let head_end = byte_index(text, head);
    let tail_start = byte_index(text, count - tail);
    let mut out = String::with_capacity(head_end + (text.len() - tail_start) + 40);
    out.push_str(&text[..head_end]);
    if needs_newline(&out) {
        out.push('\n');
    }
    out.push_str(&format!("[… {omitted} chars omitted …]"));
    if tail > 0 {
        out.push('\n');
        out.push_str(&text[tail_start..]);
    }
    (out, true)
}

/// Keeps the head of `bytes` — at most `max_bytes` of them, cut at a UTF-8
/// character boundary — then the marker `[… N chars omitted …]` on a line of its
/// own, N counting what was cut. Bytes that are not UTF-8 read as U+FFFD.
/// Returns the text and whether it was cut.
pub fn truncate_head(bytes: &[u8], max_bytes: usize) -> (String, bool) {
    if bytes.len() <= max_bytes {
        return (String::from_utf8_lossy(bytes).into_owned(), false);
    }
    let mut end = max_bytes;
    // A continuation byte (10xxxxxx) is inside a character: back off to its start.
    while end > 0 && bytes[end] & 0xC0 == 0x80 && max_bytes - end < 3 {
        end -= 1;
    }
    let mut out = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let omitted = String::from_utf8_lossy(&bytes[end..]).chars().count();
    if needs_newline(&out) {
        out.push('\n');
    }
    out.push_str(&format!("[… {omitted} chars omitted …]"));
    (out, true)
}

/// How many characters of head and of tail fit in `max_chars` once the
/// newlines around the marker are paid for: one after it when there is a tail,
/// one before it when the head does not already end a line. At most three sizes
/// are tried: the newlines cost two characters at most.
fn split_budget(text: &str, count: usize, max_chars: usize) -> (usize, usize) {
    let mut keep = count.min(max_chars);
    loop {
        let head = keep / 2;
        let tail = keep - head;
        let head_newline = usize::from(needs_newline(&text[..byte_index(text, head)]));
        if keep + head_newline + usize::from(tail > 0) <= max_chars || keep == 0 {
            return (head, tail);
        }
        keep -= 1;
    }
}

fn needs_newline(head: &str) -> bool {
    !head.is_empty() && !head.ends_with('\n')
}

/// The byte offset of character `n` (the end of the text when `n` is past it).
fn byte_index(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARKER_PREFIX: &str = "[… ";

    /// Characters of `out` that are not the marker.
    fn counted(out: &str) -> usize {
        let start = out.find(MARKER_PREFIX).unwrap();
        let end = start + out[start..].find(" …]").unwrap() + " …]".len();
        out[..start].chars().count() + out[end..].chars().count()
    }

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(truncate_middle("hello", 5, 0), ("hello".to_string(), false));
    }

    #[test]
    fn long_text_keeps_head_and_tail_in_chars() {
        let text = "é".repeat(10) + &"x".repeat(10);
        let (out, cut) = truncate_middle(&text, 8, 0);
        assert!(cut);
        assert_eq!(out, "ééé\n[… 14 chars omitted …]\nxxx");
    }

    #[test]
    fn dropped_bytes_count_in_the_marker() {
        let (out, cut) = truncate_middle("abcd", 10, 100);
        assert!(cut);
        assert!(out.contains("[… 100 chars omitted …]"), "{out}");
    }

    #[test]
    fn cap_is_exact_at_the_boundary_for_command_output() {
        // The shape of a `run_bash` result: header and section lines count.
        let text = format!("exit_code: 0\nstdout:\n{}\n", "y".repeat(5000));
        for max in [1000, 1001, 999, 30] {
            let (out, cut) = truncate_middle(&text, max, 0);
            assert!(cut);
            assert_eq!(counted(&out), max, "max_chars {max}: {out:?}");
        }
        let (out, _) = truncate_middle(&text, 1000, 0);
        assert!(out.starts_with("exit_code: 0\nstdout:\nyyy"), "{out:?}");
        assert!(out.ends_with("yyy\n"), "{out:?}");
    }

    #[test]
    fn a_head_ending_a_line_needs_no_extra_newline() {
        let text = "ab\ncd\nefghijklmnop";
        let (out, _) = truncate_middle(text, 7, 0);
        assert_eq!(out, "ab\n[… 12 chars omitted …]\nnop");
        assert_eq!(counted(&out), 7);
    }

    #[test]
    fn never_more_than_the_cap_whatever_the_text() {
        let texts = [
            "\n\n\n\n\n\n\n\n\n\n\n\n",
            "a\nb\nc\nd\ne\nf\ng\nh",
            "ééééééééééé",
        ];
        for text in texts {
            for max in 0..text.chars().count() {
                let (out, cut) = truncate_middle(text, max, 0);
                assert!(cut);
                assert!(counted(&out) <= max, "{text:?} at {max}: {out:?}");
                assert!(counted(&out) + 1 >= max, "{text:?} at {max}: {out:?}");
            }
        }
    }

    #[test]
    fn zero_cap_leaves_only_the_marker() {
        assert_eq!(truncate_middle("abc", 0, 0).0, "[… 3 chars omitted …]");
    }

    #[test]
    fn head_cut_keeps_whole_characters_and_counts_the_rest() {
        assert_eq!(truncate_head(b"abc", 3), ("abc".to_string(), false));
        // "é" is two bytes: a cut at 3 would split the second one.
        let text = "aéé".as_bytes();
        let (out, cut) = truncate_head(text, 4);
        assert!(cut);
        assert_eq!(out, "aé\n[… 1 chars omitted …]");
        let (out, _) = truncate_head("€€".as_bytes(), 4);
        assert_eq!(out, "€\n[… 1 chars omitted …]");
        let (out, _) = truncate_head(b"line\nmore", 5);
        assert_eq!(out, "line\n[… 4 chars omitted …]");
    }
}
