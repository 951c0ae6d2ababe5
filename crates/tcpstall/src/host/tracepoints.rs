//! Loading tcpstall's committed BPF objects onto the kernel's BTF-typed tracepoints, shared by
//! every verb that reads the kernel's own hooks (`watch --kernel`, `trace`): the loader, why
//! a kernel refuses it (capability, BTF, a missing hook), and the clock the records carry.

use std::collections::HashMap;
use std::sync::Mutex;

use aya::programs::{BtfTracePoint, Program};
use aya::{Btf, Ebpf, EbpfLoader};

use super::kernel_btf::{RawBtf, VmlinuxBtf};

/// Why the kernel source cannot run, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// Not allowed to load BPF programs.
    #[error(
        "the kernel refused to load tcpstall's BPF programs ({0}): `watch --kernel` needs \
         CAP_BPF and CAP_PERFMON (or root), and a kernel whose lockdown allows BPF tracepoints; \
         run it as root, or use `tcpstall watch` (a packet capture, CAP_NET_RAW)"
    )]
    NotAllowed(String),
    /// The kernel has no BTF to type the tracepoints.
    #[error(
        "this kernel has no BTF ({0}): `watch --kernel` needs /sys/kernel/btf/vmlinux \
         (CONFIG_DEBUG_INFO_BTF); use `tcpstall watch` (a packet capture) instead"
    )]
    NoBtf(String),
    /// A tracepoint the programs need is missing, or the verifier refused a program.
    #[error(
        "cannot attach to the kernel's {hook} tracepoint ({why}); this kernel lacks the hook or \
         refused the program: use `tcpstall watch` (a packet capture) instead"
    )]
    Hook {
        /// The tracepoint.
        hook: &'static str,
        /// The loader's error.
        why: String,
    },
    /// Anything else the loader reported.
    #[error(
        "cannot load tcpstall's BPF programs: {0}; use `tcpstall watch` (a packet capture) instead"
    )]
    Load(String),
}

/// Whether the loader's error is a refusal (a missing capability or lockdown), not a fault.
fn refused(err: &dyn std::fmt::Display) -> bool {
    let text = err.to_string();
    [
        "EPERM",
        "Operation not permitted",
        "EACCES",
        "Permission denied",
    ]
    .iter()
    .any(|s| text.contains(s))
}

