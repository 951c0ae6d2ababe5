//! Reading packets: the capture files of [`tcpstall_core::capture`] and the lab's own live
//! capture (packet rings, NFLOG, the kernel filters).

// The live capture is Linux's: packet rings, NFLOG and classic BPF filters on its sockets.
on_linux! {
    mod bpf;
    pub(crate) mod filter;
    pub mod live;
    pub(crate) mod nflog;
    pub(crate) mod ring;
    pub(crate) mod stamps;
}

pub use tcpstall_core::capture::*;

/// Realtime clock now, ns since the Unix epoch: the clock of the kernel's packet timestamps.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
