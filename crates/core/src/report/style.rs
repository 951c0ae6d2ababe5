//! How the terminal output looks: colour (`--color`, `NO_COLOR`) and whether box-drawing
//! characters may be used (UTF-8 locale on a terminal) or plain ASCII must do.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// `--color`: when to colour the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set (https://no-color.org).
    #[default]
    Auto,
    /// Always, even into a pipe or with `NO_COLOR` (an explicit flag overrides the variable).
    Always,
    /// Never.
    Never,
}

static CHOICE: OnceLock<ColorChoice> = OnceLock::new();

/// Records the command line's `--color` for every verb; later calls change nothing.
pub fn set_color_choice(choice: ColorChoice) {
    let _ = CHOICE.set(choice);
}

/// How to draw on standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// ANSI colours may be written.
    pub color: bool,
    /// Box-drawing and arrow characters may be written (else plain ASCII).
    pub unicode: bool,
}

impl Style {
    /// Plain ASCII, no colour: what files, pipes and golden tests get.
    #[cfg(test)]
    pub const PLAIN: Style = Style {
        color: false,
        unicode: false,
    };

    /// The style for standard output, from `--color`, `NO_COLOR`, `TERM` and the locale.
    pub fn stdout() -> Style {
        let terminal = std::io::stdout().is_terminal();
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let color = match CHOICE.get().copied().unwrap_or_default() {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                terminal && env("NO_COLOR").is_none() && env("TERM").as_deref() != Some("dumb")
            }
        };
        // The first of LC_ALL, LC_CTYPE, LANG that is set decides the character set (POSIX
        // locale precedence).
        let locale = env("LC_ALL")
            .or_else(|| env("LC_CTYPE"))
            .or_else(|| env("LANG"));
        let utf8 = locale.is_some_and(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("utf-8") || l.contains("utf8")
        });
        Style {
            color,
            unicode: terminal && utf8,
        }
    }

    /// `text` in the ANSI colour `code` (SGR parameters such as `1;31`) when colour is on.
    pub fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_style_writes_no_escape() {
        assert_eq!(Style::PLAIN.paint("1;31", "held"), "held");
        let colored = Style {
            color: true,
            unicode: false,
        };
        assert_eq!(colored.paint("1;31", "held"), "\x1b[1;31mheld\x1b[0m");
    }
}
