//! A user-space call stack the kernel took at a write (BPF `bpf_get_stack` with
//! `BPF_F_USER_STACK`, `bpf/user_stack.h`), named: function and file:line where the module has
//! DWARF, the JIT's own names where the runtime writes a perf map (`/tmp/perf-PID.map`), the
//! module and offset otherwise. blazesym (by the libbpf maintainers) reads the process's maps,
//! ELF symbols, DWARF and perf maps; this module only says what the stack lacks and how to get
//! more. The process must still run: its maps are read when the hold is reported.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use blazesym::normalize::{Normalizer, UserMeta};
use blazesym::symbolize::source::{Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::Pid;
use serde::Serialize;

use super::record::RecordBytes;

/// One frame of a stack, innermost first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// The function (demangled), from ELF symbols, DWARF or a perf map; `None`: unknown.
    pub function: Option<String>,
    /// The source file, from DWARF.
    pub file: Option<String>,
    /// The line in `file` of the instruction (of the call, for a caller).
    pub line: Option<u32>,
    /// The file mapped at the address (`None`: anonymous memory, such as JIT code).
    pub module: Option<String>,
    /// The address's offset in `module` (the absolute address when there is no module).
    pub offset: u64,
}

/// A write's call stack, named, and what it lacks in words with how to get it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallStack {
    /// Its frames, innermost first (the syscall wrapper, then its callers).
    pub frames: Vec<Frame>,
    /// What is missing and what to do, when something is.
    pub missing: Option<String>,
}

/// Where a held write and the write before it were made (`watch --kernel`, `trace`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallSites {
    /// The call stack of the held write.
    pub held: CallStack,
    /// The call stack of the write before it, whose small segment the hold waited behind;
    /// `None` when the kernel had not seen it.
    pub previous: Option<CallStack>,
}

/// The stacks of a held write and of the write before it as the kernel took them
/// (`struct hold_stacks`); `None`: not taken, or not seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawSites {
    /// The held write's.
    pub held: Option<RawStack>,
    /// The write before it's.
    pub previous: Option<RawStack>,
}

impl RawSites {
    /// The `struct hold_stacks` at `at` of a record.
    pub(crate) fn parse(rec: &RecordBytes<'_>, at: usize) -> RawSites {
        RawSites {
            held: RawStack::parse(rec, at),
            previous: RawStack::parse(rec, at + USER_STACK_LEN),
        }
    }
}

/// The stack as the kernel took it (`struct user_stack`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawStack {
    /// The process whose address space the addresses are in.
    pub pid: u32,
    /// The instruction pointer, then the return addresses found by frame pointers.
    pub ips: Vec<u64>,
    /// The words at the top of the user stack at the syscall: among them the syscall
    /// wrapper's return address, its caller, which the frame-pointer walk skips.
    pub top: Vec<u64>,
    /// Only the calling line was kept (`ips` is the instruction pointer alone, not walked):
    /// a write of a process before its first hold.
    pub line_only: bool,
}

/// Frames the kernel keeps of a stack (`STACK_FRAMES` in `bpf/user_stack.h`).
pub const STACK_FRAMES: usize = 32;

/// Words kept of the top of the user stack (`STACK_TOP_WORDS`).
pub const STACK_TOP_WORDS: usize = 8;

/// The BPF objects' switch for the call stacks (`take_stacks` in `bpf/user_stack.h`): 0 is
/// `--no-stacks`.
pub const TAKE_STACKS_GLOBAL: &str = "take_stacks";

/// The maps of `bpf/user_stack.h` that keep stacks between writes: a loader taking no stacks
/// makes them with one entry, not the thousands preallocated.
pub const STACK_MAPS: [&str; 2] = ["last_send", "holding"];

/// Size of `struct user_stack` (`bpf/user_stack.h`).
pub const USER_STACK_LEN: usize = 336;

/// Where each field of `struct user_stack` lies, from its start (checked against the C struct
/// by the record parsers' layout tests).
pub mod user_stack_at {
    pub const IPS: usize = 0;
    pub const TOP: usize = 256;
    pub const TGID: usize = 320;
    pub const FRAMES: usize = 324;
    pub const LINE_ONLY: usize = 332;
}

