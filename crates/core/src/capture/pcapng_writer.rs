//! Copies a pcap or pcapng stream to pcapng, adding a comment (`opt_comment`, option 1 of
//! draft-ietf-opsawg-pcapng §3.5) to chosen packets; what Wireshark shows as `frame.comment`
//! and in its Expert Info.
//!
//! Nothing else changes. A pcapng section is copied block by block in its own byte order; a
//! commented Enhanced (or obsolete) Packet Block is the same block with the comment added to
//! its options. A pcap file becomes one section with one interface of the file's link type and
//! snap length, its timestamps in the file's units (`if_tsresol` 9 for nanosecond files), each
//! record an Enhanced Packet Block with the record's bytes. Packets are numbered as
//! [`super::file::FrameReader`] numbers them (tshark's `frame.number`), and damage that stops
//! that reader stops the copy at the same packet.

use std::io::{self, Read, Write};

use rustc_hash::FxHashMap;

// The formats' numbers, where the reader keeps them.
use super::file::{
    BLOCK_EPB, BLOCK_IDB, BLOCK_OBSOLETE_PACKET, BLOCK_SPB, LIBPCAP_MAX_SNAPLEN, MAX_RECORD_LEN,
    PCAPNG_BYTE_ORDER_MAGIC as BYTE_ORDER_MAGIC, PCAPNG_SHB as BLOCK_SHB, PCAP_MAGIC_MODIFIED,
    PCAP_MAGIC_NS, PCAP_MAGIC_US,
};

/// Options: end of options, comment, the section's writing application, timestamp resolution
/// (draft-ietf-opsawg-pcapng §3.5, §4.1, §4.2).
const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_USERAPPL: u16 = 4;
const IF_TSRESOL: u16 = 9;
/// Offset of the packet data in Enhanced and obsolete Packet Blocks.
const PACKET_DATA_AT: usize = 28;

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Packets written.
    pub packets: u64,
    /// Packets written with a comment.
    pub commented: u64,
    /// Packets asked a comment that their block cannot carry (Simple Packet Blocks have no
    /// options).
    pub uncommentable: u64,
    /// Why the copy stopped before the end of the input, when damage stopped it.
    pub stopped: Option<String>,
}

/// Why a stream cannot be copied at all.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Reading the input failed.
    #[error("cannot read the capture: {0}")]
    Read(io::Error),
    /// Writing the output failed.
    #[error("cannot write the annotated capture: {0}")]
    Write(io::Error),
    /// The input is not a pcap or pcapng stream.
    #[error("not a pcap or pcapng capture")]
    NotCapture,
}

/// Byte order of a section or file.
#[derive(Debug, Clone, Copy)]
enum Order {
    Little,
    Big,
}

impl Order {
    fn u32(self, b: &[u8], at: usize) -> u32 {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        match self {
            Order::Little => u32::from_le_bytes(v),
            Order::Big => u32::from_be_bytes(v),
        }
    }

    fn u16(self, b: &[u8], at: usize) -> u16 {
        let v = [b[at], b[at + 1]];
        match self {
            Order::Little => u16::from_le_bytes(v),
            Order::Big => u16::from_be_bytes(v),
        }
    }

    fn put_u32(self, out: &mut Vec<u8>, v: u32) {
        out.extend_from_slice(&match self {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        });
    }

    fn put_u16(self, out: &mut Vec<u8>, v: u16) {
        out.extend_from_slice(&match self {
            Order::Little => v.to_le_bytes(),
            Order::Big => v.to_be_bytes(),
        });
    }
}

