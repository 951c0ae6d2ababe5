//! The ladder diagram in the terminal: two columns for the two hosts, one line per segment
//! with its time, flags, length and ACK, the stall's segments marked, the wait written on the
//! gap, and the fix under it. 100 columns wide at most.

use std::io::{self, Write};

use super::style::Style;
use crate::ladder::{Ladder, Mark, Rung};
use crate::Side;

/// Width of the time column (`  43.310 ms`).
const TIME_WIDTH: usize = 11;
/// Width between the two hosts' lifelines.
const LANE_WIDTH: usize = 58;
/// Longest line of text under the diagram.
const LINE_WIDTH: usize = 100;

/// The characters the diagram is drawn with.
struct Pen {
    line: char,
    lifeline: char,
    right: char,
    left: char,
    gap: char,
}

impl Pen {
    fn of(style: Style) -> Pen {
        if style.unicode {
            Pen {
                line: '─',
                lifeline: '│',
                right: '▶',
                left: '◀',
                gap: '┊',
            }
        } else {
            Pen {
                line: '-',
                lifeline: '|',
                right: '>',
                left: '<',
                gap: ':',
            }
        }
    }
}

/// ANSI colour of a mark.
fn mark_color(mark: Mark) -> &'static str {
    match mark {
        Mark::Held | Mark::SentByTimer => "1;31",
        Mark::LateAck | Mark::ZeroWindow => "1;35",
        Mark::ReleasingAck => "35",
        Mark::SmallUnacked => "33",
    }
}

/// What a segment says on its arrow: `P. 143 B seq 1 ack 79`, or `. ack 144 win 512`.
fn rung_label(r: &Rung) -> String {
    let mut s = r.flag_letters();
    if r.len > 0 {
        s.push_str(&format!(" {} B seq {}", r.len, r.seq));
    }
    if let Some(ack) = r.ack {
        s.push_str(&format!(" ack {ack}"));
    }
    if r.window == 0 {
        s.push_str(" win 0");
    }
    s
}

/// The arrow between the lifelines, the label inside it, pointing from `from`.
fn arrow(pen: &Pen, label: &str, from: Side) -> String {
    let inner = LANE_WIDTH - 2;
    let text = format!(" {label} ");
    let text_len = text.chars().count();
    let dashes = inner.saturating_sub(text_len + 1);
    let (lead, tail) = (2.min(dashes), dashes.saturating_sub(2));
    let line = |n: usize| pen.line.to_string().repeat(n);
    match from {
        Side::Client => format!("{}{text}{}{}", line(lead), line(tail), pen.right),
        Side::Server => format!("{}{}{text}{}", pen.left, line(tail), line(lead)),
    }
}

/// The sentence on the gap the stall cost.
fn gap_text(ladder: &Ladder) -> String {
    let ms = ladder.delay.as_millis_f64();
    format!(
        "{ms:.1} ms: {}",
        ladder.kind.info().gap_text(ladder.held_side)
    )
}

/// Writes `ladder` to `out`.
pub fn write(out: &mut impl Write, ladder: &Ladder, style: Style) -> io::Result<()> {
    let pen = Pen::of(style);
    writeln!(
        out,
        "{}: {} held {:.1} ms",
        style.paint("1", ladder.kind.name()),
        ladder.held_side.name(),
        ladder.delay.as_millis_f64()
    )?;
    let client = format!("client {}", ladder.client);
    let server = format!("server {}", ladder.server);
    // The server's name ends above its lifeline.
    let room = (LANE_WIDTH + 1).saturating_sub(client.chars().count());
    writeln!(out, "{:>TIME_WIDTH$} {client}{server:>room$}", "ms")?;
    for (i, r) in ladder.rungs.iter().enumerate() {
        let t = format!("{:.3}", r.at.as_millis_f64());
        let body = arrow(&pen, &rung_label(r), r.from);
        let (body, note) = match r.mark {
            Some(mark) => (
                style.paint(mark_color(mark), &body),
                format!(" {}", style.paint(mark_color(mark), mark.label())),
            ),
            None => (body, String::new()),
        };
        writeln!(out, "{t:>TIME_WIDTH$} {l}{body}{l}{note}", l = pen.lifeline)?;
        if ladder.gap_after == Some(i) {
            let text = gap_text(ladder);
            let inner = LANE_WIDTH - 1;
            let width = inner.saturating_sub(text.chars().count()) / 2;
            writeln!(
                out,
                "{:>TIME_WIDTH$} {g}{:w$}{}{:rest$}{g}",
                "",
                "",
                style.paint("36", &text),
                "",
                g = pen.gap,
                w = width,
                rest = inner.saturating_sub(width + text.chars().count()),
            )?;
        }
    }
    for line in super::wrap::words(&ladder.explanation, LINE_WIDTH, "") {
        writeln!(out, "{line}")?;
    }
    for (i, fix) in ladder.fixes.iter().enumerate() {
        let lead = if i == 0 { "fix:" } else { "    " };
        // "fix: 1. ": a long fix goes on under its own start.
        let indent = " ".repeat(lead.len() + 4);
        for (j, line) in super::wrap::words(fix, LINE_WIDTH - indent.len(), "")
            .iter()
            .enumerate()
        {
            if j == 0 {
                writeln!(out, "{lead} {}. {line}", i + 1)?;
            } else {
                writeln!(out, "{indent}{line}")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrows_fill_the_lane_both_ways() {
        let pen = Pen::of(Style::PLAIN);
        let right = arrow(&pen, "P. 78 B seq 1 ack 1", Side::Client);
        let left = arrow(&pen, "P. 78 B seq 1 ack 1", Side::Server);
        // Between the two lifelines of a LANE_WIDTH-wide lane.
        assert_eq!(right.chars().count(), LANE_WIDTH - 2);
        assert_eq!(left.chars().count(), LANE_WIDTH - 2);
        assert!(right.ends_with('>') && left.starts_with('<'));
    }
}
