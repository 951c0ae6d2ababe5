//! Framing of pcap and pcapng streams: one captured frame at a time, from a bounded buffer.
//!
//! The file and block headers with options (pcapng section and interface descriptions) are
//! parsed with `pcap-parser`; the fixed-size per-packet record headers are read directly, so
//! that a record's length can be checked before it is buffered and no packet allocates.

use std::io::{self, Read};

use pcap_parser::{
    parse_interfacedescriptionblock_be, parse_interfacedescriptionblock_le, parse_pcap_header,
    parse_sectionheaderblock,
};

use super::{CaptureError, CaptureWarning, WarningBudget};
use crate::decode::link::{link_type_name, LinkType};

/// Read size and initial buffer size: large reads keep the per-packet cost low.
const BUFFER_SIZE: usize = 1 << 18;
/// Largest record or block accepted. Far beyond any real snap length (libpcap caps it at
/// 262144, Linux BIG TCP packets stay under 512 KiB), small enough to buffer.
pub const MAX_RECORD_LEN: usize = 16 << 20;

/// pcapng interface descriptions kept per section: far more than any capture tool writes,
/// and a bound on the memory a file of nothing but interface blocks can take (~3 MB).
pub const MAX_INTERFACES: usize = 1 << 16;
/// Largest captured length libpcap accepts whatever the file's snap length says
/// (`MAXIMUM_SNAPLEN` in libpcap's `pcap-int.h`): a record may exceed the file's snap length
/// (some writers set it wrong) but not this.
pub const LIBPCAP_MAX_SNAPLEN: usize = 262_144;

/// Pcap magic numbers as read little-endian (libpcap `sf-pcap.c`).
pub(crate) const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;
pub(crate) const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Kuznetsov's patched pcap, with 8 more bytes per record header.
pub(crate) const PCAP_MAGIC_MODIFIED: u32 = 0xa1b2_cd34;
/// pcapng section header block type, the same in both byte orders.
pub(crate) const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
/// pcapng byte-order magic, as written by the section's writer.
pub(crate) const PCAPNG_BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// pcapng block types (draft-ietf-opsawg-pcapng §4).
pub(crate) const BLOCK_IDB: u32 = 1;
pub(crate) const BLOCK_OBSOLETE_PACKET: u32 = 2;
pub(crate) const BLOCK_SPB: u32 = 3;
const BLOCK_NRB: u32 = 4;
const BLOCK_ISB: u32 = 5;
pub(crate) const BLOCK_EPB: u32 = 6;
const BLOCK_SYSTEMD_JOURNAL: u32 = 9;
const BLOCK_DECRYPTION_SECRETS: u32 = 10;
const BLOCK_PROCESS_INFO: u32 = 0x8000_0001;
const BLOCK_CUSTOM: u32 = 0x0000_0bad;
const BLOCK_CUSTOM_NO_COPY: u32 = 0x4000_0bad;

/// One captured frame, borrowed from the reader's buffer until the next call.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// 1-based number of the packet in the capture (what tshark calls `frame.number`).
    pub packet_number: u64,
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The frame's link layer, or the unsupported `LINKTYPE_*` number of its interface.
    pub link: Result<LinkType, u32>,
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// The captured bytes (at most the snap length).
    pub data: &'a [u8],
}

/// Byte order of multi-byte fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    #[inline]
    fn u32_at(self, bytes: &[u8], at: usize) -> u32 {
        let b = [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]];
        match self {
            ByteOrder::Little => u32::from_le_bytes(b),
            ByteOrder::Big => u32::from_be_bytes(b),
        }
    }

    fn u16_at(self, bytes: &[u8], at: usize) -> u16 {
        let b = [bytes[at], bytes[at + 1]];
        match self {
            ByteOrder::Little => u16::from_le_bytes(b),
            ByteOrder::Big => u16::from_be_bytes(b),
        }
    }
}