impl RawStack {
    /// The `struct user_stack` at `at` of a record; `None` when no stack was taken (or the
    /// record is short).
    pub(crate) fn parse(rec: &RecordBytes<'_>, at: usize) -> Option<RawStack> {
        let frames = usize::try_from(rec.u32(at + user_stack_at::FRAMES)?).ok()?;
        if frames == 0 {
            return None;
        }
        let mut ips = (0..frames.min(STACK_FRAMES))
            .map(|i| rec.u64(at + user_stack_at::IPS + 8 * i))
            .collect::<Option<Vec<u64>>>()?;
        // A walk that read a null return address (a broken frame chain) ends there.
        if let Some(end) = ips.iter().position(|ip| *ip == 0) {
            ips.truncate(end);
        }
        Some(RawStack {
            pid: rec.u32(at + user_stack_at::TGID)?,
            ips,
            top: (0..STACK_TOP_WORDS)
                .map(|i| rec.u64(at + user_stack_at::TOP + 8 * i))
                .collect::<Option<Vec<u64>>>()?,
            line_only: rec.u32(at + user_stack_at::LINE_ONLY)? != 0,
        })
    }
}

/// Functions a stack ends in when it is whole: a process's or a thread's entry.
const ENTRIES: [&str; 7] = [
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "clone3",
    "thread_start",
];

/// Names stacks; keeps the files it has read (ELF, DWARF, perf maps) between calls.
#[derive(Debug)]
pub struct StackNamer {
    symbolizer: Symbolizer,
    normalizer: Normalizer,
}

impl Default for StackNamer {
    fn default() -> Self {
        StackNamer {
            // A perf map grows while the runtime runs: read again when it changed.
            symbolizer: Symbolizer::builder().enable_auto_reload(true).build(),
            normalizer: Normalizer::builder().enable_build_ids(false).build(),
        }
    }
}

impl StackNamer {
    /// Names the stacks of a held write and of the write before it, as the kernel took them
    /// (`None`: not taken, or not seen).
    pub fn name_sites(&self, sites: &RawSites) -> CallSites {
        CallSites {
            held: self.name(
                sites.held.as_ref().unwrap_or(&RawStack::default()),
                STACK_FRAMES,
            ),
            previous: sites
                .previous
                .as_ref()
                .map(|raw| self.name(raw, STACK_FRAMES)),
        }
    }

    /// Names `raw`, whose full depth was `depth` frames: a stack that fills it may go on.
    pub fn name(&self, raw: &RawStack, depth: usize) -> CallStack {
        if raw.ips.is_empty() {
            return CallStack {
                frames: Vec::new(),
                missing: Some(
                    "no user stack: the kernel could read none at the write (a kernel thread, \
                     or the stack's memory was not present)"
                        .into(),
                ),
            };
        }
        let addrs = addresses(raw);
        // A return address points past its call: the call's line is the byte before.
        let looked_up: Vec<u64> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| if i == 0 { *a } else { a.saturating_sub(1) })
            .collect();
        let pid = Pid::from(raw.pid);
        let mut frames: Vec<Frame> = looked_up
            .iter()
            .map(|a| Frame {
                offset: *a,
                ..Frame::default()
            })
            .collect();
        if let Ok(normalized) = self.normalizer.normalize_user_addrs(pid, &looked_up) {
            for (frame, (offset, meta)) in frames.iter_mut().zip(&normalized.outputs) {
                if let Some(UserMeta::Elf(elf)) = normalized.meta.get(*meta) {
                    frame.module = Some(elf.path.display().to_string());
                    frame.offset = *offset;
                }
            }
        }
        let source = Source::Process(Process::new(pid));
        let gone = match self
            .symbolizer
            .symbolize(&source, Input::AbsAddr(&looked_up))
        {
            Ok(symbols) => {
                for (frame, symbol) in frames.iter_mut().zip(symbols) {
                    if let Symbolized::Sym(sym) = symbol {
                        frame.function = Some(sym.name.into_owned());
                        if let Some(code) = sym.code_info {
                            frame.file = Some(code.to_path().display().to_string());
                            frame.line = code.line;
                        }
                    }
                }
                false
            }
            Err(_) => true,
        };
        let missing = if gone {
            Some(format!(
                "process {} has gone: its stack cannot be named (its maps are read when the hold \
                 is reported)",
                raw.pid
            ))
        } else {
            missing(&frames, raw.ips.len() >= depth, raw.line_only)
        };
        CallStack { frames, missing }
    }
}

