//! Reading packets: the capture files of [`tcpstall_core::capture`] and the lab's own live
//! capture (packet rings, NFLOG, the kernel filters).

// The live capture is Linux's: packet rings, NFLOG and classic BPF filters on its sockets.
on_linux! {
    mod bpf;
    pub(crate) mod filter;
    pub mod live;
    pub(crate) mod nflog;
    pub(crate) mod ring;
}

pub use tcpstall_core::capture::*;
