//! `tcp://` targets: any line protocol. A request is the `--send` bytes; its answer ends with
//! the first occurrence of the `--until` bytes.

use super::reply::Parsed;

/// Complete once `end` occurs in `buf`; the answer ends just past it.
pub fn parse_until(buf: &[u8], end: &[u8]) -> Parsed {
    if end.is_empty() {
        // Any byte ends an answer that names no terminator.
        return if buf.is_empty() {
            Parsed::Incomplete
        } else {
            Parsed::Complete {
                len: buf.len(),
                close: false,
            }
        };
    }
    match buf.windows(end.len()).position(|w| w == end) {
        Some(at) => Parsed::Complete {
            len: at + end.len(),
            close: false,
        },
        None => Parsed::Incomplete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_at_the_terminator() {
        assert_eq!(parse_until(b"+PO", b"\r\n"), Parsed::Incomplete);
        assert_eq!(
            parse_until(b"+PONG\r\nrest", b"\r\n"),
            Parsed::Complete {
                len: 7,
                close: false
            }
        );
    }
}
