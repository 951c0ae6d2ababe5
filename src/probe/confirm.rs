//! The confirmation: a few requests again with the one change that must remove the stall the
//! diagnosis names. A server's write held by Nagle until our delayed ACK must vanish when we
//! re-arm TCP_QUICKACK after every read (our ACK leaves at once, `tcp_cleanup_rbuf`); a hold
//! of our own write must vanish with TCP_NODELAY on our socket. If it does not vanish, the
//! diagnosis was wrong and the report says so.

use crate::detect::StallKind;
use crate::flow::Side;

use super::socket::SocketMode;
use super::stalls::Stall;

/// Requests of the confirmation run: enough past a new connection's quick-ACK start (the
/// first turn is never held) for a stall to show again.
pub const REQUESTS: usize = 10;

/// What the confirmation run changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remedy {
    /// TCP_QUICKACK re-armed after every read.
    QuickAck,
    /// TCP_NODELAY on the probe's socket.
    NoDelay,
}

impl Remedy {
    /// The remedy that tests `stall`, when one does: only a Nagle hold released by a delayed
    /// ACK has one the client can apply.
    pub fn for_stall(stall: &Stall) -> Option<Remedy> {
        match (stall.kind, stall.held) {
            (StallKind::NagleDelayedAck, Side::Server) => Some(Remedy::QuickAck),
            (StallKind::NagleDelayedAck, Side::Client) => Some(Remedy::NoDelay),
            _ => None,
        }
    }

    /// The socket mode of the re-run.
    pub fn mode(self) -> SocketMode {
        match self {
            Remedy::QuickAck => SocketMode {
                quickack: true,
                nodelay: false,
            },
            Remedy::NoDelay => SocketMode {
                quickack: false,
                nodelay: true,
            },
        }
    }

    /// Stable name in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Remedy::QuickAck => "quickack",
            Remedy::NoDelay => "nodelay",
        }
    }

    /// What was done, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Remedy::QuickAck => "TCP_QUICKACK re-armed after every read",
            Remedy::NoDelay => "TCP_NODELAY on the probe's socket",
        }
    }
}

/// The confirmation run's outcome.
#[derive(Debug, Clone)]
pub struct Confirmation {
    /// What was changed.
    pub remedy: Remedy,
    /// Requests answered.
    pub requests: usize,
    /// Stalls of the diagnosed kind and side in the re-run.
    pub stalls: u64,
    /// Median latency of the re-run, ms.
    pub p50_ms: f64,
    /// `Some(true)`: the stall vanished; `Some(false)`: it stayed; `None`: the re-run could
    /// not tell (errors, or too few requests).
    pub confirmed: Option<bool>,
    /// Why `confirmed` is `None`, when it is.
    pub undecided: Option<String>,
}

/// Judges the re-run's `stalls` against the diagnosed `example`. `captured`: the stalls come
/// from the detector, which tells a hold released by an ACK from a pause, so one is enough to
/// deny the diagnosis; from the socket alone a reply pausing 40 ms (a busy server descheduled)
/// looks like a hold, so one in ten is taken for such noise.
pub fn judge(
    remedy: Remedy,
    example: &Stall,
    stalls: &[Stall],
    requests: usize,
    p50_ms: f64,
    errors: &[String],
    captured: bool,
) -> Confirmation {
    let tolerated = if captured { 0 } else { requests as u64 / 10 };
    let same = stalls
        .iter()
        .filter(|s| s.kind == example.kind && s.held == example.held)
        .count() as u64;
    let undecided = if same > 0 {
        None
    } else if let Some(err) = errors.first() {
        Some(format!("the re-run failed: {err}"))
    } else if requests < 2 {
        Some("the re-run answered fewer than 2 requests".to_string())
    } else {
        None
    };
    Confirmation {
        remedy,
        requests,
        stalls: same,
        p50_ms,
        confirmed: undecided.is_none().then_some(same <= tolerated),
        undecided,
    }
}
