//! The systems a lab peer can behave like: each profile's receive-side ACK rules and send-side
//! Nagle rule, with the figures' sources in docs/LAB.md ("Peers").

use std::time::Duration;

use crate::tcp_rules;

pub use crate::args::lab::Profile;

/// Which test holds a sub-MSS segment back while data is unacknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NagleRule {
    /// RFC 896 as written: any unacknowledged data holds a sub-MSS segment (Windows, BSD).
    Classic,
    /// Minshall's variant: only an unacknowledged *sub-MSS* segment holds the next one
    /// (`tcp_nagle_check` / `tcp_minshall_check`).
    Minshall,
}

/// When the delayed-ACK timer fires, measured from the first unacknowledged segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckTimer {
    /// A fixed delay after the segment (Windows' per-connection timer, Linux's `ato`).
    After(Duration),
    /// The first tick of a free-running clock of this period that is at least one period
    /// after the segment: XNU's fast timer, so the ACK leaves 1 to 2 periods later.
    SecondTick(Duration),
}

/// The rules a profile's receiver and sender follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackRules {
    /// Delayed-ACK timer.
    pub ack_timer: AckTimer,
    /// Data segments received that force an ACK at once (`TcpAckFrequency`, RFC 1122's
    /// "at least every second full-sized segment"); counted in segments, whatever their size.
    pub ack_every_segments: Option<u32>,
    /// Force an ACK once more than one full-sized segment (in bytes) is unacknowledged
    /// (Linux's `__tcp_ack_snd_check`, RFC 1122 4.2.3.2).
    pub ack_over_one_mss: bool,
    /// Immediate ACKs at connection start (Linux quick-ACK mode, `TCP_MAX_QUICKACKS`); 0: none.
    pub quick_acks: u32,
    /// Sending data within the ACK timeout of a receive enters ping-pong mode, where
    /// quick-ACKs stop (`inet_csk_inc_pingpong_cnt`, `tcp_pingpong_thresh` 1).
    pub ping_pong: bool,
    /// Nagle's test.
    pub nagle: NagleRule,
    /// RFC 7323 timestamps offered in the SYN (Windows: off unless `Tcp1323Opts` says so).
    pub timestamps: bool,
}

impl Profile {
    /// Its name on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Windows => "windows",
            Profile::Macos => "macos",
            Profile::Linux => "linux",
        }
    }

    /// Its rules in one line, for the lab's header.
    pub fn summary(self) -> &'static str {
        match self {
            Profile::Windows => "200 ms delayed-ACK timer, an ACK every 2nd segment (TcpAckFrequency 2), no quick-ACK mode, classic Nagle, no timestamps",
            Profile::Macos => "delayed ACK on the 100 ms fast timer (100-200 ms), an ACK every 2nd segment, classic Nagle",
            Profile::Linux => "40 ms delayed ACK, quick-ACK for the first 16 ACKs until ping-pong, an ACK once over one MSS unacknowledged, Minshall's Nagle",
        }
    }

    /// The rules it follows; `ack_every_segment` is the client-side fix of document 002
    /// (Windows `TcpAckFrequency`=1, Linux TCP_QUICKACK re-armed after every read, macOS
    /// `net.inet.tcp.delayed_ack`=0): every data segment is ACKed at once.
    pub fn rules(self, ack_every_segment: bool, delack_max: Option<Duration>) -> StackRules {
        let mut rules = match self {
            Profile::Windows => StackRules {
                ack_timer: AckTimer::After(tcp_rules::WINDOWS_DELACK),
                ack_every_segments: Some(2),
                ack_over_one_mss: false,
                quick_acks: 0,
                ping_pong: false,
                nagle: NagleRule::Classic,
                timestamps: false,
            },
            Profile::Macos => StackRules {
                ack_timer: AckTimer::SecondTick(tcp_rules::MACOS_DELACK),
                ack_every_segments: Some(2),
                ack_over_one_mss: false,
                quick_acks: 0,
                ping_pong: false,
                nagle: NagleRule::Classic,
                timestamps: true,
            },
            Profile::Linux => StackRules {
                ack_timer: AckTimer::After(tcp_rules::DELACK_MIN),
                ack_every_segments: None,
                ack_over_one_mss: true,
                quick_acks: tcp_rules::MAX_QUICKACKS,
                ping_pong: true,
                nagle: NagleRule::Minshall,
                timestamps: true,
            },
        };
        if ack_every_segment {
            rules.ack_every_segments = Some(1);
        }
        // TCP_DELACK_MAX_US (`tcp_delack_max()` in tcp_output.c) caps Linux's timer; Windows
        // and macOS have no such option, and the lab leaves their capped rows out.
        if let (Profile::Linux, Some(cap), AckTimer::After(timer)) =
            (self, delack_max, rules.ack_timer)
        {
            rules.ack_timer = AckTimer::After(timer.min(cap));
        }
        rules
    }
}
