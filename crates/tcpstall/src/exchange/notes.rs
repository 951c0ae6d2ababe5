//! A row's errors, counted and bounded: a failure that repeats thousands of times (an accept
//! loop out of file descriptors) stays one line with a count, and the report keeps its size.

use std::io;

/// Distinct messages kept per row; later distinct ones are only counted.
const MAX_DISTINCT: usize = 8;

/// Errors of a row: each distinct message once, with how often it happened.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ErrorTally {
    entries: Vec<(String, u64)>,
    /// Occurrences of messages beyond [`MAX_DISTINCT`].
    others: u64,
}

impl ErrorTally {
    /// Notes one occurrence of `message`.
    pub fn push(&mut self, message: impl Into<String>) {
        self.add(message.into(), 1);
    }

    fn add(&mut self, message: String, count: u64) {
        if let Some(entry) = self.entries.iter_mut().find(|(m, _)| *m == message) {
            entry.1 += count;
        } else if self.entries.len() < MAX_DISTINCT {
            self.entries.push((message, count));
        } else {
            self.others += count;
        }
    }

    /// Adds every occurrence noted in `other`.
    pub fn merge(&mut self, other: ErrorTally) {
        for (message, count) in other.entries {
            self.add(message, count);
        }
        self.others += other.others;
    }

    /// Whether nothing went wrong.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.others == 0
    }

    /// One line per distinct message (`… (12557 times)` when repeated), then how many
    /// others were left out.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .entries
            .iter()
            .map(|(message, count)| match count {
                1 => message.clone(),
                n => format!("{message} ({n} times)"),
            })
            .collect();
        if self.others > 0 {
            lines.push(format!("{} more errors of other kinds", self.others));
        }
        lines
    }
}

/// `what: error`, with what to do when the error is running out of file descriptors, the
/// usual cause when many connections run at once.
pub fn describe_io(what: &str, err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::EMFILE) => {
            format!("{what}: too many open files: raise ulimit -n or lower --parallel")
        }
        Some(libc::ENFILE) => format!(
            "{what}: the system's file table is full (ENFILE): lower --parallel or raise \
             fs.file-max"
        ),
        _ => format!("{what}: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_counted_and_distinct_messages_bounded() {
        let mut tally = ErrorTally::default();
        assert!(tally.is_empty());
        for _ in 0..12_557 {
            tally.push("accept: too many open files");
        }
        for i in 0..20 {
            tally.push(format!("request {i}: reset"));
        }
        let lines = tally.lines();
        assert_eq!(lines.len(), MAX_DISTINCT + 1);
        assert_eq!(lines[0], "accept: too many open files (12557 times)");
        assert_eq!(lines[MAX_DISTINCT], "13 more errors of other kinds");
        let mut other = ErrorTally::default();
        other.push("accept: too many open files");
        tally.merge(other);
        assert_eq!(
            tally.lines()[0],
            "accept: too many open files (12558 times)"
        );
    }

    #[test]
    fn running_out_of_descriptors_says_what_to_do() {
        let err = io::Error::from_raw_os_error(libc::EMFILE);
        assert_eq!(
            describe_io("accept", &err),
            "accept: too many open files: raise ulimit -n or lower --parallel"
        );
        let err = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert!(describe_io("connect", &err).starts_with("connect: "));
    }
}
