//! The kernel's BTF (`/sys/kernel/btf/vmlinux`) read once, and cut down to the types a BPF
//! object's CO-RE relocations can match, so that relocating the object does not scan the
//! kernel's whole type graph.
//!
//! aya-obj's relocation (`find_candidates`) looks for each of the object's relocated types
//! among every kernel type of its kind, naming each: ten types against 126,585 kernel types
//! (10,679 structs) take 8 ms, longer than verifying the programs. The subset made here holds
//! the kernel types that bear the name of a type of the object, and what they hold by value
//! (members, arrays, typedefs and modifiers), renumbered: pointers keep their kind and point to
//! `void`. That is all the relocation reads of a candidate: field relocations accept any
//! pointer as compatible with a pointer and any struct with a struct (libbpf's
//! `bpf_core_fields_are_compat`, aya-obj's `fields_are_compatible`), and walk members by value
//! only. Type relocations (a type's id, existence or size) would see the renumbering and the
//! pointers' lost targets; the committed objects have none, and the tests relocate each of them
//! against the subset and against the whole BTF and compare the code.
//! Like `bpftool gen min_core_btf`, which keeps only the members read, this keeps the types.

use std::io;
use std::ops::Deref;

use aya::Btf;
use rustc_hash::{FxHashMap, FxHashSet};

/// Where the kernel publishes its BTF (CONFIG_DEBUG_INFO_BTF).
pub(crate) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// `BTF_MAGIC` (include/uapi/linux/btf.h), in the byte order of the machine that wrote it.
const BTF_MAGIC: u16 = 0xeb9f;
/// `struct btf_header`: magic, version, flags, then five u32 (hdr_len, type_off, type_len,
/// str_off, str_len).
const HEADER_LEN: usize = 24;
/// `struct btf_type`: name_off, info, size or type.
const TYPE_LEN: usize = 12;

/// `BTF_KIND_*` (include/uapi/linux/btf.h).
mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const FWD: u32 = 7;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const FLOAT: u32 = 16;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

/// The bytes of `/sys/kernel/btf/vmlinux`: mapped where the kernel allows it (Linux 6.16,
/// `btf_sysfs_vmlinux_mmap`: no copy of its 5 MB), else read.
pub(crate) enum VmlinuxBtf {
    /// A private read-only mapping of the file.
    Mapped { addr: *mut libc::c_void, len: usize },
    /// The file read into memory.
    Read(Vec<u8>),
}

// SAFETY: the mapping is read-only and private to this value, which unmaps it only on drop;
// shared references only read it.
unsafe impl Send for VmlinuxBtf {}
// SAFETY: as above: nothing writes through the mapping.
unsafe impl Sync for VmlinuxBtf {}

impl VmlinuxBtf {
    /// Maps or reads the kernel's BTF.
    pub fn read() -> io::Result<VmlinuxBtf> {
        let file = std::fs::File::open(VMLINUX_BTF)?;
        let len = usize::try_from(file.metadata()?.len()).unwrap_or(0);
        if len >= HEADER_LEN {
            use std::os::fd::AsRawFd;
            // SAFETY: a new private read-only mapping of `len` bytes of an open file; the
            // result is checked before use and unmapped once, on drop.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            if addr != libc::MAP_FAILED {
                return Ok(VmlinuxBtf::Mapped { addr, len });
            }
        }
        std::fs::read(VMLINUX_BTF).map(VmlinuxBtf::Read)
    }

    /// aya's reading of the whole BTF, from these bytes.
    pub fn parse(&self) -> Result<Btf, aya::BtfError> {
        Btf::parse(self, object::Endianness::default())
    }
}

impl Deref for VmlinuxBtf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            // SAFETY: the mapping is `len` readable bytes for as long as `self` lives.
            VmlinuxBtf::Mapped { addr, len } => unsafe {
                std::slice::from_raw_parts(addr.cast::<u8>(), *len)
            },
            VmlinuxBtf::Read(bytes) => bytes,
        }
    }
}

