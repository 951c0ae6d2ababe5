//! Reading packets: capture files (pcap, pcapng) and their link layers.
//!
//! [`for_each_segment`] streams a pcap or pcapng file and hands out every TCP segment in it,
//! decoded by [`crate::decode`]; memory stays bounded by the largest record, never by the file.

pub mod compressed;
pub mod file;
pub mod pcap_writer;
pub mod pcapng_writer;
pub mod skipped;

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::decode::link::link_type_name;
use crate::decode::{Decap, Decoded, Outer, PacketMeta, Segment};
use file::FrameReader;

/// Why a capture could not be read at all. Damage after the first packets is a
/// [`CaptureWarning`] instead: what was read before it is still used.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened. (The system's words are part of the message, not a
    /// separate source, so that an error chain does not print them twice.)
    #[error("cannot open capture file {}: {error}; check the path and that you may read it", path.display())]
    Open {
        /// The file asked for.
        path: PathBuf,
        /// What the system said.
        error: io::Error,
    },
    /// Reading failed half-way.
    #[error("cannot read the capture: {error}")]
    Read {
        /// What the system said.
        error: io::Error,
    },
    /// The file is damaged before its first packet: nothing in it can be analysed.
    #[error("no packet could be read: {reason}")]
    NothingReadable {
        /// What is wrong, in words.
        reason: String,
    },
    /// Zero bytes.
    #[error("the capture is empty (0 bytes); was the capture stopped before it wrote its header?")]
    Empty,
    /// The magic number is neither pcap's nor pcapng's.
    #[error(
        "not a pcap or pcapng file (starts with {first_bytes}); give a file written by \
         tcpdump -w, tshark -w, dumpcap or Wireshark (gzip, zstd or LZ4 compressed, or not)"
    )]
    NotCapture {
        /// The first bytes, in hex and as text.
        first_bytes: String,
    },
    /// The file ends inside its own header.
    #[error("truncated capture: {what} needs {expected} bytes but the file ends after {found}")]
    Truncated {
        /// What was being read.
        what: String,
        /// Bytes it needs.
        expected: u64,
        /// Bytes there were.
        found: u64,
    },
    /// The link layer carries no IP this crate can find.
    #[error(
        "unsupported link type {code} ({name}); tcpstall reads Ethernet (with VLAN tags), Linux \
         cooked (SLL, SLL2), raw IP, BSD loopback, PPP, Cisco HDLC, ARCnet, IP over InfiniBand, \
         Solaris ipnet and Juniper Ethernet/PPPoE/PPP/HDLC captures: capture again with \
         `tcpdump -i <interface> -w FILE` or `tcpdump -i any -w FILE`"
    )]
    UnsupportedLinkType {
        /// The `LINKTYPE_*` number.
        code: u32,
        /// Its name.
        name: String,
    },
}

/// Damage or oddity found while reading; the reading goes on (or ends cleanly) after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureWarning {
    /// The packet concerned; for damage between packets, the number the next packet would get.
    pub packet_number: u64,
    /// What is wrong, in words.
    pub message: String,
}

/// How many warnings of one per-packet kind are listed before the rest are only counted, so
/// a capture where every packet has the same problem does not bury the report.
const LISTED_PER_KIND: u32 = 20;

/// Lists the first [`LISTED_PER_KIND`] warnings of one kind, then says the rest are counted.
#[derive(Debug)]
pub struct WarningBudget {
    left: u32,
    /// What the suppressed warnings are about, for the closing note.
    kind: &'static str,
}

impl WarningBudget {
    pub fn new(kind: &'static str) -> Self {
        WarningBudget {
            left: LISTED_PER_KIND,
            kind,
        }
    }

    /// Passes `warning` on while the budget lasts; the first one over it becomes a note.
    pub fn report(
        &mut self,
        on_warning: &mut impl FnMut(&CaptureWarning),
        packet_number: u64,
        message: impl FnOnce() -> String,
    ) {
        match self.left {
            0 => {}
            1 => {
                self.left = 0;
                on_warning(&CaptureWarning {
                    packet_number,
                    message: format!("more {} from here on are counted but not listed", self.kind),
                });
            }
            _ => {
                self.left -= 1;
                on_warning(&CaptureWarning {
                    packet_number,
                    message: message(),
                });
            }
        }
    }
}

