//! Aligned tables for the human-readable listings (`tasks`, `approvals`,
//! `replay`): each column as wide as its widest cell, counted in characters of
//! the text as printed. Cells must already be escaped (one-line): a newline or a
//! control character in a cell would break the rows, which is why escaping comes
//! first and width is measured after it.

use std::io::Write;

/// Prints `rows` (the first is the header) with columns separated by two spaces;
/// columns whose index is in `right` are right-aligned (numbers). The last column
/// is not padded, so no line ends in spaces.
pub fn print_aligned<const N: usize>(
    out: &mut impl Write,
    rows: &[[String; N]],
    right: &[usize],
) -> std::io::Result<()> {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
            if right.contains(&i) {
                line.push_str(&pad);
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if i + 1 < N {
                    line.push_str(&pad);
                }
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// [`print_aligned`] with every column left-aligned.
pub fn print<const N: usize>(out: &mut impl Write, rows: &[[String; N]]) -> std::io::Result<()> {
    print_aligned(out, rows, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: [&str; 3]) -> [String; 3] {
        cells.map(String::from)
    }

    #[test]
    fn columns_line_up_whatever_the_cell_widths() {
        let rows = [
            row(["ID", "TOKENS", "PROMPT"]),
            row(["t-1", "5", "héllo wörld"]),
            row(["t-22222", "123456", "x"]),
        ];
        let mut out = Vec::new();
        print_aligned(&mut out, &rows, &[1]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "ID       TOKENS  PROMPT\n\
             t-1           5  héllo wörld\n\
             t-22222  123456  x\n"
        );
    }
}