impl Drop for VmlinuxBtf {
    fn drop(&mut self) {
        if let VmlinuxBtf::Mapped { addr, len } = *self {
            // SAFETY: the mapping made in `read`, unmapped once; no slice of it outlives self.
            unsafe { libc::munmap(addr, len) };
        }
    }
}

/// A BTF blob's type section walked once: where each type id starts, for the lookups and the
/// subset below to share. Ids count from 1 (0 is `void`). `None` from any reader: the blob is
/// not BTF of this machine's byte order, or holds a kind this reader does not know (a newer
/// kernel's), or runs past its end.
pub(crate) struct RawBtf<'a> {
    types: &'a [u8],
    strings: &'a [u8],
    /// Byte offset in `types` of each id; `starts[0]` stands for `void`.
    starts: Vec<u32>,
}

/// Whether `blob` starts with `BTF_MAGIC` (.BTF and .BTF.ext alike) in this machine's order.
fn has_btf_magic(blob: &[u8]) -> bool {
    blob.get(0..2)
        .is_some_and(|m| u16::from_ne_bytes([m[0], m[1]]) == BTF_MAGIC)
}

fn word(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// Bytes after the `struct btf_type` of a type of `kind` with `vlen` entries, or `None` for a
/// kind not known here.
fn trailing_len(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        kind::INT | kind::VAR | kind::DECL_TAG => 4,
        kind::ARRAY => 12,
        kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 12 * vlen,
        kind::ENUM | kind::FUNC_PROTO => 8 * vlen,
        kind::PTR
        | kind::FWD
        | kind::TYPEDEF
        | kind::VOLATILE
        | kind::CONST
        | kind::RESTRICT
        | kind::FUNC
        | kind::FLOAT
        | kind::TYPE_TAG => 0,
        _ => return None,
    })
}

/// A type's kind and vlen, from its info word.
fn kind_vlen(info: u32) -> (u32, usize) {
    ((info >> 24) & 0x1f, (info & 0xffff) as usize)
}

impl<'a> RawBtf<'a> {
    /// Walks `blob` (the bytes of [`VMLINUX_BTF`], or any BTF of this machine's byte order).
    pub(crate) fn read(blob: &'a [u8]) -> Option<RawBtf<'a>> {
        if !has_btf_magic(blob) {
            return None;
        }
        let section = |off: usize, len: usize| -> Option<&'a [u8]> {
            let hdr_len = word(blob, 4)? as usize;
            let start = hdr_len.checked_add(word(blob, off)? as usize)?;
            blob.get(start..start.checked_add(word(blob, len)? as usize)?)
        };
        let types = section(8, 12)?;
        let strings = section(16, 20)?;
        let mut starts = Vec::with_capacity(types.len() / 16);
        starts.push(0);
        let mut at = 0;
        while at < types.len() {
            starts.push(u32::try_from(at).ok()?);
            let (kind, vlen) = kind_vlen(word(types, at + 4)?);
            at += TYPE_LEN + trailing_len(kind, vlen)?;
        }
        (at == types.len()).then_some(RawBtf {
            types,
            strings,
            starts,
        })
    }

    /// The string at `offset` of the string section (empty when out of it).
    fn string(&self, offset: u32) -> &'a [u8] {
        let rest = self.strings.get(offset as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())]
    }

    /// Type `id`'s name (empty for an anonymous one).
    fn name(&self, id: usize) -> Option<&'a [u8]> {
        let (at, _, _) = self.header(id)?;
        Some(self.string(word(self.types, at)?))
    }

    /// Type `id`'s offset, kind and vlen.
    fn header(&self, id: usize) -> Option<(usize, u32, usize)> {
        let at = *self.starts.get(id)? as usize;
        let (kind, vlen) = kind_vlen(word(self.types, at + 4)?);
        Some((at, kind, vlen))
    }

    /// The id of the function `name`, as aya's `id_by_type_name_kind` finds it; `None` when
    /// there is none.
    pub(crate) fn function_id(&self, name: &str) -> Option<u32> {
        (1..self.starts.len())
            .find(|&id| {
                self.header(id).is_some_and(|(_, k, _)| k == kind::FUNC)
                    && self.name(id) == Some(name.as_bytes())
            })
            .and_then(|id| u32::try_from(id).ok())
    }

    /// The types `id` holds by value: the edges the relocation walks from a candidate.
    fn held_by_value(&self, id: usize, out: &mut Vec<u32>) -> Option<()> {
        let (at, kind, vlen) = self.header(id)?;
        match kind {
            kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                out.push(word(self.types, at + 8)?)
            }
            kind::ARRAY => {
                out.push(word(self.types, at + TYPE_LEN)?);
                out.push(word(self.types, at + TYPE_LEN + 4)?);
            }
            kind::STRUCT | kind::UNION => {
                for m in 0..vlen {
                    out.push(word(self.types, at + TYPE_LEN + 12 * m + 4)?);
                }
            }
            kind::FUNC_PROTO => {
                out.push(word(self.types, at + 8)?);
                for p in 0..vlen {
                    out.push(word(self.types, at + TYPE_LEN + 8 * p + 4)?);
                }
            }
            _ => {}
        }
        Some(())
    }
}

