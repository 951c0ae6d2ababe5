//! The write-write-read rule, per socket: two or more sends with no read in between on a socket
//! with Nagle on, a later send ending in a sub-MSS segment while the send before it left a
//! sub-MSS tail unacknowledged (`tcp_nagle_check` → `tcp_minshall_check`, sub-MSS as
//! [`tcp_rules::is_sub_mss`] says), then a wait for the peer. That later tail waits for the ACK
//! of the earlier one, which the peer delays (40 ms on Linux) when it has nothing to answer yet.

use crate::tcp_rules;

/// Sizes kept for the example of a socket: enough to print, bounded for long runs of sends.
const EXAMPLE_SENDS: usize = 8;

/// The sends on one socket since its last read: what Nagle may hold while the peer, with
/// nothing to answer yet, delays its ACK.
#[derive(Debug, Clone, Default)]
pub(crate) struct WritesSinceRead {
    /// Bytes of each send, the first `EXAMPLE_SENDS` of them.
    pub sizes: Vec<u64>,
    /// Number of sends since the read.
    pub sends: u64,
    /// A send held by Nagle: ending in a sub-MSS segment, after a send with a sub-MSS tail.
    nagle_can_hold: bool,
    /// Some send went out with TCP_NODELAY or TCP_CORK on, so Nagle did not decide.
    nagle_off_or_corked: bool,
    /// Bytes of the previous send, for the tail test.
    last_size: u64,
}

impl WritesSinceRead {
    /// Adds one send of `bytes` with the socket's MSS and options at that moment. Its last
    /// segment waits when it is partial and the send before it left a partial one unacknowledged
    /// (`tcp_nagle_check` → `tcp_minshall_check`); full segments before it go out.
    pub fn push(&mut self, bytes: u64, mss: u64, nodelay: bool, cork: bool) {
        if self.sends > 0
            && tcp_rules::is_sub_mss(bytes, mss)
            && tcp_rules::is_sub_mss(self.last_size, mss)
        {
            self.nagle_can_hold = true;
        }
        if nodelay || cork {
            self.nagle_off_or_corked = true;
        }
        if self.sizes.len() < EXAMPLE_SENDS {
            self.sizes.push(bytes);
        }
        self.sends += 1;
        self.last_size = bytes;
    }

    /// Adds bytes to the last send: a send with MSG_MORE and the one after it form one segment.
    pub fn extend_last(&mut self, bytes: u64) {
        if let Some(last) = self.sizes.last_mut() {
            *last += bytes;
        }
        self.last_size += bytes;
    }

    /// True when these sends, followed by a wait, are a write-write-read.
    pub fn is_write_write_read(&self) -> bool {
        self.sends >= 2 && self.nagle_can_hold && !self.nagle_off_or_corked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes(sizes: &[u64], mss: u64) -> WritesSinceRead {
        let mut b = WritesSinceRead::default();
        for &s in sizes {
            b.push(s, mss, false, false);
        }
        b
    }

    #[test]
    fn small_after_small_is_held() {
        assert!(writes(&[120, 11], 1448).is_write_write_read());
        assert!(!writes(&[120], 1448).is_write_write_read());
    }

    #[test]
    fn full_segment_then_small_is_not_held() {
        // 988 B then 100 B with MSS 988: the first send leaves no sub-MSS tail.
        assert!(!writes(&[988, 100], 988).is_write_write_read());
        assert!(writes(&[900, 100], 988).is_write_write_read());
        // A send of several segments ending in a partial one has its tail held.
        assert!(writes(&[100, 2500], 988).is_write_write_read());
        assert!(!writes(&[100, 1976], 988).is_write_write_read());
    }

    #[test]
    fn nodelay_or_cork_is_not_nagle() {
        let mut b = WritesSinceRead::default();
        b.push(10, 1448, true, false);
        b.push(10, 1448, true, false);
        assert!(!b.is_write_write_read());
    }

    #[test]
    fn msg_more_merges_into_one_send() {
        let mut b = WritesSinceRead::default();
        b.push(10, 1448, false, false);
        b.extend_last(20);
        assert_eq!(b.sizes, vec![30]);
        assert!(!b.is_write_write_read());
    }
}
