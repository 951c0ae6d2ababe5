//! A classic BPF interpreter with the kernel's semantics (`___bpf_prog_run` after
//! `bpf_convert_filter`: a load past the end returns 0, division by zero returns 0): it runs
//! the filter where no kernel does (packets read from netfilter's log), and holds the two
//! compilers to the same answers in the tests. An instruction it does not know (neither
//! compiler emits one) keeps the packet: a filter never drops in silence what it cannot judge.

/// A packet and the metadata the ancillary loads read.
pub(crate) struct Packet<'a> {
    pub(crate) data: &'a [u8],
    /// `skb->protocol`, host order.
    pub(crate) protocol: u16,
    pub(crate) pkttype: u8,
    pub(crate) ifindex: u32,
    /// The 802.1Q tag Linux stripped, if any.
    pub(crate) vlan_tci: Option<u16>,
}

/// Why a run ended before a return instruction.
enum Stop {
    /// A load past the packet's end, or a division by zero: the kernel drops the packet.
    Drop,
    /// An instruction or ancillary load this interpreter does not model.
    Unknown,
}

/// Runs `program` over `packet`: the bytes to keep, 0 to drop; `u32::MAX` (keep it all) when
/// the program holds an instruction not modelled here.
pub(crate) fn run(program: &[libc::sock_filter], packet: &Packet<'_>) -> u32 {
    match execute(program, packet) {
        Ok(keep) => keep,
        Err(Stop::Drop) => 0,
        Err(Stop::Unknown) => u32::MAX,
    }
}

fn load(packet: &Packet<'_>, offset: u32, size: u32) -> Result<u32, Stop> {
    if (offset as i32) < 0 {
        let n = offset as i32 - libc::SKF_AD_OFF;
        return match n {
            n if n == libc::SKF_AD_PROTOCOL => Ok(u32::from(packet.protocol)),
            n if n == libc::SKF_AD_PKTTYPE => Ok(u32::from(packet.pkttype)),
            n if n == libc::SKF_AD_IFINDEX => Ok(packet.ifindex),
            n if n == libc::SKF_AD_VLAN_TAG => Ok(u32::from(packet.vlan_tci.unwrap_or(0))),
            n if n == libc::SKF_AD_VLAN_TAG_PRESENT => Ok(u32::from(packet.vlan_tci.is_some())),
            _ => Err(Stop::Unknown),
        };
    }
    let start = offset as usize;
    let end = start.checked_add(size as usize).ok_or(Stop::Drop)?;
    let bytes = packet.data.get(start..end).ok_or(Stop::Drop)?;
    Ok(bytes.iter().fold(0u32, |v, b| (v << 8) | u32::from(*b)))
}

fn execute(program: &[libc::sock_filter], packet: &Packet<'_>) -> Result<u32, Stop> {
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    while let Some(insn) = program.get(pc) {
        pc += 1;
        let code = u32::from(insn.code);
        let k = insn.k;
        let size = match code & 0x18 {
            libc::BPF_W => 4,
            libc::BPF_H => 2,
            _ => 1,
        };
        let src = if code & libc::BPF_X != 0 { x } else { k };
        match code & 0x07 {
            libc::BPF_LD => {
                a = match code & 0xe0 {
                    libc::BPF_ABS => load(packet, k, size)?,
                    libc::BPF_IND => load(packet, x.wrapping_add(k), size)?,
                    libc::BPF_IMM => k,
                    libc::BPF_MEM => mem[k as usize & 15],
                    libc::BPF_LEN => packet.data.len() as u32,
                    _ => return Err(Stop::Unknown),
                }
            }
            libc::BPF_LDX => {
                x = match code & 0xe0 {
                    libc::BPF_IMM => k,
                    libc::BPF_MEM => mem[k as usize & 15],
                    libc::BPF_LEN => packet.data.len() as u32,
                    libc::BPF_MSH => 4 * (load(packet, k, 1)? & 0xf),
                    _ => return Err(Stop::Unknown),
                }
            }
            libc::BPF_ST => mem[k as usize & 15] = a,
            libc::BPF_STX => mem[k as usize & 15] = x,
            libc::BPF_ALU => {
                a = match code & 0xf0 {
                    libc::BPF_ADD => a.wrapping_add(src),
                    libc::BPF_SUB => a.wrapping_sub(src),
                    libc::BPF_MUL => a.wrapping_mul(src),
                    libc::BPF_DIV => a.checked_div(src).ok_or(Stop::Drop)?,
                    libc::BPF_MOD => a.checked_rem(src).ok_or(Stop::Drop)?,
                    libc::BPF_OR => a | src,
                    libc::BPF_AND => a & src,
                    libc::BPF_XOR => a ^ src,
                    libc::BPF_LSH => a.checked_shl(src).unwrap_or(0),
                    libc::BPF_RSH => a.checked_shr(src).unwrap_or(0),
                    libc::BPF_NEG => a.wrapping_neg(),
                    _ => return Err(Stop::Unknown),
                }
            }
            libc::BPF_JMP => {
                let taken = match code & 0xf0 {
                    libc::BPF_JA => {
                        pc = pc.saturating_add(k as usize);
                        continue;
                    }
                    libc::BPF_JEQ => a == src,
                    libc::BPF_JGT => a > src,
                    libc::BPF_JGE => a >= src,
                    libc::BPF_JSET => a & src != 0,
                    _ => return Err(Stop::Unknown),
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            libc::BPF_RET => return Ok(if code & 0x18 == libc::BPF_A { a } else { k }),
            libc::BPF_MISC => {
                if code & 0xf8 == libc::BPF_TAX {
                    x = a;
                } else {
                    a = x;
                }
            }
            _ => return Err(Stop::Unknown),
        }
    }
    // A program that runs off its end is refused by the kernel; keep what it cannot judge.
    Err(Stop::Unknown)
}