/// How to turn a file's timestamp units into nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TsScale {
    /// Units are 10^-k s with k <= 9: multiply.
    Multiply(u64),
    /// Units are 10^-k s with k > 9: divide.
    Divide(u64),
    /// Units are 2^-k s.
    BinaryShift(u32),
}

impl TsScale {
    /// From a pcapng `if_tsresol` byte: high bit set means a power of two, else of ten.
    fn from_if_tsresol(tsresol: u8) -> Option<TsScale> {
        let exponent = u32::from(tsresol & 0x7f);
        if tsresol & 0x80 != 0 {
            (exponent < 64).then_some(TsScale::BinaryShift(exponent))
        } else if exponent <= 9 {
            Some(TsScale::Multiply(10u64.pow(9 - exponent)))
        } else if exponent <= 19 {
            Some(TsScale::Divide(10u64.pow(exponent - 9)))
        } else {
            None
        }
    }

    fn to_ns(self, units: u64) -> u64 {
        match self {
            TsScale::Multiply(m) => units.saturating_mul(m),
            TsScale::Divide(d) => units / d,
            TsScale::BinaryShift(k) => {
                u64::try_from((u128::from(units) * 1_000_000_000) >> k).unwrap_or(u64::MAX)
            }
        }
    }
}

/// An interface of a pcapng section.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: Result<LinkType, u32>,
    scale: TsScale,
    /// `if_tsoffset`: seconds to add to every timestamp.
    offset_ns: i128,
}

/// The container format, detected from the first bytes.
#[derive(Debug)]
enum Format {
    Pcap {
        order: ByteOrder,
        nanoseconds: bool,
        record_header_len: usize,
        link: Result<LinkType, u32>,
        /// Largest captured length taken as real: the file's snap length, at least libpcap's
        /// [`LIBPCAP_MAX_SNAPLEN`], at most [`MAX_RECORD_LEN`].
        max_caplen: usize,
        /// The snap length of the file header, for messages.
        snaplen: u32,
    },
    PcapNg {
        order: ByteOrder,
        interfaces: Vec<Interface>,
        /// Interface descriptions came past [`MAX_INTERFACES`] and were not kept.
        interfaces_dropped: bool,
    },
}

/// A contiguous window over the input: records are parsed in place, the buffer is refilled
/// by large reads and grows only for a record larger than itself (up to [`MAX_RECORD_LEN`]).
struct InputBuffer<R> {
    input: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    at_eof: bool,
    /// Bytes consumed before `start`, for offsets in messages.
    consumed: u64,
    /// Where a damaged compressed stream ended the data, in words.
    cut: Option<String>,
}

impl<R: Read> InputBuffer<R> {
    fn new(input: R) -> Self {
        InputBuffer {
            input,
            buf: vec![0; BUFFER_SIZE],
            start: 0,
            end: 0,
            at_eof: false,
            consumed: 0,
            cut: None,
        }
    }

    fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn available(&self) -> usize {
        self.end - self.start
    }

    fn consume(&mut self, n: usize) {
        let n = n.min(self.available());
        self.start += n;
        self.consumed += n as u64;
    }

    /// Reads until `n` bytes are buffered; false when the input ends first.
    #[inline]
    fn fill(&mut self, n: usize) -> Result<bool, CaptureError> {
        if self.available() >= n {
            return Ok(true);
        }
        self.refill(n)
    }

    /// The slow path of [`InputBuffer::fill`]: moves what is left to the front and reads.
    #[inline(never)]
    fn refill(&mut self, n: usize) -> Result<bool, CaptureError> {
        if self.start + n > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if n > self.buf.len() {
                self.buf.resize(n, 0);
            }
        }
        while self.available() < n && !self.at_eof {
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => self.at_eof = true,
                Ok(read) => self.end += read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A damaged compressed stream: its data ends here, as a cut file's does.
                Err(e) if super::compressed::is_cut(&e) => {
                    self.at_eof = true;
                    self.cut = Some(e.to_string());
                }
                Err(error) => return Err(CaptureError::Read { error }),
            }
        }
        Ok(self.available() >= n)
    }
}

