//! tcpstall in a web page: the core compiled to WebAssembly analyses a capture on the reader's
//! own machine, nothing uploaded, and gives what `tcpstall analyze --json` and `--html` give.
//!
//! The page (`page.html`, filled by `scripts/build-page`) talks to the module through a few
//! exported functions over its linear memory, no generated glue:
//!
//! 1. `tcpstall_name(len)` and `tcpstall_input(len)` make room for the capture's name and bytes
//!    and return where the page writes them;
//! 2. `tcpstall_analyse()` reads them; it returns 0 when the capture was read, 1 when it could
//!    not be (the error is output 2);
//! 3. `tcpstall_output(which)` and `tcpstall_output_len(which)` locate the results: 0 the JSON
//!    report, 1 the HTML page, 2 the error.
//!
//! Each call may grow the memory, so the page takes a fresh view of it after every call.

use std::cell::RefCell;
use std::io::Cursor;
use std::sync::Arc;

use tcpstall_core::detect::DetectorConfig;
use tcpstall_core::report::{html, json};
use tcpstall_core::{analyse_capture, capture, ladder};

/// What the page gets for one capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reports {
    /// `tcpstall analyze --json`'s report.
    pub json: String,
    /// `tcpstall analyze --html`'s page, with the ladders of the examples.
    pub html: String,
}

/// Analyses the capture `bytes` (pcap or pcapng, gzip, zstd or LZ4 compressed or not), named
/// `name` in the reports. The error says what is wrong with the input, in words.
pub fn analyse(name: &str, bytes: Vec<u8>) -> Result<Reports, String> {
    let bytes = Shared(Arc::new(bytes));
    // The turns draw the page's latency charts, as `analyze --html` keeps them.
    let config = DetectorConfig {
        keep_turns: true,
        ..DetectorConfig::default()
    };
    let found =
        analyse_capture(Cursor::new(bytes.clone()), config).map_err(|e| format!("{name}: {e}"))?;
    let facts = found.input_facts(name);
    let analysis = found.analysis;
    let mut out = Vec::new();
    json::write(&mut out, &analysis, &analysis.flows, &facts).map_err(|e| e.to_string())?;
    let json = String::from_utf8(out).map_err(|e| e.to_string())?;
    // The ladders read the capture a second time, as the command line does.
    let examples = ladder::examples(&analysis.events);
    let again = capture::decompressed(Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let ladders = ladder::collect([again], &examples).map_err(|e| e.to_string())?;
    let mut page = html::analysis_page(&analysis, &facts, name).map_err(|e| format!("{e:#}"))?;
    page.add_ladders(&ladders.into_iter().flatten().collect::<Vec<_>>());
    let html = page.render().map_err(|e| format!("{e:#}"))?;
    Ok(Reports { json, html })
}

/// The capture's bytes, read twice (the analysis, then the ladders) without a copy.
#[derive(Clone)]
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

thread_local! {
    /// The capture's name, as the page wrote it.
    static NAME: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The capture's bytes, as the page wrote them.
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The last analysis's outputs: JSON, HTML, error.
    static OUTPUT: RefCell<[Vec<u8>; 3]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// Makes room for `len` bytes in `buffer` and returns where they go.
fn room(buffer: &'static std::thread::LocalKey<RefCell<Vec<u8>>>, len: usize) -> *mut u8 {
    buffer.with(|b| {
        let mut b = b.borrow_mut();
        b.clear();
        b.resize(len, 0);
        b.as_mut_ptr()
    })
}

/// Where the page writes the capture's name (UTF-8) of `len` bytes.
#[no_mangle]
pub extern "C" fn tcpstall_name(len: usize) -> *mut u8 {
    room(&NAME, len)
}

/// Where the page writes the capture's `len` bytes.
#[no_mangle]
pub extern "C" fn tcpstall_input(len: usize) -> *mut u8 {
    room(&INPUT, len)
}

/// Analyses the capture written; 0 when read (outputs 0 and 1 hold the reports), 1 when not
/// (output 2 holds the error).
#[no_mangle]
pub extern "C" fn tcpstall_analyse() -> u32 {
    let name = NAME.with(|n| String::from_utf8_lossy(&n.borrow()).into_owned());
    let bytes = INPUT.with(|i| std::mem::take(&mut *i.borrow_mut()));
    let result = analyse(&name, bytes);
    OUTPUT.with(|o| {
        let mut o = o.borrow_mut();
        *o = [Vec::new(), Vec::new(), Vec::new()];
        match result {
            Ok(reports) => {
                o[0] = reports.json.into_bytes();
                o[1] = reports.html.into_bytes();
                0
            }
            Err(error) => {
                o[2] = error.into_bytes();
                1
            }
        }
    })
}

/// Where output `which` (0 JSON, 1 HTML, 2 error) starts; null for another number.
#[no_mangle]
pub extern "C" fn tcpstall_output(which: usize) -> *const u8 {
    OUTPUT.with(|o| {
        o.borrow()
            .get(which)
            .map_or(std::ptr::null(), |out| out.as_ptr())
    })
}

/// How long output `which` is, in bytes; 0 for another number.
#[no_mangle]
pub extern "C" fn tcpstall_output_len(which: usize) -> usize {
    OUTPUT.with(|o| o.borrow().get(which).map_or(0, Vec::len))
}

#[cfg(test)]
mod tests {
    use super::analyse;

    /// Not a capture: an error that names the input, no panic.
    #[test]
    fn bytes_that_are_no_capture_are_an_error() {
        let error = analyse("notes.txt", b"hello, this is text".to_vec()).unwrap_err();
        assert!(error.starts_with("notes.txt: "), "{error}");
    }
}
