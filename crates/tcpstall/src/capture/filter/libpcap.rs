//! libpcap's own filter compiler (`pcap_compile(3PCAP)`), loaded at run time from the host's
//! libpcap when it has one: the whole of tcpdump's syntax, exactly as tcpdump reads it, while
//! building tcpstall needs no libpcap and the binary runs on hosts without it.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

/// The names libpcap's shared object goes by: upstream's soname, then Debian's (package
/// `libpcap0.8`), then the development link.
const NAMES: [&str; 3] = ["libpcap.so.1", "libpcap.so.0.8", "libpcap.so"];

/// `struct bpf_program` (pcap/bpf.h): its instructions have `struct sock_filter`'s layout.
#[repr(C)]
struct BpfProgram {
    len: c_uint,
    insns: *mut libc::sock_filter,
}

type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type Compile =
    unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
type GetErr = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type FreeCode = unsafe extern "C" fn(*mut BpfProgram);
type Close = unsafe extern "C" fn(*mut c_void);

/// The loaded library and the five functions used.
struct Library {
    open_dead: OpenDead,
    compile: Compile,
    geterr: GetErr,
    freecode: FreeCode,
    close: Close,
    /// Kept loaded for the function pointers above.
    _library: libloading::Library,
}

/// Why libpcap could not compile a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LibpcapError {
    /// No libpcap on this host (or this binary cannot load shared objects, as a static one).
    Missing(String),
    /// libpcap's message about the expression.
    Rejected(String),
}

fn library() -> Result<&'static Mutex<Library>, LibpcapError> {
    static LIBRARY: OnceLock<Result<Mutex<Library>, String>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| load().map(Mutex::new))
        .as_ref()
        .map_err(|reason| LibpcapError::Missing(reason.clone()))
}

fn load() -> Result<Library, String> {
    let mut reasons = Vec::new();
    for name in NAMES {
        // SAFETY: loading libpcap runs no initialisers with preconditions of ours.
        match unsafe { libloading::Library::new(name) } {
            Ok(library) => return symbols(library).map_err(|e| format!("{name}: {e}")),
            Err(e) => reasons.push(e.to_string()),
        }
    }
    Err(reasons.join("; "))
}

fn symbols(library: libloading::Library) -> Result<Library, libloading::Error> {
    // SAFETY: each type is the function's prototype in pcap/pcap.h.
    unsafe {
        Ok(Library {
            open_dead: *library.get::<OpenDead>(b"pcap_open_dead\0")?,
            compile: *library.get::<Compile>(b"pcap_compile\0")?,
            geterr: *library.get::<GetErr>(b"pcap_geterr\0")?,
            freecode: *library.get::<FreeCode>(b"pcap_freecode\0")?,
            close: *library.get::<Close>(b"pcap_close\0")?,
            _library: library,
        })
    }
}

/// Whether the host's libpcap can be loaded.
#[cfg(test)]
pub(crate) fn available() -> bool {
    library().is_ok()
}

/// Compiles `expression` for frames of `DLT_*` `dlt`, the program returning `snaplen` for a
/// packet it keeps. Calls are serialised: `pcap_compile` was not thread-safe before 1.8.
pub(crate) fn compile(
    expression: &str,
    dlt: c_int,
    snaplen: c_int,
) -> Result<Vec<libc::sock_filter>, LibpcapError> {
    let text = CString::new(expression)
        .map_err(|_| LibpcapError::Rejected("the filter contains a NUL byte".into()))?;
    let lib = library()?
        .lock()
        .map_err(|_| LibpcapError::Missing("an earlier compile panicked".into()))?;
    // SAFETY: the handle is checked, used only here, and closed before returning; the program
    // is read only between a successful compile and its free.
    unsafe {
        let handle = (lib.open_dead)(dlt, snaplen);
        if handle.is_null() {
            return Err(LibpcapError::Missing("pcap_open_dead failed".into()));
        }
        let mut program = BpfProgram {
            len: 0,
            insns: std::ptr::null_mut(),
        };
        // Optimise, as tcpdump does; no netmask (only `ip broadcast` would need it).
        let rc = (lib.compile)(handle, &mut program, text.as_ptr(), 1, 0xffff_ffff);
        let result = if rc != 0 {
            let message = (lib.geterr)(handle);
            Err(LibpcapError::Rejected(if message.is_null() {
                "libpcap refused it".into()
            } else {
                CStr::from_ptr(message).to_string_lossy().into_owned()
            }))
        } else if program.insns.is_null() {
            Err(LibpcapError::Rejected("libpcap produced no program".into()))
        } else {
            let code = std::slice::from_raw_parts(program.insns, program.len as usize).to_vec();
            (lib.freecode)(&mut program);
            Ok(code)
        };
        (lib.close)(handle);
        result
    }
}