/// `n` rounded up to a multiple of 4: blocks and options are padded to 32 bits.
fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Copies the capture `input` (pcap or pcapng, uncompressed) to `out` as pcapng, adding the
/// comments of `comments` (packet number, 1-based, to its comments) to their packets;
/// `application` names the writer in the section header of a converted pcap file.
pub fn copy_with_comments<R: Read, W: Write>(
    mut input: R,
    out: &mut W,
    comments: &FxHashMap<u64, Vec<String>>,
    application: &str,
) -> Result<CopyStats, CopyError> {
    let mut head = [0u8; 4];
    if read_full(&mut input, &mut head).map_err(CopyError::Read)? < 4 {
        return Err(CopyError::NotCapture);
    }
    let magic = u32::from_le_bytes(head);
    let mut copy = Copy {
        out,
        comments,
        stats: CopyStats::default(),
        block: Vec::new(),
    };
    if magic == BLOCK_SHB {
        copy.pcapng(head, &mut input)?;
    } else if [PCAP_MAGIC_US, PCAP_MAGIC_NS, PCAP_MAGIC_MODIFIED]
        .iter()
        .any(|&m| m == magic || m.swap_bytes() == magic)
    {
        copy.pcap(head, &mut input, application)?;
    } else {
        return Err(CopyError::NotCapture);
    }
    Ok(copy.stats)
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

struct Copy<'a, W> {
    out: &'a mut W,
    comments: &'a FxHashMap<u64, Vec<String>>,
    stats: CopyStats,
    /// The block being built or copied, reused.
    block: Vec<u8>,
}

