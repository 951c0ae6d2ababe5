//! A whole capture read into a report: the entry point for programs that hold a capture in
//! memory (a page, a service, another tool) rather than a file on this host.

use std::io::Read;

use crate::capture::{self, CaptureError, CaptureStats, SegmentSink};
use crate::decode::{Outer, OuterByFlow, Segment};
use crate::detect::{Analysis, Detector, DetectorConfig};
use crate::report::json::{InputFacts, Source};

/// What [`analyse_capture`] found in one capture.
#[derive(Debug, Clone)]
pub struct CaptureAnalysis {
    /// The detector's result: stalls, counts, flows, undecided claims.
    pub analysis: Analysis,
    /// How the capture was read: packets, TCP segments, frames skipped and why.
    pub stats: CaptureStats,
    /// Damage that did not stop the reading, in words, in the order it was met.
    pub warnings: Vec<String>,
    /// The outer tunnel of each connection that came in one.
    pub outers: OuterByFlow,
}

impl CaptureAnalysis {
    /// The facts about the input the renderers of [`crate::report`] print beside the
    /// analysis, for a capture named `name`.
    pub fn input_facts(&self, name: &str) -> InputFacts {
        let mut facts = InputFacts {
            records: self.stats.packets,
            warnings: self.warnings.len() as u64,
            outers: self.outers.clone(),
            ..InputFacts::default()
        };
        facts.skipped.add(&self.stats.skipped);
        facts.files.push(name.to_string());
        facts.sources.push(Source {
            path: name.into(),
            ordinals: 0..self.stats.tcp_segments,
            packets: self.stats.packets,
        });
        facts
    }
}

/// Reads a pcap or pcapng capture (gzip, zstd or LZ4 compressed, or not) from `input` and runs
/// the detector over every TCP segment in it, on this thread.
///
/// Returns an error only when nothing usable can be read (empty, not a capture, a link type
/// without IP); damage after the first packets is in [`CaptureAnalysis::warnings`].
///
/// # Example
///
/// A capture given as bytes: one SYN from 10.0.0.1 to 10.0.0.2, on the raw-IP link type.
///
/// ```
/// use tcpstall_core::capture::pcap_writer::PcapWriter;
/// use tcpstall_core::detect::DetectorConfig;
///
/// const LINKTYPE_RAW: u32 = 101;
/// let syn: [u8; 40] = [
///     0x45, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
///     0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0, // TCP SYN
/// ];
/// let mut pcap = PcapWriter::new(Vec::new(), LINKTYPE_RAW, 65535)?;
/// pcap.write_packet(1_700_000_000_000_000_000, &syn, syn.len() as u32)?;
/// let bytes = pcap.finish()?;
///
/// let found = tcpstall_core::analyse_capture(std::io::Cursor::new(bytes), DetectorConfig::default())?;
/// assert_eq!(found.stats.tcp_segments, 1);
/// assert_eq!(found.analysis.stall_count(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn analyse_capture<R: Read + Send + 'static>(
    input: R,
    config: DetectorConfig,
) -> Result<CaptureAnalysis, CaptureError> {
    /// Decodes into one segment, notes its tunnel, and hands it to the detector.
    struct Sink {
        segment: Segment,
        detector: Detector,
        outers: OuterByFlow,
    }
    impl SegmentSink for Sink {
        fn slot(&mut self) -> &mut Segment {
            &mut self.segment
        }
        fn commit(&mut self) {
            self.detector.push(&self.segment);
        }
        fn outer(&mut self, outer: Outer) {
            self.outers.record(&self.segment, outer);
        }
    }
    let mut sink = Sink {
        segment: Segment::UNSET,
        detector: Detector::new(config),
        outers: OuterByFlow::default(),
    };
    let mut warnings = Vec::new();
    let stats = capture::stream_segments(capture::decompressed(input)?, &mut sink, |warning| {
        warnings.push(warning.to_string())
    })?;
    Ok(CaptureAnalysis {
        analysis: sink.detector.finish(),
        stats,
        warnings,
        outers: sink.outers,
    })
}
