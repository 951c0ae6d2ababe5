//! The one question tcpstall asks before it changes what the user owns (`fix`, `fix --route`):
//! asked on the terminal, refused without one.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::bail;

/// What advice naming a `tcpstall fix` command adds after it: [`confirm`] asks first, and
/// a script has no terminal to answer on.
pub(crate) const ASKS_FIRST: &str =
    "it asks before changing anything: add --yes when not at a terminal";

/// Asks `question` on the terminal; refuses without one, naming `target`, which stays as it is.
// `fix`, the verb that asks, runs only on Linux.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn confirm(target: &str, question: &str) -> anyhow::Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        bail!(
            "standard input is not a terminal, so fix cannot ask before changing {target}: \
             add --yes to apply, or --dry-run to only show the plan"
        );
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES"))
}