/// The addresses to name: the kernel's, with the syscall wrapper's return address put back
/// after the first: the lowest word of the stack's top that is a return address (x86-64: in
/// executable memory, after a call instruction), unless the walk has it already.
fn addresses(raw: &RawStack) -> Vec<u64> {
    let mut addrs = raw.ips.clone();
    if !cfg!(target_arch = "x86_64") || raw.top.iter().all(|w| *w == 0) {
        return addrs;
    }
    let code = executable_ranges(raw.pid);
    let Ok(mem) = File::open(format!("/proc/{}/mem", raw.pid)) else {
        return addrs;
    };
    let returns_here = |w: &&u64| code.iter().any(|r| r.contains(*w)) && follows_call(&mem, **w);
    if let Some(ret) = raw.top.iter().find(returns_here) {
        if raw.ips.get(1) != Some(ret) {
            addrs.insert(1, *ret);
        }
    }
    addrs
}

/// Whether the code before `addr` in `mem` (/proc/PID/mem) is a call instruction (x86-64:
/// `call rel32` E8, `call *reg` FF D0+r, `call *[reg+disp8]` FF 50+r, `call *[rip+disp32]`
/// FF 15): where a call returns to, not a pointer to data.
fn follows_call(mem: &File, addr: u64) -> bool {
    let mut before = [0u8; 7];
    if addr < 7 || mem.read_exact_at(&mut before, addr - 7).is_err() {
        return false;
    }
    before[2] == 0xe8
        || (before[5] == 0xff && (0xd0..=0xd7).contains(&before[6]))
        || (before[4] == 0xff && (0x50..=0x57).contains(&before[5]))
        || (before[1] == 0xff && before[2] == 0x15)
}

/// The executable mappings of `pid` (/proc/PID/maps); none when it cannot be read.
fn executable_ranges(pid: u32) -> Vec<std::ops::Range<u64>> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, perms) = (fields.next()?, fields.next()?);
            let (start, end) = range.split_once('-')?;
            let range = u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?;
            perms.contains('x').then_some(range)
        })
        .collect()
}

