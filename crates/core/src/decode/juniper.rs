//! The pseudo-header Juniper routers put before the frames they capture.

use super::Decoded;

/// Where a Juniper pseudo-header leaves the frame.
pub(super) enum Juniper {
    /// The frame's own link header follows at this offset.
    Frame(usize),
    /// The router stripped the link header: IP follows at this offset.
    NoL2(usize),
}

/// The Juniper pseudo-header's length, as tcpdump's `juniper_parse_header` reads it: the
/// magic "MGC", a flags byte, and when the extension flag is set a 2-byte length of TLV
/// extensions to skip. With the no-L2 flag, 4 more bytes precede the IP header. Of the link
/// types decoded here only PPPoE's is in tcpdump's cookie table (`with_cookie`), with a base
/// cookie of 0 bytes: 2 when the next byte is the LS cookie id (0x54), 8 for the AS one (0x47).
pub(super) fn juniper_header_len(frame: &[u8], with_cookie: bool) -> Result<Juniper, Decoded<()>> {
    const LS_COOKIE_ID: u8 = 0x54;
    const AS_COOKIE_ID: u8 = 0x47;
    const EXTENSIONS: u8 = 0x80;
    const NO_L2: u8 = 0x02;
    let Some(fixed) = frame.get(..4) else {
        return Err(Decoded::Undecodable("Juniper pseudo-header cut short"));
    };
    if fixed[..3] != *b"MGC" {
        return Err(Decoded::Undecodable(
            "Juniper pseudo-header without its magic number",
        ));
    }
    let flags = fixed[3];
    let mut len = 4;
    if flags & EXTENSIONS != 0 {
        let Some(ext) = frame.get(4..6) else {
            return Err(Decoded::Undecodable("Juniper extension length cut short"));
        };
        len += 2 + usize::from(u16::from_be_bytes([ext[0], ext[1]]));
    }
    if flags & NO_L2 != 0 {
        return Ok(Juniper::NoL2(len + 4));
    }
    if with_cookie {
        len += match frame.get(len) {
            Some(&LS_COOKIE_ID) => 2,
            Some(&AS_COOKIE_ID) => 8,
            _ => 0,
        };
    }
    Ok(Juniper::Frame(len))
}