impl<'a, W: Write> Copy<'a, W> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), CopyError> {
        self.out.write_all(bytes).map_err(CopyError::Write)
    }

    fn stop(&mut self, why: String) {
        self.stats.stopped = Some(why);
    }

    /// The comments of the next packet, counting it.
    fn next_packet(&mut self) -> Option<&'a [String]> {
        self.stats.packets += 1;
        let comments: &'a FxHashMap<u64, Vec<String>> = self.comments;
        comments
            .get(&self.stats.packets)
            .map(Vec::as_slice)
            .filter(|c| !c.is_empty())
    }

    /// A pcap file: its header becomes a section and an interface, each record a packet block.
    fn pcap(&mut self, head: [u8; 4], input: &mut impl Read, app: &str) -> Result<(), CopyError> {
        let mut header = [0u8; 24];
        header[..4].copy_from_slice(&head);
        if read_full(input, &mut header[4..]).map_err(CopyError::Read)? < 20 {
            return Err(CopyError::NotCapture);
        }
        let magic = u32::from_le_bytes(head);
        let order = if [PCAP_MAGIC_US, PCAP_MAGIC_NS, PCAP_MAGIC_MODIFIED].contains(&magic) {
            Order::Little
        } else {
            Order::Big
        };
        let magic = order.u32(&header, 0);
        let nanoseconds = magic == PCAP_MAGIC_NS;
        let record_header_len = if magic == PCAP_MAGIC_MODIFIED { 24 } else { 16 };
        let snaplen = order.u32(&header, 16);
        // The upper 16 bits carry FCS flags (libpcap `LT_LINKTYPE`), not the link type.
        let link = (order.u32(&header, 20) & 0xffff) as u16;
        let max_caplen = (snaplen as usize).clamp(LIBPCAP_MAX_SNAPLEN, MAX_RECORD_LEN);

        let out = Order::Little;
        let mut options = Vec::new();
        push_option(&mut options, out, SHB_USERAPPL, app.as_bytes());
        let mut body = Vec::new();
        out.put_u32(&mut body, BYTE_ORDER_MAGIC);
        out.put_u16(&mut body, 1);
        out.put_u16(&mut body, 0);
        // Section length not given (-1).
        body.extend_from_slice(&u64::MAX.to_le_bytes());
        body.extend_from_slice(&options);
        end_options(&mut body, out);
        self.write_block(out, BLOCK_SHB, &body)?;

        body.clear();
        out.put_u16(&mut body, link);
        out.put_u16(&mut body, 0);
        out.put_u32(&mut body, snaplen);
        if nanoseconds {
            push_option(&mut body, out, IF_TSRESOL, &[9]);
            end_options(&mut body, out);
        }
        self.write_block(out, BLOCK_IDB, &body)?;

        let units_per_second: u64 = if nanoseconds {
            1_000_000_000
        } else {
            1_000_000
        };
        let mut record = vec![0u8; record_header_len];
        let mut data = Vec::new();
        loop {
            let number = self.stats.packets + 1;
            let got = read_full(input, &mut record).map_err(CopyError::Read)?;
            if got == 0 {
                return Ok(());
            }
            if got < record_header_len {
                self.stop(format!(
                    "the file ends {got} bytes into packet {number}'s record header"
                ));
                return Ok(());
            }
            let caplen = order.u32(&record, 8) as usize;
            if caplen > max_caplen {
                self.stop(format!(
                    "packet {number}'s record header says {caplen} bytes captured, beyond any \
                     snap length"
                ));
                return Ok(());
            }
            data.resize(caplen, 0);
            let got = read_full(input, &mut data).map_err(CopyError::Read)?;
            if got < caplen {
                self.stop(format!(
                    "packet {number}'s record says {caplen} bytes but the file ends after {got}"
                ));
                return Ok(());
            }
            let ts = u64::from(order.u32(&record, 0)) * units_per_second
                + u64::from(order.u32(&record, 4));
            let orig_len = order.u32(&record, 12);
            let comments = self.next_packet();
            body.clear();
            out.put_u32(&mut body, 0);
            out.put_u32(&mut body, (ts >> 32) as u32);
            out.put_u32(&mut body, ts as u32);
            out.put_u32(&mut body, caplen as u32);
            out.put_u32(&mut body, orig_len);
            body.extend_from_slice(&data);
            body.resize(pad4(body.len()), 0);
            if let Some(comments) = comments {
                for c in comments {
                    push_option(&mut body, out, OPT_COMMENT, comment_bytes(c));
                }
                end_options(&mut body, out);
                self.stats.commented += 1;
            }
            self.write_block(out, BLOCK_EPB, &body)?;
        }
    }

    /// Writes a block of `block_type` around `body` (padded to 32 bits already).
    fn write_block(&mut self, order: Order, block_type: u32, body: &[u8]) -> Result<(), CopyError> {
        let len = (12 + body.len()) as u32;
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        order.put_u32(&mut block, block_type);
        order.put_u32(&mut block, len);
        block.extend_from_slice(body);
        order.put_u32(&mut block, len);
        let written = self.write(&block);
        self.block = block;
        written
    }

    /// A pcapng stream: every block copied, packet blocks with a comment rebuilt with it.
    fn pcapng(&mut self, head: [u8; 4], input: &mut impl Read) -> Result<(), CopyError> {
        let mut block = std::mem::take(&mut self.block);
        let mut order = Order::Little;
        let mut first = Some(head);
        loop {
            let mut header = [0u8; 12];
            let got = match first.take() {
                Some(head) => {
                    header[..4].copy_from_slice(&head);
                    4 + read_full(input, &mut header[4..]).map_err(CopyError::Read)?
                }
                None => read_full(input, &mut header).map_err(CopyError::Read)?,
            };
            if got == 0 {
                break;
            }
            if got < 12 {
                self.stop(format!(
                    "the file ends {got} bytes into a pcapng block header"
                ));
                break;
            }
            let block_type = order.u32(&header, 0);
            if u32::from_le_bytes([header[0], header[1], header[2], header[3]]) == BLOCK_SHB {
                order = match u32::from_le_bytes([header[8], header[9], header[10], header[11]]) {
                    BYTE_ORDER_MAGIC => Order::Little,
                    m if m == BYTE_ORDER_MAGIC.swap_bytes() => Order::Big,
                    _ => {
                        self.stop("a section header with an invalid byte-order magic".into());
                        break;
                    }
                };
            }
            let len = order.u32(&header, 4) as usize;
            if len < 12 || len % 4 != 0 || len > MAX_RECORD_LEN {
                self.stop(format!("a pcapng block of absurd length {len}"));
                break;
            }
            block.clear();
            block.extend_from_slice(&header);
            block.resize(len, 0);
            let got = read_full(input, &mut block[12..]).map_err(CopyError::Read)?;
            if got < len - 12 {
                self.stop(format!(
                    "a pcapng block says {len} bytes but the file ends after {}",
                    got + 12
                ));
                break;
            }
            if order.u32(&block, len - 4) as usize != len {
                self.stop("a pcapng block whose trailing length differs from its leading".into());
                break;
            }
            let comments = match block_type {
                BLOCK_EPB | BLOCK_OBSOLETE_PACKET | BLOCK_SPB => self.next_packet(),
                _ => None,
            };
            let rebuilt = match comments {
                Some(comments) if block_type != BLOCK_SPB => with_comments(&block, order, comments),
                Some(_) => {
                    self.stats.uncommentable += 1;
                    None
                }
                None => None,
            };
            match rebuilt {
                Some(rebuilt) => {
                    self.stats.commented += 1;
                    self.write(&rebuilt)?;
                }
                None => self.write(&block)?,
            }
        }
        self.block = block;
        Ok(())
    }
}

