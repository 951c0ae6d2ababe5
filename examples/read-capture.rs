//! Reads a capture without analysing it, for `scripts/bench-analyze`'s reference columns:
//! `frames` walks the pcap/pcapng framing only (`count_frames`), `segments` also decodes every
//! TCP segment (`for_each_segment`) and drops it. Prints `<packets> <seconds>`.
//!
//! Usage: `cargo run --release --example read-capture -- frames|segments FILE`

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use tcpstall::capture::{count_frames, for_each_segment, open_input};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(file)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: read-capture frames|segments FILE");
        return ExitCode::from(2);
    };
    let started = Instant::now();
    let result = open_input(Path::new(file)).and_then(|input| match mode.as_str() {
        "frames" => count_frames(input),
        _ => {
            let mut sum = 0u64;
            let stats = for_each_segment(input, |s| sum += u64::from(s.payload_len), |_| {})?;
            std::hint::black_box(sum);
            Ok(stats.packets)
        }
    });
    match result {
        Ok(packets) => {
            println!("{packets} {:.3}", started.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("read-capture: {e}");
            ExitCode::from(2)
        }
    }
}
