//! Ctrl-C during a probe: no new request starts, the requests in flight end, and the report
//! shows what was answered so far.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(unix)]
use std::time::{Duration, Instant};

use anyhow::Context;

/// Set by Ctrl-C (SIGINT) or SIGTERM: no new request starts, the requests in flight end, and
/// the report shows what was answered so far.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Ctrl-C arrived: stop starting requests.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// A signal this soon after the first is the same interruption: coreutils' `timeout -s INT`
/// sends it to its child and then to the child's whole process group, and a terminal's Ctrl-C
/// reaches every process of the foreground group, a probe under a shell script twice.
#[cfg(unix)]
const REPEAT_WINDOW: Duration = Duration::from_secs(1);

/// Catches SIGINT and SIGTERM for the run: the first sets [`INTERRUPTED`]; a repeat within
/// [`REPEAT_WINDOW`] is the same interruption and is ignored; a later one ends the process at
/// once (the signal's default action), for a user who will not wait for the report.
#[cfg(unix)]
pub(super) fn catch() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("cannot install the Ctrl-C handler")?;
    std::thread::Builder::new()
        .name("interrupt".into())
        .spawn(move || {
            let mut first: Option<Instant> = None;
            for signal in signals.forever() {
                match first {
                    None => {
                        first = Some(Instant::now());
                        INTERRUPTED.store(true, Ordering::SeqCst);
                    }
                    Some(at) if at.elapsed() < REPEAT_WINDOW => {}
                    Some(_) => {
                        let _ = std::io::stdout().flush();
                        let _ = signal_hook::low_level::emulate_default_handler(signal);
                    }
                }
            }
        })
        .context("cannot start the Ctrl-C watcher")?;
    Ok(())
}

/// Catches Ctrl-C and Ctrl-Break (the console's control handler, through ctrlc) for the run:
/// the first sets [`INTERRUPTED`]; a later one ends the process at once with the status of an
/// interrupted run, for a user who will not wait for the report.
#[cfg(windows)]
pub(super) fn catch() -> anyhow::Result<()> {
    ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            let _ = std::io::stdout().flush();
            std::process::exit(super::EXIT_INTERRUPTED);
        }
    })
    .context("cannot install the Ctrl-C handler")
}
