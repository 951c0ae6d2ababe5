//! The tracer's signals: SIGINT/SIGTERM ask it to stop (detach, or end the command), and a
//! 100 ms SIGALRM tick wakes a blocked `waitpid` so that it can look at the clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// Set by SIGINT/SIGTERM: stop tracing (detach or end the command).
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

extern "C" fn on_tick(_: libc::c_int) {}

/// SIGINT or SIGTERM arrived since the guard was installed.
pub(crate) fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}

/// SIGINT/SIGTERM handlers and a 100 ms SIGALRM tick, none with SA_RESTART, so that a blocked
/// `waitpid` returns EINTR and the loop can look at the clock and the stop flag. Dropping it
/// restores the previous handlers and stops the tick.
pub(crate) struct SignalGuard {
    previous: Vec<(Signal, SigAction)>,
}

impl SignalGuard {
    /// Installs the handlers and starts the tick.
    pub fn install() -> anyhow::Result<SignalGuard> {
        STOP_REQUESTED.store(false, Ordering::SeqCst);
        let mut previous = Vec::new();
        let handlers: [(Signal, extern "C" fn(libc::c_int)); 3] = [
            (Signal::SIGINT, on_stop_signal),
            (Signal::SIGTERM, on_stop_signal),
            (Signal::SIGALRM, on_tick),
        ];
        for (sig, handler) in handlers {
            let action = SigAction::new(
                SigHandler::Handler(handler),
                SaFlags::empty(),
                SigSet::empty(),
            );
            // SAFETY: the handlers only store to an atomic (async-signal-safe).
            let old = unsafe { signal::sigaction(sig, &action) }
                .context("cannot install a signal handler")?;
            previous.push((sig, old));
        }
        set_tick(Duration::from_millis(100));
        Ok(SignalGuard { previous })
    }

    /// The dispositions the guard replaced, for a child to get back before exec.
    pub fn previous(&self) -> &[(Signal, SigAction)] {
        &self.previous
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        set_tick(Duration::ZERO);
        for (sig, old) in &self.previous {
            // SAFETY: restores the handler that was there before.
            let _ = unsafe { signal::sigaction(*sig, old) };
        }
    }
}

fn set_tick(every: Duration) {
    let tv = libc::timeval {
        tv_sec: every.as_secs() as _,
        tv_usec: every.subsec_micros() as _,
    };
    let timer = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: plain syscall on a local struct.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
}
