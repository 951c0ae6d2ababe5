//! Arbitrary bytes as one captured frame of each link type: decoding must never panic, and
//! a decoded segment must stay within what its IP header announced.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpstall::decode::link::LinkType;
use tcpstall::decode::{Decoded, PacketMeta};

/// Every `LINKTYPE_*` number the decoder accepts.
const CODES: [u32; 22] = [
    0, 1, 7, 9, 12, 14, 50, 51, 101, 104, 108, 113, 129, 167, 178, 179, 183, 226, 228, 229, 242,
    276,
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Some(link) = LinkType::from_code(CODES[usize::from(selector) % CODES.len()]) else {
        return;
    };
    // The wire length is sometimes the captured length, sometimes larger (snap length cut).
    let orig_len = rest.len() as u32 + u32::from(selector / 16) * 1000;
    let meta = PacketMeta {
        ts_ns: 1,
        packet_number: 1,
    };
    if let Decoded::Tcp(segment) = link.decode(rest, orig_len, meta) {
        assert!(segment.payload_len <= 0x00ff_ffff + orig_len);
    }
});