/// An Enhanced or obsolete Packet Block with `comments` added to its options, in the section's
/// byte order; `None` when its captured length does not fit the block (a damaged packet the
/// reader skipped: copied as it is).
fn with_comments(block: &[u8], order: Order, comments: &[String]) -> Option<Vec<u8>> {
    let end = block.len() - 4;
    if block.len() < PACKET_DATA_AT + 4 {
        return None;
    }
    let caplen = order.u32(block, 20) as usize;
    let options_at = PACKET_DATA_AT.checked_add(pad4(caplen))?;
    if options_at > end {
        return None;
    }
    // The options kept: up to the end-of-options marker, or to the first one that overruns.
    let mut at = options_at;
    while at + 4 <= end {
        let code = order.u16(block, at);
        let len = usize::from(order.u16(block, at + 2));
        let next = at + 4 + pad4(len);
        if code == OPT_END || next > end {
            break;
        }
        at = next;
    }
    let mut rebuilt = Vec::with_capacity(block.len() + 64);
    rebuilt.extend_from_slice(&block[..at]);
    for c in comments {
        push_option(&mut rebuilt, order, OPT_COMMENT, comment_bytes(c));
    }
    end_options(&mut rebuilt, order);
    let len = (rebuilt.len() + 4) as u32;
    order.put_u32(&mut rebuilt, len);
    let mut len_field = Vec::with_capacity(4);
    order.put_u32(&mut len_field, len);
    rebuilt[4..8].copy_from_slice(&len_field);
    Some(rebuilt)
}

/// A comment's UTF-8 bytes, cut to what an option's 16-bit length holds (at a character
/// boundary).
fn comment_bytes(comment: &str) -> &[u8] {
    let mut cut = comment.len().min(usize::from(u16::MAX));
    while !comment.is_char_boundary(cut) {
        cut -= 1;
    }
    &comment.as_bytes()[..cut]
}

/// Appends an option (code, length, value padded to 32 bits).
fn push_option(out: &mut Vec<u8>, order: Order, code: u16, value: &[u8]) {
    order.put_u16(out, code);
    order.put_u16(out, value.len() as u16);
    out.extend_from_slice(value);
    out.resize(pad4(out.len()), 0);
}

