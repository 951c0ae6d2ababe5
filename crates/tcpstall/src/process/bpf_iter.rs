//! A BPF iterator (`bpf_iter`) loaded and read through the `bpf` syscall itself: aya 0.13 has
//! no iterator programs, so aya-obj (aya's object reader) parses the embedded object and
//! resolves its CO-RE relocations against the kernel's BTF, and this module loads the program
//! as `BPF_PROG_TYPE_TRACING` / `BPF_TRACE_ITER` on the kernel's `bpf_iter_TARGET`, creates its
//! link (`BPF_LINK_CREATE`) and reads one pass from a fresh iterator fd (`BPF_ITER_CREATE`,
//! then `read` until the end, as `cat` on a pinned iterator would).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use aya::Btf;
use aya_obj::btf::BtfKind;
use aya_obj::generated::bpf_insn;
use aya_obj::Object;

use crate::host::kernel_btf::{RawBtf, VmlinuxBtf};

/// `enum bpf_cmd` (include/uapi/linux/bpf.h).
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
/// `BPF_PROG_TYPE_TRACING` and its `BPF_TRACE_ITER` attach type.
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_ITER: u32 = 28;

/// What one pass may return at most: a record per socket, far below this on any host.
const MAX_PASS_BYTES: usize = 1 << 30;

/// Why the iterator cannot run, with what is missing.
#[derive(Debug, thiserror::Error)]
pub enum IterError {
    /// The kernel has no BTF to type the program.
    #[error("this kernel has no BTF ({0}): the socket iterator needs /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)")]
    NoBtf(String),
    /// The kernel has no iterator of this kind.
    #[error("this kernel has no `iter/{0}` BPF iterator (Linux 5.9 or later)")]
    NoTarget(String),
    /// Not allowed to load or attach BPF programs.
    #[error("the kernel refused the socket iterator ({0}): it needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, root), and a lockdown that allows BPF tracing")]
    NotAllowed(String),
    /// The object, the relocations or the verifier failed.
    #[error("cannot load the socket iterator: {0}")]
    Load(String),
}

/// A loaded iterator program and its link; each [`Iter::read_pass`] reads the kernel's objects
/// once. Dropping it closes both.
#[derive(Debug)]
pub struct Iter {
    _prog: OwnedFd,
    link: OwnedFd,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    core_relo_cnt: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    iter_info: u64,
    iter_info_len: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct IterCreateAttr {
    link_fd: u32,
    flags: u32,
}

/// `bpf(cmd, attr, sizeof attr)`: the new fd, or the errno.
fn bpf<T>(cmd: libc::c_long, attr: &T) -> io::Result<OwnedFd> {
    // SAFETY: attr is a live #[repr(C)] bpf_attr prefix of the size passed; the pointers inside
    // it (instructions, license, log) outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return of these commands is a new fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

fn refused(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EPERM))
}

impl Iter {
    /// Loads `program` of the BPF object `object` as the iterator of `target` (`tcp`: the
    /// kernel's `bpf_iter_tcp`) and creates its link.
    pub fn load(object: &[u8], program: &str, target: &str) -> Result<Iter, IterError> {
        let iterator = format!("bpf_iter_{target}");
        // The kernel's BTF mapped and walked once: the iterator's id and the subset the
        // relocations can match read from it take 2.5 ms; aya's parse of the whole BTF, the way
        // taken where those cannot be made (or the iterator is not found, to say so), takes 20.
        let kernel = VmlinuxBtf::read().ok();
        let fast = kernel
            .as_deref()
            .and_then(RawBtf::read)
            .and_then(|btf| Some((btf.function_id(&iterator)?, btf.relocation_subset(object)?)));
        let (attach_btf_id, btf) = match fast {
            Some(found) => found,
            None => {
                let btf = Btf::from_sys_fs().map_err(|e| IterError::NoBtf(e.to_string()))?;
                let id = btf
                    .id_by_type_name_kind(&iterator, BtfKind::Func)
                    .map_err(|_| IterError::NoTarget(target.to_string()))?;
                (id, btf)
            }
        };
        let mut obj = Object::parse(object).map_err(|e| IterError::Load(e.to_string()))?;
        obj.relocate_btf(&btf)
            .map_err(|e| IterError::Load(format!("CO-RE relocation: {e}")))?;
        let prog = obj
            .programs
            .get(program)
            .ok_or_else(|| IterError::Load(format!("the object has no program {program}")))?;
        let function = obj
            .functions
            .get(&prog.function_key())
            .ok_or_else(|| IterError::Load(format!("the object has no code for {program}")))?;
        let insns: &[bpf_insn] = &function.instructions;
        let license = CString::new("GPL").map_err(|e| IterError::Load(e.to_string()))?;
        let mut name = [0u8; 16];
        for (d, s) in name.iter_mut().zip(program.bytes().take(15)) {
            *d = s;
        }
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_TRACING,
            insn_cnt: u32::try_from(insns.len())
                .map_err(|_| IterError::Load("program too long".into()))?,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_name: name,
            expected_attach_type: BPF_TRACE_ITER,
            attach_btf_id,
            ..ProgLoadAttr::default()
        };
        let prog_fd = match bpf(BPF_PROG_LOAD, &attr) {
            Ok(fd) => fd,
            Err(err) if refused(&err) => return Err(IterError::NotAllowed(err.to_string())),
            Err(err) => {
                // Again with the verifier's log, to say why.
                let mut log = vec![0u8; 1 << 16];
                attr.log_level = 1;
                attr.log_size = log.len() as u32;
                attr.log_buf = log.as_mut_ptr() as u64;
                let _ = bpf(BPF_PROG_LOAD, &attr);
                let text = String::from_utf8_lossy(&log);
                let text = text.trim_end_matches('\0');
                let tail: Vec<&str> = text.lines().rev().take(3).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(IterError::Load(format!("{err}: {}", tail.join(" / "))));
            }
        };
        let link_attr = LinkCreateAttr {
            prog_fd: prog_fd.as_raw_fd() as u32,
            attach_type: BPF_TRACE_ITER,
            ..LinkCreateAttr::default()
        };
        let link = bpf(BPF_LINK_CREATE, &link_attr).map_err(|err| {
            if refused(&err) {
                IterError::NotAllowed(err.to_string())
            } else {
                IterError::Load(format!("BPF_LINK_CREATE: {err}"))
            }
        })?;
        Ok(Iter {
            _prog: prog_fd,
            link,
        })
    }

    /// One pass over the kernel's objects: everything the program wrote.
    pub fn read_pass(&self) -> io::Result<Vec<u8>> {
        let attr = IterCreateAttr {
            link_fd: self.link.as_raw_fd() as u32,
            flags: 0,
        };
        let fd = bpf(BPF_ITER_CREATE, &attr)?;
        let mut file = std::fs::File::from(fd);
        let mut out = Vec::with_capacity(1 << 16);
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match io::Read::read(&mut file, &mut buf) {
                Ok(0) => return Ok(out),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
            if out.len() > MAX_PASS_BYTES {
                return Err(io::Error::other(
                    "the socket iterator returned more than 1 GiB",
                ));
            }
        }
    }
}
