//! Cutting long text in the middle, so head and tail survive: the model's view of a
//! tool result (`output.max_chars`) and event string fields (4096 characters).

/// Keeps the first and last characters of `text` so that at most `max_chars`
/// remain, around a marker `[… N chars omitted …]`; `extra` is added to N for
/// bytes the caller already dropped. Returns the text and whether it was cut.
pub fn truncate_middle(text: &str, max_chars: usize, extra: u64) -> (String, bool) {
    let count = text.chars().count();
    if count <= max_chars && extra == 0 {
        return (text.to_string(), false);
    }
    let keep = count.min(max_chars);
    let head = keep / 2;
    let tail = keep - head;
    let omitted = (count - keep) as u64 + extra;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(count - tail)
        .map_or(text.len(), |(i, _)| i);
    let mut out = String::with_capacity(head_end + (text.len() - tail_start) + 40);
    out.push_str(&text[..head_end]);
    if !out.ends_with('\n') && !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&format!("[… {omitted} chars omitted …]\n"));
    out.push_str(&text[tail_start..]);
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(truncate_middle("hello", 5, 0), ("hello".to_string(), false));
    }

    #[test]
    fn long_text_keeps_head_and_tail_in_chars() {
        let text = "é".repeat(10) + &"x".repeat(10);
        let (out, cut) = truncate_middle(&text, 6, 0);
        assert!(cut);
        assert_eq!(out, "ééé\n[… 14 chars omitted …]\nxxx");
    }

    #[test]
    fn dropped_bytes_count_in_the_marker() {
        let (out, cut) = truncate_middle("abcd", 10, 100);
        assert!(cut);
        assert!(out.contains("[… 100 chars omitted …]"), "{out}");
    }
}
