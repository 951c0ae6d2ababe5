//! Throughput of the capture reader on one file, each pass timed separately (best of N):
//! plain reads of the file, framing only (`count_frames`), framing + decoding
//! (`for_each_segment`), and framing + etherparse's lax slicing in place of the decoder.
//!
//! usage: cargo run --release --example capture_throughput -- FILE [ROUNDS]

use std::hint::black_box;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use tcpstall::capture::file::FrameReader;
use tcpstall::capture::{count_frames, for_each_segment, open_input};
use tcpstall::decode::link::LinkType;

fn best_of(
    rounds: u32,
    mut pass: impl FnMut() -> anyhow::Result<u64>,
) -> anyhow::Result<(u64, Duration)> {
    let mut best = Duration::MAX;
    let mut count = 0;
    for _ in 0..rounds {
        let start = Instant::now();
        count = pass()?;
        best = best.min(start.elapsed());
    }
    Ok((count, best))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1).map(Path::new) else {
        anyhow::bail!("usage: capture_throughput FILE [ROUNDS]");
    };
    let rounds = args.get(2).map_or(Ok(3), |r| r.parse())?;
    let open = || open_input(path).map_err(anyhow::Error::from);

    let (bytes, read_time) = best_of(rounds, || {
        let mut input = open()?;
        let mut buffer = vec![0u8; 1 << 20];
        let mut total = 0u64;
        while let n @ 1.. = input.read(&mut buffer)? {
            total += n as u64;
        }
        Ok(total)
    })?;
    let (frames, frame_time) = best_of(rounds, || Ok(count_frames(open()?)?))?;
    let (segments, decode_time) = best_of(rounds, || {
        let mut checksum = 0u64;
        let stats = for_each_segment(
            open()?,
            |s| checksum = checksum.wrapping_add(u64::from(s.seq.0 ^ s.payload_len)),
            |_| {},
        )?;
        black_box(checksum);
        Ok(stats.tcp_segments)
    })?;
    let (ether_segments, etherparse_time) = best_of(rounds, || {
        let mut reader = FrameReader::new(open()?)?;
        let mut checksum = 0u64;
        let mut segments = 0;
        while let Some(frame) = reader.next_frame(&mut |_| {})? {
            if frame.link != Ok(LinkType::Ethernet) {
                continue;
            }
            if let Ok(packet) = etherparse::LaxSlicedPacket::from_ethernet(frame.data) {
                if let Some(etherparse::TransportSlice::Tcp(tcp)) = packet.transport {
                    segments += 1;
                    checksum = checksum.wrapping_add(u64::from(
                        tcp.sequence_number() ^ tcp.payload().len() as u32,
                    ));
                }
            }
        }
        black_box(checksum);
        Ok(segments)
    })?;

    let rate = |n: u64, t: Duration| n as f64 / t.as_secs_f64() / 1e6;
    println!(
        "file: {} ({:.0} MB, {frames} packets, {segments} TCP segments)",
        path.display(),
        bytes as f64 / 1e6
    );
    println!(
        "plain read:                {:>8.1} MB/s",
        bytes as f64 / read_time.as_secs_f64() / 1e6
    );
    println!(
        "framing (count_frames):    {:>8.2} M packets/s",
        rate(frames, frame_time)
    );
    println!(
        "framing + decoding:        {:>8.2} M packets/s  ({:.2} of framing)",
        rate(frames, decode_time),
        frame_time.as_secs_f64() / decode_time.as_secs_f64()
    );
    println!("framing + etherparse lax:  {:>8.2} M packets/s  ({:.2} of framing; {ether_segments} segments)", rate(frames, etherparse_time), frame_time.as_secs_f64() / etherparse_time.as_secs_f64());
    Ok(())
}