/// What damage that ends the reading means for the packets before it, in warnings.
const READ_BEFORE: &str = "the packets before it are read";
/// The same, for damage that leaves the rest of the file unreadable.
const DAMAGED: &str = "the file is damaged from here on";

/// Reads frames one at a time from a pcap or pcapng stream.
pub struct FrameReader<R> {
    input: InputBuffer<R>,
    format: Format,
    /// Bytes of the frame returned last, consumed at the next call.
    pending: usize,
    packets: u64,
    skipped: u64,
    last_ts_ns: u64,
    backwards_warnings: WarningBudget,
    unusable_warnings: WarningBudget,
    done: bool,
    /// Damage met before any packet could be read: nothing in the file is usable, so it is
    /// an error rather than a warning.
    fatal: Option<String>,
}

impl<R: Read> FrameReader<R> {
    /// Detects the format from the magic number and reads the file header.
    pub fn new(input: R) -> Result<Self, CaptureError> {
        let mut input = InputBuffer::new(input);
        input.fill(24)?;
        let head = input.data();
        if head.is_empty() {
            return Err(CaptureError::Empty);
        }
        if head.len() < 4 {
            return Err(CaptureError::NotCapture {
                first_bytes: hex_prefix(head),
            });
        }
        let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let format = if magic == PCAPNG_SHB {
            check_first_section_header(&mut input)?;
            // The section header itself is read as the first block.
            Format::PcapNg {
                order: ByteOrder::Little,
                interfaces: Vec::new(),
                interfaces_dropped: false,
            }
        } else if [PCAP_MAGIC_US, PCAP_MAGIC_NS]
            .iter()
            .any(|&m| m == magic || m.swap_bytes() == magic)
            || magic == PCAP_MAGIC_MODIFIED
        {
            if head.len() < 24 {
                return Err(CaptureError::Truncated {
                    what: "the pcap file header".to_string(),
                    expected: 24,
                    found: head.len() as u64,
                });
            }
            let header = match parse_pcap_header(head) {
                Ok((_, header)) => header,
                Err(_) => {
                    return Err(CaptureError::NotCapture {
                        first_bytes: hex_prefix(head),
                    })
                }
            };
            // The upper 16 bits may carry FCS flags (libpcap `LT_LINKTYPE`); trailing FCS
            // bytes are harmless here since lengths come from the IP header.
            let code = header.network.0 as u32 & 0xffff;
            let link = LinkType::from_code(code).ok_or(code);
            if let Err(code) = link {
                return Err(CaptureError::UnsupportedLinkType {
                    code,
                    name: link_type_name(code),
                });
            }
            let format = Format::Pcap {
                order: if header.is_bigendian() {
                    ByteOrder::Big
                } else {
                    ByteOrder::Little
                },
                nanoseconds: header.is_nanosecond_precision(),
                record_header_len: if header.is_modified_format() { 24 } else { 16 },
                link,
                max_caplen: (header.snaplen as usize).clamp(LIBPCAP_MAX_SNAPLEN, MAX_RECORD_LEN),
                snaplen: header.snaplen,
            };
            input.consume(24);
            format
        } else {
            return Err(CaptureError::NotCapture {
                first_bytes: hex_prefix(head),
            });
        };
        Ok(FrameReader {
            input,
            format,
            pending: 0,
            packets: 0,
            skipped: 0,
            last_ts_ns: 0,
            backwards_warnings: WarningBudget::new("timestamps going backwards"),
            unusable_warnings: WarningBudget::new("unusable packet blocks"),
            done: false,
            fatal: None,
        })
    }

    /// Packets counted but not handed out (unusable pcapng packet blocks, with a warning).
    pub fn skipped_packets(&self) -> u64 {
        self.skipped
    }

