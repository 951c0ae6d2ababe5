//! Arbitrary bytes behind a compression format's magic number (gzip, zstd, LZ4):
//! decompressing and reading must end in segments, warnings or an error, never a panic, and a
//! cut stream must read as far as it goes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpstall::capture::{decompressed, for_each_segment};

/// Magic numbers of the formats `open_input` decompresses.
const MAGICS: [&[u8]; 3] = [
    &[0x1f, 0x8b],
    &[0x28, 0xb5, 0x2f, 0xfd],
    &[0x04, 0x22, 0x4d, 0x18],
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let mut input = MAGICS[usize::from(selector) % MAGICS.len()].to_vec();
    input.extend_from_slice(rest);
    let Ok(reader) = decompressed(std::io::Cursor::new(input)) else {
        return;
    };
    // Bounded: a decompression bomb must not take the reader past its record limits.
    let _ = for_each_segment(
        reader,
        |_| {},
        |warning| {
            let _ = warning.to_string();
        },
    );
});
