//! Prose broken between words to fit a width: the ladder's notes, the lab's explanations, the
//! analysis report on a terminal.

/// `text` broken at spaces into lines of at most `width` characters (a word longer than that
/// stands alone); the lines after the first start with `indent`, counted in the width.
pub fn words(text: &str, width: usize, indent: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut fresh = true;
    for word in text.split(' ') {
        let len = line.chars().count();
        if !fresh && len + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, indent.to_string()));
            fresh = true;
        }
        if !fresh {
            line.push(' ');
        }
        line.push_str(word);
        fresh = false;
    }
    lines.push(line);
    lines
}

/// Every line of `text` longer than `width` broken between words, its continuation lines
/// indented under its text: past a list's marker (`fix: 1. `, `4. `) or two spaces further.
/// Lines that fit are left as they are.
pub fn lines(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 32);
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let lead = body.len() - body.trim_start_matches(' ').len();
        let hanging = lead + marker_len(&body[lead..]).unwrap_or(2);
        let indent = " ".repeat(hanging.min(width / 2));
        // The line's own leading spaces stay: split after them.
        let (spaces, rest) = body.split_at(lead);
        let width_left = width.saturating_sub(lead).max(1);
        let rest_indent = &indent[lead.min(indent.len())..];
        for (i, part) in words(rest, width_left, rest_indent).iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(spaces);
            out.push_str(part);
        }
        out.push_str(newline);
    }
    out
}

/// Length of a list marker opening `text`: `fix: 1. `, `fix: `, `1. `.
fn marker_len(text: &str) -> Option<usize> {
    let after_fix = text.strip_prefix("fix: ").map_or(0, |_| "fix: ".len());
    let rest = &text[after_fix..];
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let numbered = (digits > 0 && rest[digits..].starts_with(". ")).then_some(digits + 2);
    match (after_fix, numbered) {
        (0, None) => None,
        (fix, n) => Some(fix + n.unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_keep_lines_within_width() {
        let text = "the server writes the response in 2 writes (143 B, then 127 B); the last waits";
        let lines = words(text, 30, "");
        assert!(lines.iter().all(|l| l.chars().count() <= 30), "{lines:?}");
        assert_eq!(lines.join(" "), text);
        let indented = words(text, 30, "  ");
        assert!(indented[1..].iter().all(|l| l.starts_with("  ")));
    }

    #[test]
    fn long_lines_hang_under_their_text_and_short_ones_stay() {
        let text =
            "short\n  fix: 1. write the response in one call on the server (one buffer)\n       \
                    4. if the server cannot be changed, cap the client's delayed ACK\n  9 times, \
                    waits 42.4 ms to 43.9 ms; the last: the server writes\n";
        let out = lines(text, 40);
        for line in out.lines() {
            assert!(line.chars().count() <= 40, "{line:?} in\n{out}");
        }
        let expected = "short\n  fix: 1. write the response in one call\n          on the \
                        server (one buffer)\n       4. if the server cannot be\n          \
                        changed, cap the client's\n          delayed ACK\n  9 times, waits \
                        42.4 ms to 43.9 ms; the\n    last: the server writes\n";
        assert_eq!(out, expected);
        // The words are all there, in order.
        let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(flat(&out), flat(text));
    }
}