    /// Packet records read so far, skipped ones included.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Bytes read from the input so far.
    pub fn bytes_read(&self) -> u64 {
        self.input.consumed + self.pending as u64
    }

    /// The next frame, `None` at the end of the capture. Damage that stops the reading
    /// (a truncated record, an absurd length) is reported through `on_warning` and ends the
    /// capture; only I/O errors are returned as errors.
    pub fn next_frame(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
    ) -> Result<Option<Frame<'_>>, CaptureError> {
        self.input.consume(std::mem::take(&mut self.pending));
        if self.done {
            return Ok(None);
        }
        let found = match self.format {
            Format::Pcap { .. } => self.next_pcap_record(on_warning)?,
            Format::PcapNg { .. } => self.next_pcapng_packet(on_warning)?,
        };
        let Some(found) = found else {
            self.done = true;
            if let Some(cut) = self.input.cut.take() {
                match self.packets == self.skipped {
                    true => {
                        self.fatal.get_or_insert(cut);
                    }
                    false => on_warning(&CaptureWarning {
                        packet_number: self.packets + 1,
                        message: format!("truncated capture: {cut}; {READ_BEFORE}"),
                    }),
                }
            }
            if let Some(reason) = self.fatal.take() {
                return Err(CaptureError::NothingReadable { reason });
            }
            return Ok(None);
        };
        self.packets += 1;
        if found.ts_ns < self.last_ts_ns {
            // Which of the two is wrong cannot be told from two packets: a clock stepped back
            // at this one, or the previous one stamped ahead. Say it neutrally.
            let back_ns = self.last_ts_ns - found.ts_ns;
            let previous = self.packets - 1;
            self.backwards_warnings
                .report(on_warning, self.packets, || {
                    let split = if back_ns >= crate::flow::IDLE_TIMEOUT.as_nanos() {
                        "; a flow that seems silent that long around it is taken as ended and \
                         may show up as two"
                    } else {
                        ""
                    };
                    format!(
                        "{} earlier than packet {previous} (timestamps go backwards here, or \
                         packet {previous}'s is ahead){split}",
                        duration(back_ns)
                    )
                });
        }
        self.last_ts_ns = found.ts_ns;
        self.pending = found.record_len;
        let data = &self.input.data()[found.data_start..found.data_start + found.caplen];
        Ok(Some(Frame {
            packet_number: self.packets,
            ts_ns: found.ts_ns,
            link: found.link,
            orig_len: found.orig_len,
            data,
        }))
    }

    /// Stops the reading with a warning about damage at the next packet, or, when no packet
    /// has been read yet, with an error: a file whose first packet is damaged holds nothing to
    /// analyse. `message` says what is wrong; `after` what it means for the packets before it.
    fn stop(&mut self, on_warning: &mut impl FnMut(&CaptureWarning), message: String, after: &str) {
        if self.packets == self.skipped {
            self.fatal = Some(message);
        } else {
            on_warning(&CaptureWarning {
                packet_number: self.packets + 1,
                message: format!("{message}; {after}"),
            });
        }
        self.done = true;
    }

    fn next_pcap_record(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
    ) -> Result<Option<FoundFrame>, CaptureError> {
        let Format::Pcap {
            order,
            nanoseconds,
            record_header_len,
            link,
            max_caplen,
            snaplen,
        } = self.format
        else {
            return Ok(None);
        };
        let number = self.packets + 1;
        if !self.input.fill(record_header_len)? {
            let left = self.input.available();
            if left > 0 {
                self.stop(
                    on_warning,
                    format!(
                        "truncated capture: the file ends {left} bytes into packet {number}'s \
                         {record_header_len}-byte record header"
                    ),
                    READ_BEFORE,
                );
            }
            return Ok(None);
        }
        // The fixed 16 bytes every record header starts with: one bounds check for all fields.
        let head = &self.input.data()[..16];
        let ts_sec = order.u32_at(head, 0);
        let ts_frac = order.u32_at(head, 4);
        let caplen = order.u32_at(head, 8) as usize;
        let orig_len = order.u32_at(head, 12);
        if caplen > max_caplen {
            self.stop(
                on_warning,
                format!(
                    "absurd record length: packet {number}'s record header says {caplen} bytes \
                     captured, beyond the file's snap length ({snaplen}) and libpcap's limit \
                     ({LIBPCAP_MAX_SNAPLEN})"
                ),
                DAMAGED,
            );
            return Ok(None);
        }
        let record_len = record_header_len + caplen;
        if !self.input.fill(record_len)? {
            let found = self.input.available() - record_header_len;
            self.stop(
                on_warning,
                format!(
                    "truncated capture: packet {number}'s record header says {caplen} bytes \
                     but the file ends after {found}"
                ),
                READ_BEFORE,
            );
            return Ok(None);
        }
        let frac_ns = if nanoseconds {
            u64::from(ts_frac)
        } else {
            u64::from(ts_frac) * 1000
        };
        Ok(Some(FoundFrame {
            ts_ns: u64::from(ts_sec) * 1_000_000_000 + frac_ns,
            link,
            orig_len,
            data_start: record_header_len,
            caplen,
            record_len,
        }))
    }

    /// The next packet of a pcapng stream: reads block after block, taking the section headers
    /// and interface descriptions in, until a packet block yields a usable frame.
    fn next_pcapng_packet(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
    ) -> Result<Option<FoundFrame>, CaptureError> {
        loop {
            let number = self.packets + 1;
            let Some(block) = self.next_pcapng_block(on_warning)? else {
                return Ok(None);
            };
            match block.block_type {
                PCAPNG_SHB => {
                    if !self.start_section(on_warning, block) {
                        return Ok(None);
                    }
                }
                BLOCK_IDB => self.add_interface(on_warning, block, number),
                BLOCK_EPB | BLOCK_OBSOLETE_PACKET | BLOCK_SPB => {
                    match self.pcapng_packet(block.block_type, block.order, block.len) {
                        Ok(found) => return Ok(Some(found)),
                        Err(problem) => {
                            self.skip_unusable_packet(on_warning, block, number, problem);
                            continue;
                        }
                    }
                }
                _ => skip_other_block(on_warning, block, number),
            }
            self.input.consume(block.len);
        }
    }

    /// Reads the next pcapng block's header and buffers the whole block, its lengths checked
    /// (every block starts with its type and total length and ends with the length again).
    /// `None` at the end of the input, or at damage, the reading then stopped.
    #[inline]
    fn next_pcapng_block(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
    ) -> Result<Option<BlockHeader>, CaptureError> {
        let Some(block) = self.pcapng_block_header(on_warning)? else {
            return Ok(None);
        };
        if !self.buffer_pcapng_block(on_warning, block)? {
            return Ok(None);
        }
        Ok(Some(block))
    }

    /// The 12 bytes every pcapng block starts with (type, total length, and for a section
    /// header its byte-order magic): the block's type, byte order and length, the length not
    /// yet checked. `None` at the end of the input, or at damage, the reading then stopped.
    #[inline]
    fn pcapng_block_header(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
    ) -> Result<Option<BlockHeader>, CaptureError> {
        if !self.input.fill(12)? {
            let left = self.input.available();
            if left > 0 {
                self.stop(
                    on_warning,
                    format!(
                        "truncated capture: the file ends {left} bytes into a pcapng block header"
                    ),
                    READ_BEFORE,
                );
            }
            return Ok(None);
        }
        let Format::PcapNg { order, .. } = self.format else {
            return Ok(None);
        };
        let head = self.input.data();
        let mut order = order;
        let block_type = order.u32_at(head, 0);
        if block_type == PCAPNG_SHB {
            // A new section may switch the byte order: its byte-order magic tells.
            order = match section_byte_order(head) {
                Some(order) => order,
                None => {
                    self.stop(
                        on_warning,
                        "pcapng section header with an invalid byte-order magic".to_string(),
                        DAMAGED,
                    );
                    return Ok(None);
                }
            };
        }
        Ok(Some(BlockHeader {
            block_type,
            order,
            len: order.u32_at(head, 4) as usize,
            offset: self.input.consumed,
        }))
    }

    /// Checks a block's leading length, buffers the block whole and checks its trailing length
    /// against the leading one; false when the reading stopped at damage or a cut.
    #[inline]
    fn buffer_pcapng_block(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
        block: BlockHeader,
    ) -> Result<bool, CaptureError> {
        let BlockHeader {
            block_type,
            order,
            len: block_len,
            offset,
        } = block;
        if block_len < 12 || block_len % 4 != 0 || block_len > MAX_RECORD_LEN {
            self.stop(
                on_warning,
                format!(
                    "absurd pcapng block length {block_len} at byte {offset} (block type \
                     {block_type:#x})"
                ),
                DAMAGED,
            );
            return Ok(false);
        }
        if !self.input.fill(block_len)? {
            let found = self.input.available();
            self.stop(
                on_warning,
                format!(
                    "truncated capture: the pcapng block at byte {offset} says {block_len} \
                     bytes but the file ends after {found}"
                ),
                READ_BEFORE,
            );
            return Ok(false);
        }
        let bytes = &self.input.data()[..block_len];
        if order.u32_at(bytes, block_len - 4) as usize != block_len {
            self.stop(
                on_warning,
                format!(
                    "pcapng block at byte {offset}: its trailing length differs from its \
                     leading length {block_len}"
                ),
                DAMAGED,
            );
            return Ok(false);
        }
        Ok(true)
    }

    /// A section header block, buffered whole, starts a new section: its own byte order and
    /// no interfaces yet. False when it is unreadable or of a major version other than 1, the
    /// reading then stopped.
    fn start_section(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
        block: BlockHeader,
    ) -> bool {
        let bytes = &self.input.data()[..block.len];
        let major = parse_sectionheaderblock(bytes).map(|(_, shb)| shb.major_version);
        if major != Ok(1) {
            let offset = block.offset;
            self.stop(
                on_warning,
                format!(
                    "pcapng section header at byte {offset} is unreadable or of an unknown \
                     version"
                ),
                DAMAGED,
            );
            return false;
        }
        self.format = Format::PcapNg {
            order: block.order,
            interfaces: Vec::new(),
            interfaces_dropped: false,
        };
        true
    }

    /// An interface description block, buffered whole: its interface is kept for the
    /// section's packets (up to [`MAX_INTERFACES`]), even unreadable, so that the interface
    /// numbers of those after it stay right.
    fn add_interface(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
        block: BlockHeader,
        number: u64,
    ) {
        let interface = self.read_interface(on_warning, block, number);
        let Format::PcapNg {
            interfaces,
            interfaces_dropped,
            ..
        } = &mut self.format
        else {
            return;
        };
        if interfaces.len() < MAX_INTERFACES {
            interfaces.push(interface);
        } else if !*interfaces_dropped {
            *interfaces_dropped = true;
            let offset = block.offset;
            on_warning(&CaptureWarning {
                packet_number: number,
                message: format!(
                    "more than {MAX_INTERFACES} interface descriptions in one pcapng section (at \
                     byte {offset}); the rest are not kept, and their packets are skipped"
                ),
            });
        }
    }

    /// The interface an interface description block declares: its link type, timestamp
    /// resolution (`if_tsresol`; microseconds assumed when impossible) and offset
    /// (`if_tsoffset`). An unreadable block still declares an interface, of no link type, so
    /// that its packets are skipped.
    fn read_interface(
        &self,
        on_warning: &mut impl FnMut(&CaptureWarning),
        block: BlockHeader,
        number: u64,
    ) -> Interface {
        let bytes = &self.input.data()[..block.len];
        let offset = block.offset;
        let parsed = match block.order {
            ByteOrder::Little => parse_interfacedescriptionblock_le(bytes),
            ByteOrder::Big => parse_interfacedescriptionblock_be(bytes),
        };
        let Ok((_, idb)) = parsed else {
            on_warning(&CaptureWarning {
                packet_number: number,
                message: format!(
                    "unreadable interface description block at byte {offset}; its packets are \
                     skipped"
                ),
            });
            return Interface {
                link: Err(u32::MAX),
                scale: TsScale::Multiply(1000),
                offset_ns: 0,
            };
        };
        let code = idb.linktype.0 as u32;
        let scale = TsScale::from_if_tsresol(idb.if_tsresol);
        if scale.is_none() {
            on_warning(&CaptureWarning {
                packet_number: number,
                message: format!(
                    "interface description at byte {offset} has an impossible if_tsresol {}; \
                     microseconds assumed",
                    idb.if_tsresol
                ),
            });
        }
        Interface {
            link: LinkType::from_code(code).ok_or(code),
            scale: scale.unwrap_or(TsScale::Multiply(1000)),
            offset_ns: i128::from(idb.if_tsoffset) * 1_000_000_000,
        }
    }

    /// Skips a packet block whose packet cannot be used, saying why (within the warning
    /// budget). The packet is counted (tshark numbers it too) and skipped.
    fn skip_unusable_packet(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
        block: BlockHeader,
        number: u64,
        problem: String,
    ) {
        self.packets += 1;
        self.skipped += 1;
        self.input.consume(block.len);
        self.unusable_warnings
            .report(on_warning, number, || problem);
    }

    /// Reads the packet of an enhanced, simple or obsolete packet block, which is buffered
    /// whole; `Err` says why the packet cannot be used.
    fn pcapng_packet(
        &self,
        block_type: u32,
        order: ByteOrder,
        block_len: usize,
    ) -> Result<FoundFrame, String> {
        let Format::PcapNg {
            interfaces,
            interfaces_dropped,
            ..
        } = &self.format
        else {
            return Err("packet outside a pcapng section".to_string());
        };
        let block = &self.input.data()[..block_len];
        // Body lies between the 8-byte block header and the 4-byte trailing length.
        let body_end = block_len - 4;
        let (interface_id, ts_units, caplen, orig_len, data_start) = match block_type {
            BLOCK_SPB => {
                // Simple packet block: interface 0, no timestamp, captured length implied.
                let orig_len = order.u32_at(block, 8);
                let caplen = (orig_len as usize).min(body_end.saturating_sub(12));
                (0, None, caplen, orig_len, 12)
            }
            _ => {
                if block_len < 32 {
                    return Err(format!("pcapng packet block too short ({block_len} bytes)"));
                }
                let interface_id = if block_type == BLOCK_EPB {
                    order.u32_at(block, 8) as usize
                } else {
                    usize::from(order.u16_at(block, 8))
                };
                let ts =
                    (u64::from(order.u32_at(block, 12)) << 32) | u64::from(order.u32_at(block, 16));
                let caplen = order.u32_at(block, 20) as usize;
                let orig_len = order.u32_at(block, 24);
                if caplen > body_end - 28 {
                    return Err(format!(
                        "absurd captured length {caplen} in a {block_len}-byte pcapng block; \
                         packet skipped"
                    ));
                }
                (interface_id, Some(ts), caplen, orig_len, 28)
            }
        };
        if interface_id >= MAX_INTERFACES && *interfaces_dropped {
            return Err(format!(
                "packet of interface {interface_id}, past the {MAX_INTERFACES} interface \
                 descriptions kept; packet skipped"
            ));
        }
        let Some(interface) = interfaces.get(interface_id) else {
            return Err(format!(
                "packet refers to interface {interface_id}, which no interface description \
                 block declared; packet skipped"
            ));
        };
        let ts_ns = match ts_units {
            Some(units) => {
                let ns = i128::from(interface.scale.to_ns(units)) + interface.offset_ns;
                u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
            }
            None => self.last_ts_ns,
        };
        Ok(FoundFrame {
            ts_ns,
            link: interface.link,
            orig_len,
            data_start,
            caplen,
            record_len: block_len,
        })
    }
}