/// A name without its CO-RE flavour (`sock___old` matches `sock`), as relocation compares.
fn flavorless(name: &[u8]) -> &[u8] {
    name.windows(3)
        .position(|w| w == b"___")
        .map_or(name, |at| &name[..at])
}

/// `enum bpf_core_relo_kind` (include/uapi/linux/bpf.h): the relocations of a field
/// (BPF_CORE_FIELD_BYTE_OFFSET to BPF_CORE_FIELD_RSHIFT_U64), of the object's own type id
/// (BPF_CORE_TYPE_ID_LOCAL) and of an enumerator (BPF_CORE_ENUMVAL_EXISTS, _VALUE). The others
/// (a kernel type's id, existence, size or match) read what the subset renumbers or cuts.
fn relocation_kind_allowed(kind: u32) -> bool {
    matches!(kind, 0..=6 | 10 | 11)
}

/// Whether every CO-RE relocation of the object (`.BTF.ext`'s core_relo records, as libbpf's
/// `btf_ext__new` reads them) is of a kind the subset answers as the whole BTF would; `None`
/// when they cannot be read.
fn relocations_allowed(btf_ext: &[u8]) -> Option<bool> {
    if !has_btf_magic(btf_ext) {
        return None;
    }
    // struct btf_ext_header: magic, version, flags, hdr_len, then func_info, line_info and
    // (from 32 bytes on) core_relo offset and length, each from the header's end.
    let hdr_len = word(btf_ext, 4)? as usize;
    if hdr_len < 32 {
        return Some(true); // no CO-RE relocations
    }
    let start = hdr_len.checked_add(word(btf_ext, 24)? as usize)?;
    let relos = btf_ext.get(start..start.checked_add(word(btf_ext, 28)? as usize)?)?;
    if relos.is_empty() {
        return Some(true);
    }
    // The record size, then per section: its name, its count, its records
    // (struct bpf_core_relo: insn_off, type_id, access_str_off, kind).
    let record = word(relos, 0)? as usize;
    if record < 16 {
        return None;
    }
    let mut at = 4;
    while at < relos.len() {
        let count = word(relos, at + 4)? as usize;
        at += 8;
        for _ in 0..count {
            if !relocation_kind_allowed(word(relos, at + 12)?) {
                return Some(false);
            }
            at += record;
        }
    }
    Some(true)
}

/// The flavourless names of the named types of a BPF object's BTF (its `.BTF` section), when
/// every CO-RE relocation of the object (its `.BTF.ext`) is one the subset answers; `None` when
/// it has no BTF, or another relocation.
fn object_type_names(object: &[u8]) -> Option<FxHashSet<Vec<u8>>> {
    use object::{Object, ObjectSection};
    let elf = object::File::parse(object).ok()?;
    if let Some(ext) = elf.section_by_name(".BTF.ext") {
        if !relocations_allowed(ext.data().ok()?)? {
            return None;
        }
    }
    let btf = RawBtf::read(elf.section_by_name(".BTF")?.data().ok()?)?;
    let mut names = FxHashSet::default();
    for id in 1..btf.starts.len() {
        let name = btf.name(id)?;
        if !name.is_empty() {
            names.insert(flavorless(name).to_vec());
        }
    }
    Some(names)
}

