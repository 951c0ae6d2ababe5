//! Write strategies: the ways an application hands a message made of parts (head and body,
//! header and payload) to the kernel. Which one it picks decides whether Nagle's algorithm
//! (`tcp_nagle_check`) holds the last part back until the peer's delayed ACK.

use std::io::{self, BufWriter, IoSlice, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;

use serde::Serialize;
use socket2::SockRef;

use crate::host::sockopt;

/// How the parts of one message are written to a TCP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteStrategy {
    /// One `write` per part (write-write): the second part is a sub-MSS segment that Nagle
    /// holds while the first is unacknowledged.
    Split,
    /// The parts copied into one buffer and written once: one segment, nothing to hold.
    Single,
    /// One gathering `writev` of all parts: one segment, no copy.
    Writev,
    /// One `write` + `flush` per part through a `BufWriter`: flush only hands the bytes to the
    /// kernel, it does not push past Nagle, so this stalls like `Split`.
    BufferedFlush,
    /// TCP_CORK on, one `write` per part, TCP_CORK off: uncorking sends what was held at once
    /// (`__tcp_sock_set_cork` → `tcp_push_pending_frames`).
    CorkUncork,
    /// `send(MSG_MORE)` for every part but the last: the kernel corks for that call only
    /// (`tcp_sendmsg_locked` leaves the skb open), the last part pushes everything.
    MsgMore,
}

impl WriteStrategy {
    /// Whether each part reaches the kernel as a write of its own (write-write), so that
    /// Nagle may hold a later part behind an earlier one; the other strategies hand the
    /// kernel the whole message before anything is sent.
    pub fn writes_parts_apart(self) -> bool {
        matches!(self, WriteStrategy::Split | WriteStrategy::BufferedFlush)
    }

    /// Writes every part of one message to `stream` with this strategy.
    pub fn write_message(self, stream: &mut TcpStream, parts: &[&[u8]]) -> io::Result<()> {
        match self {
            WriteStrategy::Split => parts.iter().try_for_each(|part| stream.write_all(part)),
            WriteStrategy::Single => stream.write_all(&parts.concat()),
            WriteStrategy::Writev => write_all_vectored(stream, parts),
            WriteStrategy::BufferedFlush => {
                let mut writer = BufWriter::new(stream);
                parts.iter().try_for_each(|part| {
                    writer.write_all(part)?;
                    writer.flush()
                })
            }
            WriteStrategy::CorkUncork => {
                sockopt::set_cork(stream.as_fd(), true)?;
                let written = parts.iter().try_for_each(|part| stream.write_all(part));
                // Uncork even when a write failed, so that the socket is left as it was found.
                let uncorked = sockopt::set_cork(stream.as_fd(), false);
                written.and(uncorked)
            }
            WriteStrategy::MsgMore => {
                let socket = SockRef::from(&*stream);
                let last = parts.len().saturating_sub(1);
                for (index, part) in parts.iter().enumerate() {
                    let flags = if index < last { libc::MSG_MORE } else { 0 };
                    let mut rest: &[u8] = part;
                    while !rest.is_empty() {
                        match socket.send_with_flags(rest, flags) {
                            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                            Ok(sent) => rest = &rest[sent..],
                            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                            Err(err) => return Err(err),
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

/// `writev` until every byte of every part is written (std's `write_all_vectored` is unstable).
fn write_all_vectored(stream: &mut TcpStream, parts: &[&[u8]]) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut done = 0;
    while done < total {
        // Rebuild the slices past what was written: a short writev can end mid-part.
        let mut skip = done;
        let slices: Vec<IoSlice<'_>> = parts
            .iter()
            .filter_map(|part| {
                if skip >= part.len() {
                    skip -= part.len();
                    None
                } else {
                    let slice = IoSlice::new(&part[skip..]);
                    skip = 0;
                    Some(slice)
                }
            })
            .collect();
        match stream.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => done += written,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}
