//! Ctrl-C (SIGINT, SIGTERM, SIGHUP) in the middle of a lab run: the lab's namespaces are
//! deleted, the rows finished so far are printed with the row that was running named as
//! interrupted, and the run ends with 128 + the signal's number (130 for Ctrl-C), as the shell
//! reports it. The work done is kept, as `watch` keeps its summary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use super::runner::RowResult;

/// The rows of a run as they finish, and the one running now.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Rows finished, in order.
    pub rows: Vec<RowResult>,
    /// `scenario/variant` of the row running now.
    pub running: Option<String>,
    /// Rows the run was to run.
    pub total: usize,
}

pub(crate) use crate::report::model::lab::Interrupted;

/// The run's progress, shared with the thread that waits for the signal.
pub(crate) type SharedProgress = Arc<Mutex<Progress>>;

/// Set by the signal thread before it tears the run down: the run's own threads then fail
/// (their namespaces are gone), and their error must not end the process before the
/// signal's exit status and the rows are out.
static ENDING_ON_SIGNAL: AtomicBool = AtomicBool::new(false);

/// When a signal is ending the run, waits for the signal thread to exit the process (with
/// 128 + the signal's number) instead of returning; returns at once otherwise, and after 10 s
/// if that thread never exits.
pub fn wait_if_ending_on_signal() {
    if ENDING_ON_SIGNAL.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_secs(10));
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and so in every thread it starts
/// later) and waits for them in a thread of their own: on the first, deletes the namespaces
/// listed in `registry`, calls `print` with what was running, and exits with 128 + the
/// signal's number. Must be called before the run starts other threads.
pub(crate) fn on_signal(
    registry: Arc<Mutex<Vec<String>>>,
    progress: SharedProgress,
    print: Box<dyn FnOnce(Vec<RowResult>, Interrupted) + Send>,
) -> anyhow::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(signal);
    }
    signals
        .thread_block()
        .context("cannot block SIGINT/SIGTERM to keep the rows on Ctrl-C")?;
    std::thread::Builder::new()
        .name("lab-signals".into())
        .spawn(move || {
            let Ok(signal) = signals.wait() else { return };
            ENDING_ON_SIGNAL.store(true, Ordering::SeqCst);
            let names = registry.lock().map(|n| n.clone()).unwrap_or_default();
            for name in &names {
                super::path::delete_namespace(name);
            }
            if !names.is_empty() {
                eprintln!("tcpstall: {signal}: deleted the lab's network namespaces");
            }
            let (rows, running, total) = match progress.lock() {
                Ok(mut p) => (std::mem::take(&mut p.rows), p.running.take(), p.total),
                Err(_) => (Vec::new(), None, 0),
            };
            let interrupted = Interrupted {
                signal: signal.as_str().to_string(),
                row: running,
                finished: rows.len(),
                total,
            };
            print(rows, interrupted);
            std::process::exit(128 + signal as i32);
        })
        .context("cannot start the signal thread")?;
    Ok(())
}
