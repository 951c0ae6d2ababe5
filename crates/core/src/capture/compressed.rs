//! Compressed captures, read as they are (as Wireshark and tshark read them): gzip, zstd and
//! LZ4 frames, recognised by their magic bytes, from files and from standard input alike, and
//! decompressed as a stream. An uncompressed capture passes through untouched: only its first
//! four bytes are looked at, and handed back in front of the rest.

use std::io::{self, Cursor, Read};

/// A compression format a capture may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// gzip (RFC 1952), `*.pcap.gz`; concatenated members are read one after another.
    Gzip,
    /// Zstandard (RFC 8878), `*.pcap.zst`.
    Zstd,
    /// The LZ4 frame format, `*.pcap.lz4`.
    Lz4,
}

impl Compression {
    /// The format whose magic number starts `head`, if any.
    pub fn detect(head: &[u8]) -> Option<Compression> {
        match head {
            [0x1f, 0x8b, ..] => Some(Compression::Gzip),
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Some(Compression::Zstd),
            [0x04, 0x22, 0x4d, 0x18, ..] => Some(Compression::Lz4),
            _ => None,
        }
    }
}

/// `input`, decompressed when it starts with a compression format's magic number, as it is
/// otherwise; and the format found.
pub fn decompress<R: Read + Send + 'static>(
    mut input: R,
) -> io::Result<(Box<dyn Read + Send>, Option<Compression>)> {
    let mut head = [0u8; 4];
    let mut filled = 0;
    while filled < head.len() {
        match input.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let format = Compression::detect(&head[..filled]);
    let whole = Cursor::new(head[..filled].to_vec()).chain(input);
    let reader: Box<dyn Read + Send> = match format {
        None => Box::new(whole),
        Some(Compression::Gzip) => Box::new(flate2::read::MultiGzDecoder::new(whole)),
        Some(Compression::Zstd) => Box::new(zstd::stream::read::Decoder::new(whole)?),
        Some(Compression::Lz4) => Box::new(lz4_flex::frame::FrameDecoder::new(whole)),
    };
    Ok((reader, format))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn read_all(data: Vec<u8>) -> (Vec<u8>, Option<Compression>) {
        let (mut reader, format) = decompress(Cursor::new(data)).expect("decompress");
        let mut out = Vec::new();
        reader.read_to_end(&mut out).expect("read");
        (out, format)
    }

    #[test]
    fn every_format_round_trips_and_plain_input_passes_through() {
        let plain: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        assert_eq!(read_all(plain.clone()), (plain.clone(), None));
        assert_eq!(read_all(plain[..3].to_vec()), (plain[..3].to_vec(), None));
        assert_eq!(read_all(Vec::new()), (Vec::new(), None));

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let mut gzip = gz.finish().unwrap();
        // A second member, as `cat a.gz b.gz` makes.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"tail").unwrap();
        gzip.extend(gz.finish().unwrap());
        let mut expected = plain.clone();
        expected.extend(b"tail");
        assert_eq!(read_all(gzip), (expected, Some(Compression::Gzip)));

        let zst = zstd::stream::encode_all(Cursor::new(&plain), 3).unwrap();
        assert_eq!(read_all(zst), (plain.clone(), Some(Compression::Zstd)));

        let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz.write_all(&plain).unwrap();
        let lz4 = lz.finish().unwrap();
        assert_eq!(read_all(lz4), (plain, Some(Compression::Lz4)));
    }

    #[test]
    fn a_damaged_stream_is_an_error_not_a_panic() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&[7u8; 10_000]).unwrap();
        let mut gzip = gz.finish().unwrap();
        gzip.truncate(gzip.len() / 2);
        let (mut reader, _) = decompress(Cursor::new(gzip)).expect("header reads");
        let mut out = Vec::new();
        assert!(reader.read_to_end(&mut out).is_err());
    }
}
