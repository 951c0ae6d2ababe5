//! The server's listening socket watched while the requests run: its queue through
//! `sock_diag` and its namespace's counters through `/proc/PID/net/netstat`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{ListenQueue, SAMPLE_EVERY};
use crate::host::kernel;
use crate::host::sock_diag::{self, ListenQueue as Row};
use crate::probe::upstream::Process;
use crate::tcp_rules;

/// The counters of a network namespace that a full accept queue raises.
#[derive(Debug, Clone, Copy)]
struct Counters {
    overflows: Option<u64>,
    drops: Option<u64>,
}

impl Counters {
    fn read(pid: u32) -> Counters {
        let netstat = format!("/proc/{pid}/net/netstat");
        Counters {
            overflows: kernel::tcpext_counter_in(&netstat, tcp_rules::LISTEN_OVERFLOWS),
            drops: kernel::tcpext_counter_in(&netstat, tcp_rules::LISTEN_DROPS),
        }
    }
}

/// The listening socket watched while the requests run.
pub(crate) struct Watch {
    server: Process,
    before: Row,
    counters: Counters,
    stop: Arc<AtomicBool>,
    sampler: Option<JoinHandle<u32>>,
}

/// The listening socket of `target` in this namespace.
fn listener(target: SocketAddr) -> Result<Row, String> {
    let rows = sock_diag::listeners().map_err(|err| format!("sock_diag: {err}"))?;
    rows.into_iter()
        .find(|r| {
            r.local.port() == target.port()
                && (r.local.ip().is_unspecified() || r.local.ip() == target.ip())
        })
        .ok_or_else(|| format!("no listening socket for {target} in sock_diag"))
}

impl Watch {
    /// Reads the listener of `target`, owned by `server`, and the counters, and starts
    /// sampling its queue.
    pub(crate) fn start(target: SocketAddr, server: &Process) -> Result<Watch, String> {
        let before = listener(target)?;
        let counters = Counters::read(server.pid);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let inode = before.inode;
        let sampler = std::thread::Builder::new()
            .name("listen-queue".into())
            .spawn(move || {
                let mut most = 0;
                // Bounded by the run: the watch stops it when the requests end, or when it is
                // dropped on an early return.
                while !flag.load(Ordering::Relaxed) {
                    if let Ok(rows) = sock_diag::listeners() {
                        if let Some(r) = rows.iter().find(|r| r.inode == inode) {
                            most = most.max(r.queued);
                        }
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
                most
            })
            .map_err(|err| format!("cannot start the queue sampler: {err}"))?;
        Ok(Watch {
            server: server.clone(),
            before,
            counters,
            stop,
            sampler: Some(sampler),
        })
    }

    /// Stops sampling and reads the listener and the counters again.
    pub(crate) fn finish(mut self) -> ListenQueue {
        self.stop.store(true, Ordering::Relaxed);
        let sampled = self.sampler.take().and_then(|h| h.join().ok()).unwrap_or(0);
        let after = listener(self.before.local).ok();
        let now = Counters::read(self.server.pid);
        let rise = |b: Option<u64>, a: Option<u64>| Some(a?.saturating_sub(b?));
        let queued_after = after.map_or(0, |r| r.queued);
        ListenQueue {
            pid: self.server.pid,
            command: self.server.command.clone(),
            address: self.before.local,
            backlog: after.map_or(self.before.backlog, |r| r.backlog),
            queued: [
                self.before.queued,
                sampled.max(self.before.queued).max(queued_after),
                queued_after,
            ],
            somaxconn: kernel::read_sysctl_u64(tcp_rules::SOMAXCONN_SYSCTL),
            overflows: rise(self.counters.overflows, now.overflows),
            drops: rise(self.counters.drops, now.drops),
            blamed: false,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
