//! What `fix PID` changed, kept so that `fix PID --undo` puts it back, as `fix --route` keeps
//! routes (route/state.rs): one JSON file per process under [`state_dir`], named by its pid
//! and start time (a pid taken again by another process is not mistaken for it), holding each
//! changed socket with its option as it was before tcpstall's first change. /run is emptied
//! at boot, when the processes are gone too.

use std::fs;
use std::io;
use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::host::procfs;
use crate::report::model::sockets::Holder;

/// Where root's records live; other users keep theirs under `$XDG_RUNTIME_DIR/tcpstall/fixes`.
pub const STATE_DIR: &str = "/run/tcpstall/fixes";

/// One process's changed sockets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FixState {
    /// The process `fix` was given.
    pub pid: u32,
    /// Its start time (field 22 of /proc/PID/stat, clock ticks since boot).
    pub start_time: u64,
    /// The sockets changed, each once, with the option as it was before the first change.
    pub sockets: Vec<ChangedSocket>,
}

/// One socket `fix` changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangedSocket {
    /// Socket inode: the socket itself, whichever fd holds it.
    pub inode: u64,
    /// Its holders when it was changed (`pid`, `fd`).
    pub holders: Vec<Holder>,
    /// Local address, for the report.
    pub local: String,
    /// TCP_NODELAY before, when `fix` switched it on.
    pub nodelay_before: Option<bool>,
    /// TCP_DELACK_MAX_US before (µs), when `fix --delack-max` set it.
    pub delack_max_us_before: Option<u32>,
    /// A listening socket: the connections it accepted since the change copied its options
    /// then (`inet_csk_clone_lock`), which an undo does not reach. Absent in older records.
    #[serde(default)]
    pub listening: bool,
}

impl ChangedSocket {
    /// What an undo puts back on it, every option recorded: `TCP_NODELAY back off,
    /// TCP_DELACK_MAX_US back to 200000 µs`.
    pub fn restores(&self) -> String {
        let mut parts = Vec::new();
        if let Some(nodelay) = self.nodelay_before {
            parts.push(format!(
                "TCP_NODELAY back {}",
                if nodelay { "on" } else { "off" }
            ));
        }
        if let Some(us) = self.delack_max_us_before {
            parts.push(format!("TCP_DELACK_MAX_US back to {us} µs"));
        }
        if parts.is_empty() {
            "nothing recorded".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// The directory of the records: /run/tcpstall/fixes for root, else the user's runtime
/// directory; `None` when a user has none.
pub fn state_dir() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from(STATE_DIR));
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join("tcpstall/fixes"))
}

/// The record of `pid` as it runs now; `None` when its start time cannot be read.
pub fn path_for(pid: u32) -> Option<PathBuf> {
    let start = start_time(pid)?;
    Some(state_dir()?.join(format!("pid{pid}-start{start}.json")))
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat`, field 22).
pub fn start_time(pid: u32) -> Option<u64> {
    procfs::stat_field(pid, 22)
}

/// The record at `path`, `None` when there is none.
pub fn load(path: &PathBuf) -> anyhow::Result<Option<FixState>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is not a tcpstall fix record", path.display())),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Adds `changed` to the record at `path` (made if missing, mode 0700 directory), keeping the
/// first "before" of a socket already recorded; written through a temporary file renamed over
/// it.
pub fn record(path: &PathBuf, pid: u32, changed: Vec<ChangedSocket>) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut state = load(path)?.unwrap_or(FixState {
        pid,
        start_time: start_time(pid).unwrap_or_default(),
        sockets: Vec::new(),
    });
    for socket in changed {
        match state.sockets.iter_mut().find(|s| s.inode == socket.inode) {
            Some(kept) => {
                kept.nodelay_before = kept.nodelay_before.or(socket.nodelay_before);
                kept.delack_max_us_before =
                    kept.delack_max_us_before.or(socket.delack_max_us_before);
            }
            None => state.sockets.push(socket),
        }
    }
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| {
                format!(
                    "cannot create {} to keep the change for --undo",
                    dir.display()
                )
            })?;
    }
    let temporary = path.with_extension("json.new");
    fs::write(&temporary, serde_json::to_vec_pretty(&state)?)
        .and_then(|()| fs::rename(&temporary, path))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Removes the records of processes that no longer run (no process with the pid, or one
/// with another start time: the pid taken again), as the names say (`pidN-startT.json`);
/// a record of a running process is never touched. Returns the records removed.
pub fn remove_stale() -> Vec<PathBuf> {
    let Some(dir) = state_dir() else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, start)) = name.to_str().and_then(parse_name) else {
            continue;
        };
        match start_time(pid) {
            Some(now) if now == start => continue,
            // One whose stat is unreadable but that exists is left alone.
            None if procfs::process_exists(pid) => continue,
            _ => {}
        }
        if fs::remove_file(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed.sort();
    removed
}

/// `(pid, start time)` of a record's file name, `pidN-startT.json`.
fn parse_name(name: &str) -> Option<(u32, u64)> {
    let (pid, start) = name
        .strip_prefix("pid")?
        .strip_suffix(".json")?
        .split_once("-start")?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Whether `pid` still runs as the process recorded (same start time).
pub fn same_process(state: &FixState) -> bool {
    procfs::process_exists(state.pid) && start_time(state.pid) == Some(state.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_names_are_read_back() {
        assert_eq!(parse_name("pid12-start345.json"), Some((12, 345)));
        assert_eq!(parse_name("pid12-start345.json.new"), None);
        assert_eq!(parse_name("pidx-start345.json"), None);
        assert_eq!(parse_name("notes.txt"), None);
    }
}