impl RawBtf<'_> {
    /// The subset of this BTF (the kernel's) that `object`'s CO-RE relocations can match,
    /// parsed; `None` when the object's cannot be read here or are not all of fields and
    /// enumerators (the caller relocates against the whole BTF, as before).
    pub(crate) fn relocation_subset(&self, object: &[u8]) -> Option<Btf> {
        subset_of(self, &object_type_names(object)?)
    }
}

/// The kernel types of `btf` named in `names` and what they hold by value, renumbered, parsed.
fn subset_of(btf: &RawBtf, names: &FxHashSet<Vec<u8>>) -> Option<Btf> {
    let count = btf.starts.len();
    // The candidates: kernel types named as a type of the object, of a kind a relocation can
    // start from (functions, variables, sections and tags are none).
    let mut pending: Vec<u32> = Vec::new();
    for id in 1..count {
        let (_, kind, _) = btf.header(id)?;
        if matches!(
            kind,
            kind::FUNC | kind::VAR | kind::DATASEC | kind::DECL_TAG
        ) {
            continue;
        }
        let name = btf.name(id)?;
        if !name.is_empty() && names.contains(flavorless(name)) {
            pending.push(u32::try_from(id).ok()?);
        }
    }
    // With what they hold by value.
    let mut kept = vec![false; count];
    while let Some(id) = pending.pop() {
        let id = id as usize;
        if id == 0 || id >= count || kept[id] {
            continue;
        }
        kept[id] = true;
        btf.held_by_value(id, &mut pending)?;
    }
    let mut renumbered = vec![0u32; count];
    let kept_ids = (0..count).filter(|&id| kept[id]);
    for (new_id, id) in (1u32..).zip(kept_ids) {
        renumbered[id] = new_id;
    }
    let blob = subset_blob(btf, &kept, &renumbered)?;
    Btf::parse(&blob, object::Endianness::default()).ok()
}