/// What the named frames lack, in words with the remedy; `full`: the stack filled the
/// kernel's buffer, so it may go on beyond; `line_only`: only the calling line was kept.
fn missing(frames: &[Frame], full: bool, line_only: bool) -> Option<String> {
    let mut said = Vec::new();
    if let Some(anon) = frames
        .iter()
        .find(|f| f.function.is_none() && f.module.is_none())
    {
        said.push(format!(
            "{:#x} is in anonymous memory with no perf map: JIT code; have the runtime write \
             /tmp/perf-PID.map (Java: -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit or \
             perf-map-agent, with -XX:+PreserveFramePointer; Node.js: --perf-basic-prof; \
             Python 3.12: -X perf)",
            anon.offset
        ));
    }
    if let Some(module) = frames
        .iter()
        .filter(|f| f.function.is_none())
        .find_map(|f| f.module.as_deref())
    {
        said.push(format!(
            "{} has no symbols (stripped): install its debug symbols (Debian: its -dbgsym \
             package) or build it with -g",
            file_name(module)
        ));
    }
    if frames.iter().all(|f| f.line.is_none()) {
        if let Some(module) = frames.iter().skip(1).find_map(|f| f.module.as_deref()) {
            said.push(format!(
                "no file:line: {} has no DWARF (build with -g, or install its debug symbols)",
                file_name(module)
            ));
        }
    }
    let last = frames.last().and_then(|f| f.function.as_deref());
    let whole = last.is_some_and(|name| ENTRIES.contains(&name));
    if line_only {
        said.push(
            "only the line that wrote was kept, not its callers: the write came before the              process's first hold, and whole stacks are taken from then on"
                .to_string(),
        );
    } else if full && !whole {
        said.push(format!(
            "the stack goes on past the {} frames kept",
            frames.len()
        ));
    } else if !whole {
        said.push(format!(
            "the stack stops after {} frames: the frame-pointer walk broke, in code built \
             without frame pointers (build with -fno-omit-frame-pointer; Java: \
             -XX:+PreserveFramePointer) or in a C library call that reuses the frame register \
             (glibc's multi-threaded send and write)",
            frames.len()
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

fn file_name(module: &str) -> &str {
    Path::new(module)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(module)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: Option<&str>, line: Option<u32>, module: Option<&str>) -> Frame {
        Frame {
            function: function.map(String::from),
            file: line.map(|_| "client.c".into()),
            line,
            module: module.map(String::from),
            offset: 0x1234,
        }
    }

    #[test]
    fn a_whole_stack_with_lines_lacks_nothing() {
        let frames = [
            frame(Some("write"), None, Some("/usr/lib/libc.so.6")),
            frame(Some("send_body"), Some(12), Some("/tmp/client")),
            frame(Some("main"), Some(30), Some("/tmp/client")),
            frame(
                Some("__libc_start_call_main"),
                None,
                Some("/usr/lib/libc.so.6"),
            ),
        ];
        assert_eq!(missing(&frames, false, false), None);
    }

    #[test]
    fn what_a_stack_lacks_is_said_with_its_remedy() {
        let stripped = [
            frame(Some("write"), None, Some("/usr/lib/libc.so.6")),
            frame(None, None, Some("/usr/bin/server")),
        ];
        let said = missing(&stripped, false, false).expect("something is missing");
        assert!(said.contains("server has no symbols"), "{said}");
        assert!(said.contains("no file:line: server has no DWARF"), "{said}");
        assert!(said.contains("-fno-omit-frame-pointer"), "{said}");
        let jit = [
            frame(Some("write"), None, Some("/usr/lib/libc.so.6")),
            frame(None, None, None),
        ];
        let said = missing(&jit, false, false).expect("something is missing");
        assert!(said.contains("--perf-basic-prof"), "{said}");
        let deep = vec![frame(Some("f"), Some(1), Some("/bin/x")); 3];
        let said = missing(&deep, true, false).expect("something is missing");
        assert!(said.contains("goes on past the 3 frames"), "{said}");
        let line = [
            frame(Some("write"), None, Some("/usr/lib/libc.so.6")),
            frame(Some("send_header"), Some(10), Some("/tmp/client")),
        ];
        let said = missing(&line, false, true).expect("the callers are missing");
        assert!(said.contains("only the line that wrote"), "{said}");
        assert!(!said.contains("frame-pointer walk broke"), "{said}");
    }

    #[test]
    fn a_stack_ends_at_a_null_return_address() {
        let mut rec = vec![0u8; USER_STACK_LEN];
        rec[0..8].copy_from_slice(&0x5555_0000_1000u64.to_ne_bytes());
        rec[16..24].copy_from_slice(&0x5555_0000_2000u64.to_ne_bytes());
        let tgid = user_stack_at::TGID;
        rec[tgid..tgid + 4].copy_from_slice(&42u32.to_ne_bytes());
        let frames = user_stack_at::FRAMES;
        rec[frames..frames + 4].copy_from_slice(&3u32.to_ne_bytes());
        let bytes = RecordBytes::new(&rec, USER_STACK_LEN).expect("a whole record");
        let raw = RawStack::parse(&bytes, 0).expect("a stack");
        assert_eq!((raw.pid, raw.ips), (42, vec![0x5555_0000_1000]));
        rec[frames..frames + 4].copy_from_slice(&0u32.to_ne_bytes());
        let bytes = RecordBytes::new(&rec, USER_STACK_LEN).expect("a whole record");
        assert_eq!(RawStack::parse(&bytes, 0), None, "no stack taken");
    }

    #[test]
    fn an_empty_stack_says_so_and_a_stale_word_is_no_frame() {
        let namer = StackNamer::default();
        let named = namer.name(&RawStack::default(), 32);
        assert!(named.frames.is_empty());
        assert!(named.missing.is_some());
        // A word that is no code address of this process is not put in as a frame.
        let raw = RawStack {
            pid: std::process::id(),
            ips: vec![1, 2],
            top: vec![8, 0, 16],
            line_only: false,
        };
        assert_eq!(addresses(&raw), vec![1, 2]);
    }
}
