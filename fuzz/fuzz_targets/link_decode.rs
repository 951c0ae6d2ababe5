//! Arbitrary bytes as one captured frame of each link type: decoding must never panic, and
//! a decoded segment must stay within what its IP header announced.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpstall::decode::link::LinkType;
use tcpstall::decode::{Decoded, PacketMeta};

/// Past the highest `LINKTYPE_*` number the decoder accepts: every one is reached.
const CODES: u16 = 300;

fuzz_target!(|data: &[u8]| {
    let Some((selector, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let selector = u16::from_le_bytes(*selector);
    let Some(link) = LinkType::from_code(u32::from(selector % CODES)) else {
        return;
    };
    // The wire length is sometimes the captured length, sometimes larger (snap length cut).
    let orig_len = rest.len() as u32 + u32::from(selector / CODES) * 1000;
    let meta = PacketMeta {
        ts_ns: 1,
        packet_number: 1,
    };
    if let Decoded::Tcp(segment) = link.decode(rest, orig_len, meta) {
        assert!(segment.payload_len <= 0x00ff_ffff + orig_len);
    }
});
