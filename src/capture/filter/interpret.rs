//! A classic BPF interpreter with the kernel's semantics (`___bpf_prog_run` after
//! `bpf_convert_filter`: a load past the end returns 0, division by zero returns 0), for
//! holding the two compilers to the same answers in the tests.

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

/// Runs `program` over `packet`: the bytes to keep, 0 to drop.
pub(crate) fn run(program: &[libc::sock_filter], packet: &Packet<'_>) -> u32 {
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    let load = |offset: u32, size: u32| -> Option<u32> {
        if (offset as i32) < 0 {
            let n = offset as i32 - libc::SKF_AD_OFF;
            return Some(match n {
                n if n == libc::SKF_AD_PROTOCOL => u32::from(packet.protocol),
                n if n == libc::SKF_AD_PKTTYPE => u32::from(packet.pkttype),
                n if n == libc::SKF_AD_IFINDEX => packet.ifindex,
                n if n == libc::SKF_AD_VLAN_TAG => u32::from(packet.vlan_tci.unwrap_or(0)),
                n if n == libc::SKF_AD_VLAN_TAG_PRESENT => u32::from(packet.vlan_tci.is_some()),
                other => panic!("ancillary load {other} not modelled"),
            });
        }
        let start = offset as usize;
        let bytes = packet.data.get(start..start.checked_add(size as usize)?)?;
        Some(bytes.iter().fold(0u32, |v, b| (v << 8) | u32::from(*b)))
    };
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
                    libc::BPF_ABS => match load(k, size) {
                        Some(v) => v,
                        None => return 0,
                    },
                    libc::BPF_IND => match load(x.wrapping_add(k), size) {
                        Some(v) => v,
                        None => return 0,
                    },
                    libc::BPF_IMM => k,
                    libc::BPF_MEM => mem[k as usize & 15],
                    libc::BPF_LEN => packet.data.len() as u32,
                    other => panic!("load mode {other:#x}"),
                }
            }
            libc::BPF_LDX => {
                x = match code & 0xe0 {
                    libc::BPF_IMM => k,
                    libc::BPF_MEM => mem[k as usize & 15],
                    libc::BPF_LEN => packet.data.len() as u32,
                    libc::BPF_MSH => match load(k, 1) {
                        Some(v) => 4 * (v & 0xf),
                        None => return 0,
                    },
                    other => panic!("ldx mode {other:#x}"),
                }
            }
            libc::BPF_ST => mem[k as usize & 15] = a,
            libc::BPF_STX => mem[k as usize & 15] = x,
            libc::BPF_ALU => {
                a = match code & 0xf0 {
                    libc::BPF_ADD => a.wrapping_add(src),
                    libc::BPF_SUB => a.wrapping_sub(src),
                    libc::BPF_MUL => a.wrapping_mul(src),
                    libc::BPF_DIV => match a.checked_div(src) {
                        Some(v) => v,
                        None => return 0,
                    },
                    libc::BPF_MOD => match a.checked_rem(src) {
                        Some(v) => v,
                        None => return 0,
                    },
                    libc::BPF_OR => a | src,
                    libc::BPF_AND => a & src,
                    libc::BPF_XOR => a ^ src,
                    libc::BPF_LSH => a.checked_shl(src).unwrap_or(0),
                    libc::BPF_RSH => a.checked_shr(src).unwrap_or(0),
                    libc::BPF_NEG => a.wrapping_neg(),
                    other => panic!("alu op {other:#x}"),
                }
            }
            libc::BPF_JMP => {
                let taken = match code & 0xf0 {
                    libc::BPF_JA => {
                        pc += k as usize;
                        continue;
                    }
                    libc::BPF_JEQ => a == src,
                    libc::BPF_JGT => a > src,
                    libc::BPF_JGE => a >= src,
                    libc::BPF_JSET => a & src != 0,
                    other => panic!("jump op {other:#x}"),
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            libc::BPF_RET => {
                return if code & 0x18 == libc::BPF_A { a } else { k };
            }
            libc::BPF_MISC => {
                if code & 0xf8 == libc::BPF_TAX {
                    x = a;
                } else {
                    a = x;
                }
            }
            other => panic!("class {other:#x}"),
        }
    }
    panic!("the program ran off its end")
}