/// The BTF blob of the `kept` types of `btf`, renumbered, with their strings: references to a
/// type not kept (only pointers' targets) become `void`.
fn subset_blob(btf: &RawBtf, kept: &[bool], renumbered: &[u32]) -> Option<Vec<u8>> {
    let mut types: Vec<u8> = Vec::new();
    let mut strings: Vec<u8> = vec![0];
    let mut string_at: FxHashMap<u32, u32> = FxHashMap::default();
    let mut string = |offset: u32, strings: &mut Vec<u8>| -> Option<u32> {
        if offset == 0 {
            return Some(0);
        }
        if let Some(&at) = string_at.get(&offset) {
            return Some(at);
        }
        let at = u32::try_from(strings.len()).ok()?;
        strings.extend_from_slice(btf.string(offset));
        strings.push(0);
        string_at.insert(offset, at);
        Some(at)
    };
    let retarget = |types: &mut Vec<u8>, at: usize| -> Option<()> {
        let old = word(types, at)? as usize;
        let new = renumbered.get(old).copied().unwrap_or(0);
        types
            .get_mut(at..at + 4)?
            .copy_from_slice(&new.to_ne_bytes());
        Some(())
    };
    for id in (1..kept.len()).filter(|&id| kept[id]) {
        let (at, kind, vlen) = btf.header(id)?;
        let end = at + TYPE_LEN + trailing_len(kind, vlen)?;
        let start = types.len();
        types.extend_from_slice(btf.types.get(at..end)?);
        let name = string(word(&types, start)?, &mut strings)?;
        types[start..start + 4].copy_from_slice(&name.to_ne_bytes());
        match kind {
            kind::PTR
            | kind::TYPEDEF
            | kind::VOLATILE
            | kind::CONST
            | kind::RESTRICT
            | kind::TYPE_TAG
            | kind::FUNC_PROTO => retarget(&mut types, start + 8)?,
            kind::ARRAY => {
                retarget(&mut types, start + TYPE_LEN)?;
                retarget(&mut types, start + TYPE_LEN + 4)?;
            }
            _ => {}
        }
        // Entries that carry a name (members, enumerators, parameters) and, for members and
        // parameters, a type.
        let (stride, typed) = match kind {
            kind::STRUCT | kind::UNION => (12, true),
            kind::FUNC_PROTO => (8, true),
            kind::ENUM => (8, false),
            kind::ENUM64 => (12, false),
            _ => (0, false),
        };
        for entry in 0..if stride > 0 { vlen } else { 0 } {
            let at = start + TYPE_LEN + stride * entry;
            let name = string(word(&types, at)?, &mut strings)?;
            types[at..at + 4].copy_from_slice(&name.to_ne_bytes());
            if typed {
                retarget(&mut types, at + 4)?;
            }
        }
    }
    let mut blob = Vec::with_capacity(HEADER_LEN + types.len() + strings.len());
    blob.extend_from_slice(&BTF_MAGIC.to_ne_bytes());
    blob.extend_from_slice(&[1, 0]); // version 1, no flags
    let types_len = u32::try_from(types.len()).ok()?;
    let strings_len = u32::try_from(strings.len()).ok()?;
    for field in [HEADER_LEN as u32, 0, types_len, types_len, strings_len] {
        blob.extend_from_slice(&field.to_ne_bytes());
    }
    blob.extend_from_slice(&types);
    blob.extend_from_slice(&strings);
    Some(blob)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aya_obj::btf::BtfKind;
    use aya_obj::Object;

    /// The committed BPF objects whose relocations the loaders make against the subset.
    const OBJECTS: [(&str, &[u8]); 3] = [
        (
            "trace.bpf.o",
            aya::include_bytes_aligned!("../../../../bpf/trace.bpf.o"),
        ),
        (
            "nagle.bpf.o",
            aya::include_bytes_aligned!("../../../../bpf/nagle.bpf.o"),
        ),
        (
            "sockets.bpf.o",
            aya::include_bytes_aligned!("../../../../bpf/sockets.bpf.o"),
        ),
    ];

    /// Every instruction of the object `object` once relocated against `btf`.
    fn relocated(object: &[u8], btf: &Btf) -> Vec<(usize, u64, u8, u8, u8, i16, i32)> {
        let mut obj = Object::parse(object).expect("a committed object parses");
        obj.relocate_btf(btf).expect("the relocations resolve");
        let mut code = Vec::new();
        for ((section, address), function) in &obj.functions {
            for insn in &function.instructions {
                code.push((
                    *section,
                    *address,
                    insn.code,
                    insn.dst_reg(),
                    insn.src_reg(),
                    insn.off,
                    insn.imm,
                ));
            }
        }
        code
    }

    /// The subset of the BTF `kernel` for `object`, as the loaders make it.
    fn subset(kernel: &[u8], object: &[u8]) -> Option<Btf> {
        RawBtf::read(kernel)?.relocation_subset(object)
    }

    fn kernel() -> VmlinuxBtf {
        VmlinuxBtf::read().expect("this kernel publishes its BTF at /sys/kernel/btf/vmlinux")
    }

    #[test]
    fn relocations_against_the_subset_are_those_against_the_whole_btf() {
        let kernel = kernel();
        let whole = kernel.parse().expect("aya reads the kernel's BTF");
        for (name, object) in OBJECTS {
            let subset = subset(&kernel, object).expect("the subset is made");
            let expected = relocated(object, &whole);
            assert!(!expected.is_empty(), "{name} has code");
            assert_eq!(relocated(object, &subset), expected, "{name}");
        }
    }

    #[test]
    fn the_subset_holds_a_small_part_of_the_kernels_types() {
        let kernel = kernel();
        let whole = RawBtf::read(&kernel).expect("the kernel's BTF is read");
        let subset = subset(&kernel, OBJECTS[0].1).expect("the subset is made");
        let in_subset = subset.to_bytes();
        let subset = RawBtf::read(&in_subset).expect("the subset reads back");
        assert!(subset.starts.len() > 10, "{} types", subset.starts.len());
        assert!(
            subset.starts.len() * 20 < whole.starts.len(),
            "{} of {} types kept",
            subset.starts.len(),
            whole.starts.len()
        );
    }

    #[test]
    fn function_ids_are_those_aya_finds() {
        let kernel = kernel();
        let whole = kernel.parse().expect("aya reads the kernel's BTF");
        for name in ["bpf_iter_tcp", "tcp_sendmsg", "tcp_rcv_established"] {
            assert_eq!(
                RawBtf::read(&kernel).and_then(|btf| btf.function_id(name)),
                whole.id_by_type_name_kind(name, BtfKind::Func).ok(),
                "{name}"
            );
        }
        let btf = RawBtf::read(&kernel).expect("the kernel's BTF is read");
        assert_eq!(btf.function_id("no_such_function_here"), None);
    }

    /// An object compiled from `body`, the C body of a `tp_btf` program reading `t`, a
    /// `struct task_struct *` (clang with the BPF target, as scripts/build-bpf uses).
    fn compiled(body: &str) -> Vec<u8> {
        let clang = std::env::var("CLANG").unwrap_or_else(|_| {
            ["clang-14", "clang"]
                .into_iter()
                .find(|c| {
                    std::process::Command::new(c)
                        .arg("--version")
                        .output()
                        .is_ok()
                })
                .unwrap_or("clang-14")
                .to_string()
        });
        let dir = tempfile::tempdir().expect("a scratch directory");
        let source = dir.path().join("probe.bpf.c");
        let object = dir.path().join("probe.bpf.o");
        std::fs::write(
            &source,
            format!(
                "struct task_struct {{ int pid; }} __attribute__((preserve_access_index));\n\
                 __attribute__((section(\"tp_btf/sched_process_exit\"), used))\n\
                 int probe(unsigned long long *ctx) {{\n\
                 struct task_struct *t = (struct task_struct *)ctx[0];\n{body}\n}}\n\
                 char LICENSE[] __attribute__((section(\"license\"), used)) = \"GPL\";\n"
            ),
        )
        .expect("the source is written");
        let status = std::process::Command::new(&clang)
            .args(["-target", "bpf", "-O2", "-g", "-c"])
            .arg(&source)
            .arg("-o")
            .arg(&object)
            .status()
            .unwrap_or_else(|e| {
                panic!("{clang} runs (scripts/install-deps installs clang-14): {e}")
            });
        assert!(status.success(), "{clang} compiles the probe");
        std::fs::read(&object).expect("the object is read")
    }

    #[test]
    fn only_relocations_the_subset_answers_get_it() {
        let kernel = kernel();
        // A field's offset: answered by the subset.
        let field = compiled("return __builtin_preserve_field_info(t->pid, 0);");
        assert!(subset(&kernel, &field).is_some());
        // A kernel type's existence and size (BPF_CORE_TYPE_EXISTS, _SIZE): the whole BTF.
        for flag in [0, 1] {
            let body = format!("return __builtin_preserve_type_info(*t, {flag}) + t->pid;");
            let object = compiled(&body);
            assert!(subset(&kernel, &object).is_none(), "{body}");
        }
    }

    #[test]
    fn damaged_btf_gives_no_subset_and_no_panic() {
        let kernel = kernel();
        let object = OBJECTS[0].1;
        let mut cut_points = vec![0, 3, HEADER_LEN - 1, HEADER_LEN + 5, kernel.len() / 2];
        cut_points.push(kernel.len() - 1);
        for cut in cut_points {
            assert!(subset(&kernel[..cut], object).is_none(), "cut at {cut}");
        }
        // A kind no kernel has (31) in the first type.
        let mut unknown = kernel.to_vec();
        let hdr_len = word(&unknown, 4).expect("header") as usize;
        let first = hdr_len + word(&unknown, 8).expect("header") as usize;
        unknown[first + 7] = 0x1f;
        assert!(subset(&unknown, object).is_none());
        // Not an object, or not BTF at all.
        assert!(subset(&kernel, b"not an ELF object").is_none());
        assert!(subset(object, object).is_none());
    }
}
