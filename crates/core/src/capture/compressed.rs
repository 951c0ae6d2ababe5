//! Compressed captures, read as they are (as Wireshark and tshark read them): gzip, zstd and
//! LZ4 frames, recognised by their magic bytes, from files and from standard input alike, and
//! decompressed as a stream. An uncompressed capture passes through untouched: only its first
//! four bytes are looked at, and handed back in front of the rest.
//!
//! A damaged or cut compressed stream (tcpdump killed mid-write, a copy cut short, bytes after
//! the last member) is read as far as it decompresses, as tshark reads it: the error ends the
//! data like the end of a file, as a [`CutStream`] the capture reader turns into a warning.

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
    /// The format's name, as users know it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Lz4 => "LZ4",
        }
    }

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
    let Some(compression) = format else {
        return Ok((Box::new(whole), None));
    };
    let decoder: Box<dyn Read + Send> = match compression {
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(whole)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(whole)?),
        Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(whole)),
    };
    let mut salvage = Salvage {
        inner: decoder,
        format: compression,
        out: 0,
        cut: false,
    };
    // The decompressed data's own magic number: a compressed file that is no capture is
    // said to be one (the user sees a .gz, not the bytes inside it).
    let mut magic = [0u8; 4];
    let mut got = 0;
    while got < magic.len() {
        match salvage.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_cut(&e) && got == 0 => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the {} stream holds no data: {e}", compression.name()),
                ))
            }
            Err(_) => break,
        }
    }
    if got == magic.len() && !is_capture_magic(magic) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the file is {}-compressed, and what it decompresses to is not a pcap or pcapng \
                 file (starts with {:02x} {:02x} {:02x} {:02x}); compress a file written by \
                 tcpdump -w, tshark -w or dumpcap",
                compression.name(),
                magic[0],
                magic[1],
                magic[2],
                magic[3]
            ),
        ));
    }
    let reader = Cursor::new(magic[..got].to_vec()).chain(salvage);
    Ok((Box::new(reader), format))
}

/// pcap's magic numbers (micro- and nanosecond, either byte order) and pcapng's section header.
fn is_capture_magic(magic: [u8; 4]) -> bool {
    let m = u32::from_le_bytes(magic);
    [0xa1b2_c3d4u32, 0xa1b2_3c4d, 0x0a0d_0d0a]
        .iter()
        .any(|k| m == *k || m == k.swap_bytes())
}

/// The error that ends a damaged compressed stream's data: where, and what the decompressor
/// said. Carried inside an `io::Error`; see [`is_cut`].
#[derive(Debug)]
pub struct CutStream {
    /// The format.
    pub format: Compression,
    /// Decompressed bytes read before the damage.
    pub after: u64,
    /// What the decompressor said.
    pub reason: String,
}

impl std::fmt::Display for CutStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} stream is cut or damaged after {} decompressed bytes ({})",
            self.format.name(),
            self.after,
            self.reason
        )
    }
}

impl std::error::Error for CutStream {}

/// Whether `error` is a [`CutStream`]: the data ends there, and what came before is good.
pub fn is_cut(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|e| e.is::<CutStream>())
}

/// A decompressor whose first error is handed on once as a [`CutStream`], and is the end of
/// the data after that.
struct Salvage {
    inner: Box<dyn Read + Send>,
    format: Compression,
    out: u64,
    cut: bool,
}

impl Read for Salvage {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.cut {
            return Ok(0);
        }
        match self.inner.read(buf) {
            Ok(n) => {
                self.out += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                self.cut = true;
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    CutStream {
                        format: self.format,
                        after: self.out,
                        reason: e.to_string(),
                    },
                ))
            }
        }
    }
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
        let mut plain: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        plain[..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
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
    fn a_damaged_stream_ends_in_a_cut_not_a_panic() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut data = vec![7u8; 100_000];
        data[..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        gz.write_all(&data).unwrap();
        let mut gzip = gz.finish().unwrap();
        gzip.truncate(gzip.len() / 2);
        let (mut reader, _) = decompress(Cursor::new(gzip)).expect("header reads");
        let mut out = Vec::new();
        let err = reader.read_to_end(&mut out).expect_err("cut");
        assert!(is_cut(&err), "{err}");
        assert!(!out.is_empty() && out.len() < data.len() && data.starts_with(&out));
        // The end of the data after that.
        assert_eq!(reader.read(&mut [0u8; 16]).expect("eof"), 0);
    }

    #[test]
    fn a_compressed_file_of_zeros_says_it_was_decompressed() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&[0u8; 4096]).unwrap();
        let err = decompress(Cursor::new(gz.finish().unwrap()))
            .err()
            .expect("refused");
        assert!(err.to_string().contains("gzip-compressed"), "{err}");
    }
}
