//! One record a BPF program wrote for user space (`struct hold`, `struct record`,
//! `struct sock_rec` in `bpf/*.bpf.c`): native byte order, each field at the offset its
//! parser names (checked against the C struct by `host::c_layout` in the tests).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A record of a known length; every read is `None` past its end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordBytes<'a>(&'a [u8]);

impl<'a> RecordBytes<'a> {
    /// The first `len` bytes of `bytes`; `None` when there are fewer (a short record).
    pub(crate) fn new(bytes: &'a [u8], len: usize) -> Option<RecordBytes<'a>> {
        bytes.get(..len).map(RecordBytes)
    }

    /// `n` bytes at `at`.
    pub(crate) fn bytes(&self, at: usize, n: usize) -> Option<&'a [u8]> {
        self.0.get(at..at.checked_add(n)?)
    }

    fn array<const N: usize>(&self, at: usize) -> Option<[u8; N]> {
        self.bytes(at, N)?.try_into().ok()
    }

    pub(crate) fn u8(&self, at: usize) -> Option<u8> {
        self.0.get(at).copied()
    }

    pub(crate) fn u16(&self, at: usize) -> Option<u16> {
        self.array(at).map(u16::from_ne_bytes)
    }

    pub(crate) fn u32(&self, at: usize) -> Option<u32> {
        self.array(at).map(u32::from_ne_bytes)
    }

    pub(crate) fn i32(&self, at: usize) -> Option<i32> {
        self.array(at).map(i32::from_ne_bytes)
    }

    pub(crate) fn u64(&self, at: usize) -> Option<u64> {
        self.array(at).map(u64::from_ne_bytes)
    }

    /// The 16-byte address at `at` of a socket of `family` (`AF_INET`: its first 4 bytes);
    /// `None` for another family.
    pub(crate) fn ip(&self, family: u16, at: usize) -> Option<IpAddr> {
        let a: [u8; 16] = self.array(at)?;
        match i32::from(family) {
            libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
            libc::AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(a))),
            _ => None,
        }
    }
}