/// Checks that the first pcapng section header block is whole, so that a file cut inside it
/// is an error like a pcap file cut inside its header.
fn check_first_section_header<R: Read>(input: &mut InputBuffer<R>) -> Result<(), CaptureError> {
    let what = "the pcapng section header block".to_string();
    if !input.fill(12)? {
        return Err(CaptureError::Truncated {
            what,
            expected: 12,
            found: input.available() as u64,
        });
    }
    let head = input.data();
    let order = if u32::from_le_bytes([head[8], head[9], head[10], head[11]])
        == PCAPNG_BYTE_ORDER_MAGIC.swap_bytes()
    {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    };
    let block_len = order.u32_at(head, 4) as usize;
    // An absurd length is reported by the block reader; only a cut is checked here.
    if (12..=MAX_RECORD_LEN).contains(&block_len) && !input.fill(block_len)? {
        return Err(CaptureError::Truncated {
            what,
            expected: block_len as u64,
            found: input.available() as u64,
        });
    }
    Ok(())
}

/// The byte order a section header block's byte-order magic says its writer used: the magic
/// as written, or byte-swapped; `None` for anything else.
fn section_byte_order(head: &[u8]) -> Option<ByteOrder> {
    match u32::from_le_bytes([head[8], head[9], head[10], head[11]]) {
        PCAPNG_BYTE_ORDER_MAGIC => Some(ByteOrder::Little),
        m if m == PCAPNG_BYTE_ORDER_MAGIC.swap_bytes() => Some(ByteOrder::Big),
        _ => None,
    }
}

