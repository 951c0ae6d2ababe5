//! Arbitrary bytes as a capture file: reading must end in segments, warnings or an error,
//! never a panic, and agree with the framing-only count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpstall::capture::{count_frames, for_each_segment};

fuzz_target!(|data: &[u8]| {
    let mut segments = 0u64;
    let result = for_each_segment(
        data,
        |_| segments += 1,
        |warning| {
            // Formatting every warning exercises its message arithmetic too.
            let _ = warning.to_string();
        },
    );
    if let Ok(stats) = result {
        assert_eq!(stats.tcp_segments, segments);
        assert!(stats.tcp_segments + stats.skipped.total() <= stats.packets);
        assert_eq!(count_frames(data).ok(), Some(stats.packets));
    }
});
