//! Whether the server on this host has any connection behind it: its process tree's TCP
//! sockets (procfs, no capability needed), listed while the probe runs. A server with no
//! connection but the probe's own has no hop where a write could wait for another delayed ACK:
//! a timer-shaped wait is then its own time, not a hold.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::host::procfs::{self, TcpState};

use super::client::RunLog;
use super::upstream::Process;

/// How often the server's sockets are listed: a connection a proxy opens for one request lives
/// at least that request's time.
const LIST_EVERY: Duration = Duration::from_millis(20);

/// The listing thread; stopped and joined by [`Lister::finish`] or when dropped.
pub(crate) struct Lister {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<HashSet<(SocketAddr, SocketAddr)>>>,
    thread: Option<JoinHandle<()>>,
}

impl Lister {
    /// Lists the connected TCP sockets (local, remote) of `server`'s process tree until
    /// finished.
    pub(crate) fn start(server: &Process) -> Option<Lister> {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(HashSet::new()));
        let (flag, found, pid) = (stop.clone(), seen.clone(), server.pid);
        let thread = std::thread::Builder::new()
            .name("server-sockets".into())
            .spawn(move || {
                let tree = crate::host::tree::process_tree(pid);
                loop {
                    let now = connections(&tree);
                    if let Ok(mut all) = found.lock() {
                        all.extend(now);
                    }
                    if flag.load(Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(LIST_EVERY);
                }
            })
            .ok()?;
        Some(Lister {
            stop,
            seen,
            thread: Some(thread),
        })
    }

    /// Stops listing; the server's connections that are not the probe's (`log`), by remote
    /// address: the hops behind it.
    pub(crate) fn finish(mut self, log: &RunLog) -> Vec<SocketAddr> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let ours: HashSet<u16> = log.connections.iter().map(|c| c.local_port).collect();
        let seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let mut others: Vec<SocketAddr> = seen
            .into_iter()
            .filter(|(_, remote)| !(remote.ip().is_loopback() && ours.contains(&remote.port())))
            .map(|(_, remote)| remote)
            .collect();
        others.sort();
        others.dedup();
        others
    }
}

impl Drop for Lister {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The connected TCP sockets of the processes `tree`: (local, remote).
pub(crate) fn connections(tree: &[u32]) -> Vec<(SocketAddr, SocketAddr)> {
    let Some(&first) = tree.first() else {
        return Vec::new();
    };
    let inodes: HashSet<u64> = tree
        .iter()
        .filter_map(|pid| procfs::socket_fds(*pid).ok())
        .flatten()
        .map(|(_, inode)| inode)
        .collect();
    procfs::tcp_entries(first, &inodes)
        .map(|entries| {
            entries
                .values()
                .filter(|e| e.state != TcpState::Listen && !e.remote.ip().is_unspecified())
                .map(|e| (procfs::unmapped(e.local), procfs::unmapped(e.remote)))
                .collect()
        })
        .unwrap_or_default()
}