/// Passes over a block that holds no packet and changes no interface: name resolution,
/// interface statistics and the other known kinds silently, an unknown type with a warning.
fn skip_other_block(on_warning: &mut impl FnMut(&CaptureWarning), block: BlockHeader, number: u64) {
    match block.block_type {
        BLOCK_NRB
        | BLOCK_ISB
        | BLOCK_SYSTEMD_JOURNAL
        | BLOCK_DECRYPTION_SECRETS
        | BLOCK_PROCESS_INFO
        | BLOCK_CUSTOM
        | BLOCK_CUSTOM_NO_COPY => {}
        other => {
            let BlockHeader { len, offset, .. } = block;
            on_warning(&CaptureWarning {
                packet_number: number,
                message: format!(
                    "skipped a pcapng block of unknown type {other:#x} ({len} bytes at byte \
                     {offset})"
                ),
            })
        }
    }
}

/// The header of a pcapng block: what the block is and where it lies.
#[derive(Debug, Clone, Copy)]
struct BlockHeader {
    block_type: u32,
    /// The section's byte order (a section header's own).
    order: ByteOrder,
    /// The block's total length, header and trailing length included.
    len: usize,
    /// Where the block starts in the input, for messages.
    offset: u64,
}

/// A duration for messages: µs, ms or s as fits.
fn duration(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{} µs", ns / 1000)
    } else if ns < 1_000_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.3} s", ns as f64 / 1e9)
    }
}

/// Where a frame lies in the buffer, before it is handed out.
struct FoundFrame {
    ts_ns: u64,
    link: Result<LinkType, u32>,
    orig_len: u32,
    data_start: usize,
    caplen: usize,
    record_len: usize,
}

/// The first bytes of a file, in hex and as text, for "not a capture" messages.
fn hex_prefix(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(8)];
    let hex: Vec<String> = shown.iter().map(|b| format!("{b:02x}")).collect();
    let text: String = shown
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '.'
            }
        })
        .collect();
    format!("{} \"{}\"", hex.join(" "), text)
}
