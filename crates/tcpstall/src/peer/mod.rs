//! `lab --peer windows|macos|linux`: one end of a lab row is a user-space TCP stack (smoltcp)
//! that receives, ACKs and sends like another system's kernel, while the other end stays the
//! real Linux kernel, over the lab's emulated path. [`profile`] holds each system's rules,
//! [`ack_policy`] the receive-side ACK rules smoltcp lacks, [`device`] the TUN device between
//! them, [`stack`] the smoltcp interface, [`attach`] the namespace plumbing and [`client`]
//! the catalogue's workloads.

pub mod ack_policy;
pub mod attach;
pub mod client;
pub mod device;
pub mod profile;
pub mod server;
pub mod stack;

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddrV4};

use anyhow::Context;

use self::client::{ClientRun, RequestJob, StreamJob};
use self::profile::Profile;
use self::server::{PeerServer, ServerJob};
use self::stack::PeerStack;
use crate::host::netns::{NetNs, CLIENT_ADDR, SERVER_ADDR};
pub use crate::report::model::lab::PeerReport;

pub use crate::args::lab::PeerSide;

/// A client job of any kind.
#[derive(Debug, Clone)]
pub enum ClientJob {
    /// Request/response turns.
    Requests(RequestJob),
    /// One-way writes.
    Stream(StreamJob),
}

/// The peer, attached to one end of a running path.
#[derive(Debug)]
pub struct Peer {
    /// The system it behaves like.
    pub profile: Profile,
    /// The end it plays.
    pub side: PeerSide,
    namespace: NetNs,
    addr: Ipv4Addr,
    tun: File,
}

impl Peer {
    /// Attaches a peer to the `side` end of the emulated path, that end's `namespace`.
    pub fn attach(profile: Profile, side: PeerSide, namespace: &NetNs) -> anyhow::Result<Peer> {
        let (addr, other) = match side {
            PeerSide::Client => (CLIENT_ADDR, SERVER_ADDR),
            PeerSide::Server => (SERVER_ADDR, CLIENT_ADDR),
        };
        let namespace = namespace.clone();
        let tun = attach::attach_peer(&namespace, addr, other)
            .with_context(|| format!("cannot attach the {} peer", profile.name()))?;
        Ok(Peer {
            profile,
            side,
            namespace,
            addr,
            tun,
        })
    }

    /// What `lab --json` says about it.
    pub fn report(&self) -> PeerReport {
        PeerReport {
            profile: self.profile.name(),
            side: match self.side {
                PeerSide::Client => "client",
                PeerSide::Server => "server",
            },
            rules: self.profile.summary(),
        }
    }

    /// Runs a client job on a fresh stack; `ack_every_segment` is the row's client-side
    /// ACK fix, `delack_max` its delayed-ACK cap, `mss` the kernel end's TCP_MAXSEG.
    pub fn run_client(
        &self,
        job: ClientJob,
        ack_every_segment: bool,
        delack_max: Option<std::time::Duration>,
        mss: Option<u32>,
    ) -> std::io::Result<ClientRun> {
        let tun = self.tun.try_clone()?;
        let rules = self.profile.rules(ack_every_segment, delack_max);
        let addr = self.addr;
        self.namespace.run(move || {
            let mut stack = PeerStack::new(tun, addr, rules, mss)?;
            let mut run = match &job {
                ClientJob::Requests(job) => client::run_requests(&mut stack, job),
                ClientJob::Stream(job) => client::run_stream(&mut stack, job),
            };
            let dropped = stack.dropped_packets();
            if dropped > 0 {
                run.errors
                    .push(format!("the peer's TUN device refused {dropped} packets"));
            }
            Ok(run)
        })
    }

    /// Starts the row's server on a fresh stack, on a thread in the peer's namespace;
    /// `ack_every_segment` is the row's server-side ACK fix, `delack_max` its delayed-ACK
    /// cap, `mss` the kernel end's TCP_MAXSEG.
    pub fn start_server(
        &self,
        job: ServerJob,
        ack_every_segment: bool,
        delack_max: Option<std::time::Duration>,
        mss: Option<u32>,
    ) -> std::io::Result<PeerServer> {
        let tun = self.tun.try_clone()?;
        let rules = self.profile.rules(ack_every_segment, delack_max);
        let (addr, namespace) = (self.addr, self.namespace.clone());
        let at = SocketAddrV4::new(addr, server::PEER_SERVER_PORT);
        PeerServer::start(at, job, move |serve| {
            std::thread::Builder::new()
                .name("lab-peer-server".into())
                .spawn(move || {
                    // `serve` is called exactly once: in the namespace, or with the reason
                    // the namespace could not be entered.
                    let serve = std::sync::Mutex::new(Some(serve));
                    let take = || serve.lock().ok().and_then(|mut s| s.take());
                    let entered = namespace.run(|| {
                        let stack = PeerStack::new(tun, addr, rules, mss);
                        if let Some(serve) = take() {
                            match stack {
                                Ok(mut stack) => serve(Ok(&mut stack)),
                                Err(err) => serve(Err(err)),
                            }
                        }
                        Ok(())
                    });
                    if let (Err(err), Some(serve)) = (entered, take()) {
                        serve(Err(err));
                    }
                })
        })
    }
}