impl fmt::Display for CaptureWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "packet {}: {}", self.packet_number, self.message)
    }
}

/// What a pass over a capture read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Packet records in the capture (tshark's frame count).
    pub packets: u64,
    /// TCP segments handed to the caller.
    pub tcp_segments: u64,
    /// The frames not read as TCP, by reason.
    pub skipped: skipped::SkippedFrames,
    /// Warnings reported.
    pub warnings: u64,
    /// Bytes read from the input.
    pub bytes: u64,
    /// Time of the first packet read, nanoseconds since the Unix epoch.
    pub first_ts_ns: Option<u64>,
    /// Time of the last packet read.
    pub last_ts_ns: Option<u64>,
}

/// Opens a capture file, or standard input for `-`, decompressed when it is compressed
/// (gzip, zstd, LZ4: see [`compressed`]).
pub fn open_input(path: &Path) -> Result<Box<dyn Read + Send>, CaptureError> {
    decompressed(open_raw(path)?)
}

/// Opens a capture file, or standard input for `-`, as its bytes are.
pub fn open_raw(path: &Path) -> Result<Box<dyn Read + Send>, CaptureError> {
    if path == Path::new("-") {
        return Ok(Box::new(io::stdin()));
    }
    let file = File::open(path).map_err(|error| CaptureError::Open {
        path: path.to_path_buf(),
        error,
    })?;
    // A directory opens but cannot be read: say so now rather than at the first read.
    match file.metadata() {
        Ok(meta) if meta.is_dir() => Err(CaptureError::Open {
            path: path.to_path_buf(),
            error: io::Error::new(io::ErrorKind::InvalidInput, "it is a directory"),
        }),
        _ => Ok(Box::new(file)),
    }
}

/// `input` decompressed when it starts with a compression format's magic number.
pub fn decompressed<R: Read + Send + 'static>(
    input: R,
) -> Result<Box<dyn Read + Send>, CaptureError> {
    compressed::decompress(input)
        .map(|(reader, _)| reader)
        .map_err(|error| CaptureError::Read { error })
}

/// Streams a pcap or pcapng capture and calls `on_segment` for every TCP segment in it, in
/// file order, and `on_warning` for damage that does not stop the reading.
///
/// Returns an error only when nothing usable can be read (empty, not a capture, a link type
/// without IP, an I/O failure).
pub fn for_each_segment<R: Read>(
    input: R,
    on_segment: impl FnMut(&Segment),
    on_warning: impl FnMut(&CaptureWarning),
) -> Result<CaptureStats, CaptureError> {
    /// Decodes into one segment and hands it to the callback.
    struct Callback<F> {
        segment: Segment,
        on_segment: F,
    }
    impl<F: FnMut(&Segment)> SegmentSink for Callback<F> {
        fn slot(&mut self) -> &mut Segment {
            &mut self.segment
        }
        fn commit(&mut self) {
            (self.on_segment)(&self.segment);
        }
    }
    let mut sink = Callback {
        segment: Segment::UNSET,
        on_segment,
    };
    stream_segments(input, &mut sink, on_warning)
}

/// Where [`stream_segments`] decodes segments: in place, so that a consumer's buffer is filled
/// without a segment being built elsewhere and copied.
pub trait SegmentSink {
    /// The place the next segment is decoded into; what is left there by a packet that is not
    /// TCP is overwritten by the next.
    fn slot(&mut self) -> &mut Segment;
    /// The slot holds a complete segment.
    fn commit(&mut self);
    /// The segment in the slot came out of a tunnel, `outer` the outermost one; called before
    /// [`SegmentSink::commit`], only for tunnelled segments.
    fn outer(&mut self, outer: Outer) {
        let _ = outer;
    }
}

/// [`for_each_segment`], decoding every TCP segment into `sink`'s slot and committing it.
pub fn stream_segments<R: Read>(
    input: R,
    sink: &mut impl SegmentSink,
    on_warning: impl FnMut(&CaptureWarning),
) -> Result<CaptureStats, CaptureError> {
    stream_segments_decap(input, sink, on_warning, &mut Decap::default())
}