/// An error and its sources, as one line.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    // The chain of an error is short; the bound keeps a cyclic one from looping.
    for _ in 0..8 {
        let Some(s) = source else { break };
        // Some errors already print their source in their own message.
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// Loads a committed BPF object and attaches its programs, each a `tp_btf` program named as
/// its tracepoint, in `hooks`' order, with `globals` (name, value) written into the object's
/// `const volatile` globals (its .rodata) before the programs load (each must exist), and the
/// maps named in `sizes` made with the entries given instead of the object's (one for a map the
/// run will not use; names the object lacks are passed over). Dropping the result detaches them.
pub(crate) fn load_btf_tracepoints_with(
    object: &[u8],
    hooks: &[&'static str],
    globals: &[(&'static str, u64)],
    sizes: &[(&'static str, u32)],
) -> Result<Ebpf, KernelError> {
    // Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; later ones to the cgroup.
    // Raising it is harmless where it is not needed, and may fail unprivileged: ignored.
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct passed; no other memory is touched.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };

    // `EbpfLoader::new` reads and parses the kernel's whole BTF for itself (aya 0.13 has no
    // loader without it: 12 ms). Meanwhile another thread maps the same BTF once and makes
    // from it what the rest needs: the subset the object's relocations can match
    // (host/kernel_btf.rs), handed to the loader, which then relocates in 0.3 ms instead of 8;
    // and the whole BTF, whose ids the programs' attachments name. The loader's probes of what
    // the kernel supports (a millisecond of small loads, made once per process) run on a third
    // thread. Where a thread cannot be started, its work is done here, in turn.
    let (kernel, mut loader) = std::thread::scope(|scope| {
        let reading = std::thread::Builder::new().spawn_scoped(scope, || KernelTypes::read(object));
        let probing = std::thread::Builder::new().spawn_scoped(scope, aya::features);
        let loader = EbpfLoader::new();
        let kernel = match reading {
            Ok(reading) => reading.join(),
            Err(_) => Ok(KernelTypes::read(object)),
        };
        // Joined here rather than by the scope, which would raise that thread's panic as its
        // own.
        if let Ok(probing) = probing {
            let _ = probing.join();
        }
        (kernel, loader)
    });
    let KernelTypes { whole: btf, subset } = kernel
        .map_err(|_| KernelError::Load("the thread reading the kernel's BTF panicked".into()))?
        .map_err(|e| KernelError::NoBtf(chain(&e)))?;
    if let Some(subset) = &subset {
        // Frees the loader's own parse (2 ms): it is not needed any more.
        loader.btf(Some(subset));
    }
    for (name, value) in globals {
        loader.set_global(name, value, true);
    }
    for (name, entries) in sizes {
        loader.set_max_entries(name, *entries);
    }
    let mut bpf = loader.load(object).map_err(|e| {
        let text = chain(&e);
        if refused(&text) {
            KernelError::NotAllowed(text)
        } else {
            KernelError::Load(text)
        }
    })?;
    let attached = attach_all(&mut bpf, hooks, &btf, loader);
    // Freeing the parsed BTF takes 1.5 ms that nothing waits for (or, without a thread, here).
    let _ = std::thread::Builder::new().spawn(move || drop(btf));
    attached.map(|()| bpf)
}

/// The kernel's BTF as the loading needs it.
struct KernelTypes {
    /// All of it: the programs' attachments name their tracepoint by its id.
    whole: Btf,
    /// What the object's relocations can match, or `None` where it cannot be made (the loader
    /// relocates against its own parse of the whole, as it does by default).
    subset: Option<Btf>,
}

impl KernelTypes {
    /// Maps the kernel's BTF once and makes both from it; where it cannot be mapped or read
    /// here, or what was mapped does not parse, aya reads it as it does by default, and says
    /// why it cannot.
    fn read(object: &[u8]) -> Result<KernelTypes, aya::BtfError> {
        let mapped = VmlinuxBtf::read().ok().and_then(|bytes| {
            // The subset first: the loader needs it before the programs need the whole.
            let subset = RawBtf::read(&bytes).and_then(|btf| btf.relocation_subset(object));
            let whole = bytes.parse().ok()?;
            Some(KernelTypes { subset, whole })
        });
        match mapped {
            Some(types) => Ok(types),
            None => Ok(KernelTypes {
                whole: Btf::from_sys_fs()?,
                subset: None,
            }),
        }
    }
}

/// Loads each of `hooks`' programs (named as its tracepoint) into the kernel and attaches it,
/// on two threads taking the programs from one queue: the kernel verifies programs side by
/// side (`bpf_check` serialises only unprivileged loads), which halves the wait. The spent
/// `loader` (its BTF parse no longer needed) is freed on the second thread meanwhile. Of several
/// failures, the first hook's is returned, as a load in `hooks`' order would.
fn attach_all(
    bpf: &mut Ebpf,
    hooks: &[&'static str],
    btf: &Btf,
    loader: EbpfLoader<'_>,
) -> Result<(), KernelError> {
    let mut by_name: HashMap<&str, &mut Program> = bpf.programs_mut().collect();
    let mut queue = Vec::with_capacity(hooks.len());
    for (order, &hook) in hooks.iter().enumerate() {
        let program = by_name
            .remove(hook)
            .ok_or_else(|| KernelError::Load(format!("the object has no program {hook}")))?;
        let program: &mut BtfTracePoint = program
            .try_into()
            .map_err(|e| KernelError::Load(chain(&e)))?;
        queue.push((order, hook, program));
    }
    let queue = Mutex::new(queue.into_iter());
    let work = || {
        let mut failures = Vec::new();
        loop {
            // The queue's lock is held only to take the next program, never while loading.
            let next = queue.lock().ok().and_then(|mut programs| programs.next());
            let Some((order, hook, program)) = next else {
                return failures;
            };
            if let Err(err) = attach_one(hook, program, btf) {
                failures.push((order, err));
            }
        }
    };
    let failures = std::thread::scope(|scope| {
        let other = std::thread::Builder::new().spawn_scoped(scope, || {
            drop(loader);
            work()
        });
        let mut failures = work();
        match other.map(|other| other.join()) {
            Ok(Ok(theirs)) => failures.extend(theirs),
            Ok(Err(_)) => failures.push((
                usize::MAX,
                KernelError::Load("a thread loading the programs panicked".into()),
            )),
            // No second thread: this one took every program.
            Err(_) => {}
        }
        failures
    });
    match failures.into_iter().min_by_key(|(order, _)| *order) {
        Some((_, err)) => Err(err),
        None => Ok(()),
    }
}

/// Loads one `tp_btf` program onto tracepoint `hook` and attaches it.
fn attach_one(
    hook: &'static str,
    program: &mut BtfTracePoint,
    btf: &Btf,
) -> Result<(), KernelError> {
    let hook_err = |why: String| {
        if refused(&why) {
            KernelError::NotAllowed(format!("{hook}: {why}"))
        } else {
            KernelError::Hook { hook, why }
        }
    };
    program.load(hook, btf).map_err(|e| hook_err(chain(&e)))?;
    program.attach().map_err(|e| hook_err(chain(&e)))?;
    Ok(())
}

/// The time now on `clock`, ns.
pub(crate) fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec passed and nothing else.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec)
}