/// Appends the end-of-options marker.
fn end_options(out: &mut Vec<u8>, order: Order) {
    order.put_u16(out, OPT_END);
    order.put_u16(out, 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::file::FrameReader;

    /// A little pcap file: two records, the given magic, written in `order`.
    fn pcap(magic: u32, big: bool) -> Vec<u8> {
        let put = |out: &mut Vec<u8>, v: u32| {
            out.extend_from_slice(&if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            })
        };
        let mut f = Vec::new();
        put(&mut f, magic);
        f.extend_from_slice(&if big { [0, 2, 0, 4] } else { [2, 0, 4, 0] });
        put(&mut f, 0);
        put(&mut f, 0);
        put(&mut f, 65535);
        put(&mut f, 101); // LINKTYPE_RAW
        for (sec, frac, data) in [(7u32, 999_999u32, &[0x45u8, 0, 0][..]), (8, 1, &[0x60; 5])] {
            put(&mut f, sec);
            put(&mut f, frac);
            put(&mut f, data.len() as u32);
            put(&mut f, 1500);
            f.extend_from_slice(data);
        }
        f
    }

    fn frames(capture: &[u8]) -> Vec<(u64, u64, Vec<u8>, u32)> {
        let mut reader = FrameReader::new(capture).expect("the copy is a capture");
        let mut frames = Vec::new();
        while let Some(f) = reader.next_frame(&mut |w| panic!("warning {w:?}")).unwrap() {
            frames.push((f.packet_number, f.ts_ns, f.data.to_vec(), f.orig_len));
        }
        frames
    }

    fn copied(input: &[u8], comments: &[(u64, &str)]) -> (Vec<u8>, CopyStats) {
        let mut map: FxHashMap<u64, Vec<String>> = FxHashMap::default();
        for (n, c) in comments {
            map.entry(*n).or_default().push(c.to_string());
        }
        let mut out = Vec::new();
        let stats = copy_with_comments(input, &mut out, &map, "test").unwrap();
        (out, stats)
    }

    #[test]
    fn pcap_records_keep_their_bytes_and_times_in_both_orders() {
        for (magic, big) in [
            (PCAP_MAGIC_US, false),
            (PCAP_MAGIC_US, true),
            (PCAP_MAGIC_NS, false),
            (PCAP_MAGIC_NS, true),
        ] {
            let input = pcap(magic, big);
            let (out, stats) = copied(&input, &[(2, "held 40 ms")]);
            assert_eq!(stats.packets, 2);
            assert_eq!(stats.commented, 1);
            assert_eq!(stats.stopped, None);
            assert_eq!(&out[..4], &BLOCK_SHB.to_le_bytes());
            assert_eq!(frames(&out), frames(&input), "magic {magic:#x}, big {big}");
            let comment = b"held 40 ms";
            assert!(out.windows(comment.len()).any(|w| w == comment));
        }
    }

    #[test]
    fn pcapng_blocks_are_copied_and_comments_added_in_the_section_order() {
        for big in [false, true] {
            // pcap → pcapng, then the pcapng copied again with more comments: the first
            // comment stays, the second is added after it.
            let (once, _) = copied(&pcap(PCAP_MAGIC_NS, big), &[(1, "first")]);
            let (twice, stats) = copied(&once, &[(1, "second"), (2, "third")]);
            assert_eq!(stats.commented, 2);
            assert_eq!(frames(&twice), frames(&once));
            let text = String::from_utf8_lossy(&twice);
            let (first, second) = (text.find("first"), text.find("second"));
            assert!(first.is_some() && first < second, "{text:?}");
            // Uncommented, the copy is the input byte for byte.
            let (same, _) = copied(&once, &[]);
            assert_eq!(same, once);
        }
    }

    #[test]
    fn a_truncated_record_stops_the_copy_after_the_packets_before_it() {
        let mut input = pcap(PCAP_MAGIC_US, false);
        input.truncate(input.len() - 2);
        let (out, stats) = copied(&input, &[]);
        assert_eq!(stats.packets, 1);
        assert!(stats.stopped.is_some());
        assert_eq!(frames(&out).len(), 1);
    }

    #[test]
    fn anything_else_is_refused() {
        let mut out = Vec::new();
        let map = FxHashMap::default();
        let err = copy_with_comments(&b"hello world, not a capture"[..], &mut out, &map, "t");
        assert!(matches!(err, Err(CopyError::NotCapture)));
    }
}