/// [`stream_segments`], following tunnels as `decap` is set up to (extra VXLAN or Geneve
/// ports).
pub fn stream_segments_decap<R: Read>(
    input: R,
    sink: &mut impl SegmentSink,
    mut on_warning: impl FnMut(&CaptureWarning),
    decap: &mut Decap,
) -> Result<CaptureStats, CaptureError> {
    let mut stats = CaptureStats::default();
    let mut reader = FrameReader::new(input)?;
    let mut unsupported_link: Option<u32> = None;
    let mut warn = |warning: &CaptureWarning| {
        stats.warnings += 1;
        on_warning(warning);
    };
    let mut decoded_any = false;
    let mut fragment_warnings = WarningBudget::new("non-first fragments");
    let mut undecodable_warnings = WarningBudget::new("undecodable packets");
    while let Some(frame) = reader.next_frame(&mut warn)? {
        stats.first_ts_ns.get_or_insert(frame.ts_ns);
        stats.last_ts_ns = Some(frame.ts_ns);
        let link = match frame.link {
            Ok(link) => link,
            Err(code) => {
                let name = format!("link type {code}, {}", link_type_name(code));
                if stats.skipped.unsupported(name) {
                    unsupported_link.get_or_insert(code);
                    warn(&CaptureWarning {
                        packet_number: frame.packet_number,
                        message: format!(
                            "interface with unsupported link type {code} ({}); its packets are \
                             skipped",
                            link_type_name(code)
                        ),
                    });
                }
                continue;
            }
        };
        decoded_any = true;
        let meta = PacketMeta {
            ts_ns: frame.ts_ns,
            packet_number: frame.packet_number,
        };
        // The tunnel a packet came in is taken in every arm, so that it never sticks to the
        // next packet; looked at only after decoding, out of the plain packets' way.
        match link.decode_into(frame.data, frame.orig_len, meta, sink.slot(), decap) {
            Decoded::Tcp(()) => {
                stats.tcp_segments += 1;
                if let Some(outer) = decap.take_outer() {
                    sink.outer(outer);
                }
                sink.commit();
            }
            Decoded::NotTcp => {
                decap.take_outer();
                stats.skipped.not_tcp += 1;
            }
            Decoded::Fragment => {
                decap.take_outer();
                stats.skipped.fragments += 1;
                fragment_warnings.report(&mut warn, frame.packet_number, || {
                    "non-first IP fragment skipped (fragments are not reassembled)".to_string()
                });
            }
            Decoded::Undecodable(reason) => {
                decap.take_outer();
                stats.skipped.undecodable += 1;
                undecodable_warnings.report(&mut warn, frame.packet_number, || {
                    format!("undecodable packet: {reason}")
                });
            }
            Decoded::Opaque(what) => {
                decap.take_outer();
                if stats.skipped.opaque(what) {
                    warn(&CaptureWarning {
                        packet_number: frame.packet_number,
                        message: format!(
                            "{what}: such packets may hold TCP that cannot be read; they are \
                             counted, not analysed"
                        ),
                    });
                }
            }
            Decoded::Unsupported(what) => {
                decap.take_outer();
                if stats.skipped.unsupported(what) {
                    warn(&CaptureWarning {
                        packet_number: frame.packet_number,
                        message: format!(
                            "{what} is not read: such packets may hold TCP; they are counted, \
                             not analysed"
                        ),
                    });
                }
            }
        }
    }
    stats.skipped.undecodable += reader.skipped_packets();
    stats.packets = reader.packets();
    stats.bytes = reader.bytes_read();
    // Every packet sat on interfaces of link types without IP: nothing was usable.
    if let (Some(code), false) = (unsupported_link, decoded_any) {
        return Err(CaptureError::UnsupportedLinkType {
            code,
            name: link_type_name(code),
        });
    }
    Ok(stats)
}

/// Counts the packet records of a capture without decoding them: the framing cost alone,
/// the reference the decoding benchmark compares against.
pub fn count_frames<R: Read>(input: R) -> Result<u64, CaptureError> {
    let mut reader = FrameReader::new(input)?;
    while reader.next_frame(&mut |_| {})?.is_some() {}
    Ok(reader.packets())
}
