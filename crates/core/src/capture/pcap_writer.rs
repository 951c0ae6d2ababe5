//! Writing classic pcap files (the libpcap format every tool reads), nanosecond resolution.
//! pcap-parser only reads; the format is a 24-byte file header and a 16-byte header per packet.

use std::io::{self, Write};

/// Magic number of a pcap file with nanosecond timestamps, written in native byte order
/// (readers detect the order from it).
pub const MAGIC_NANOSECONDS: u32 = 0xa1b2_3c4d;

/// LINKTYPE_ETHERNET: frames start with a 14-byte Ethernet header (Linux `lo` carries one with
/// zero MAC addresses).
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Writes packets to a classic pcap stream.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
    packets: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header: version 2.4, nanosecond magic, `linktype`, `snaplen`.
    pub fn new(mut out: W, linktype: u32, snaplen: u32) -> io::Result<PcapWriter<W>> {
        let mut header = Vec::with_capacity(24);
        header.extend_from_slice(&MAGIC_NANOSECONDS.to_ne_bytes());
        header.extend_from_slice(&2u16.to_ne_bytes());
        header.extend_from_slice(&4u16.to_ne_bytes());
        header.extend_from_slice(&0i32.to_ne_bytes()); // thiszone: timestamps are UTC
        header.extend_from_slice(&0u32.to_ne_bytes()); // sigfigs
        header.extend_from_slice(&snaplen.to_ne_bytes());
        header.extend_from_slice(&linktype.to_ne_bytes());
        out.write_all(&header)?;
        Ok(PcapWriter {
            out,
            snaplen,
            packets: 0,
        })
    }

    /// Writes one packet captured at `ts_ns` (nanoseconds since the Unix epoch); `data` is cut
    /// to the snap length, `orig_len` is the length the packet had on the wire.
    pub fn write_packet(&mut self, ts_ns: u64, data: &[u8], orig_len: u32) -> io::Result<()> {
        let caplen = data.len().min(self.snaplen as usize);
        let mut record = Vec::with_capacity(16 + caplen);
        let secs = u32::try_from(ts_ns / 1_000_000_000).unwrap_or(u32::MAX);
        record.extend_from_slice(&secs.to_ne_bytes());
        record.extend_from_slice(&((ts_ns % 1_000_000_000) as u32).to_ne_bytes());
        record.extend_from_slice(&(caplen as u32).to_ne_bytes());
        record.extend_from_slice(&orig_len.max(caplen as u32).to_ne_bytes());
        record.extend_from_slice(&data[..caplen]);
        self.out.write_all(&record)?;
        self.packets += 1;
        Ok(())
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_parser::traits::PcapReaderIterator;
    use pcap_parser::{LegacyPcapReader, PcapBlockOwned, PcapError};

    #[test]
    fn pcap_parser_reads_what_we_write() {
        let mut writer = PcapWriter::new(Vec::new(), LINKTYPE_ETHERNET, 100).unwrap();
        writer
            .write_packet(1_700_000_000_123_456_789, &[7u8; 150], 150)
            .unwrap();
        let bytes = writer.finish().unwrap();
        let mut reader = LegacyPcapReader::new(65536, &bytes[..]).unwrap();
        let mut seen = Vec::new();
        loop {
            match reader.next() {
                Ok((offset, block)) => {
                    if let PcapBlockOwned::Legacy(packet) = block {
                        seen.push((packet.ts_sec, packet.ts_usec, packet.caplen, packet.origlen));
                    }
                    reader.consume(offset);
                }
                Err(PcapError::Eof) => break,
                Err(PcapError::Incomplete(_)) => reader.refill().unwrap(),
                Err(err) => panic!("{err:?}"),
            }
        }
        // ts_usec holds nanoseconds under the nanosecond magic.
        assert_eq!(seen, vec![(1_700_000_000, 123_456_789, 100, 150)]);
    }
}
