//! Printing stalls as they are found, on a thread of its own: finding a socket's owner reads
//! /proc, which must not hold up the capture loop while the kernel's buffer fills.

use std::io::{self, Write};
use std::sync::mpsc::{Receiver, SyncSender};
use std::thread::JoinHandle;

use super::owner::{NoOwner, Owner, OwnerLookup};
use crate::detect::StallEvent;
use crate::report::model::watch::OwnerTally;
use crate::report::watch::{add_release, event_text, write_event_json};

/// Messages from the capture loop.
#[derive(Debug)]
pub enum ToPrinter {
    /// A stall to print.
    Stall(Box<StallEvent>),
    /// Flows that left the detector: their owners are forgotten.
    Retired(Vec<u64>),
    /// The process (pid, command) that wrote the next stall's held bytes, as the kernel saw it
    /// (`watch --kernel`): searched first for the socket, and named when the socket is in
    /// another network namespace.
    Writer(u32, String),
    /// What ended the next stall's hold, by name (`watch --kernel`): added to its rendering.
    Release(&'static str),
    /// A line rendered already (a hold that ended with its socket, `watch --kernel`).
    Line(String),
}

/// What the printer saw, returned when the channel closes.
#[derive(Debug, Default)]
pub struct Printed {
    /// Stalls by owning process.
    pub owners: OwnerTally,
    /// Stalls printed without an owner.
    pub without_owner: u64,
}

/// Messages queued before the capture loop waits for the printer: a burst of stalls is
/// absorbed; a sustained flood slows the loop, and the kernel's drop counter says so.
pub const QUEUE: usize = 4096;

/// Starts the printer: text blocks, or one JSON object per line with `json`.
pub fn spawn(json: bool) -> io::Result<(SyncSender<ToPrinter>, JoinHandle<io::Result<Printed>>)> {
    let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
    let handle = std::thread::Builder::new()
        .name("watch-printer".into())
        .spawn(move || print_all(&rx, json))?;
    Ok((tx, handle))
}

fn print_all(rx: &Receiver<ToPrinter>, json: bool) -> io::Result<Printed> {
    let mut lookup = OwnerLookup::new();
    let mut printed = Printed::default();
    let mut writer = None;
    let mut release = None;
    let mut buf = Vec::with_capacity(1024);
    for message in rx {
        match message {
            ToPrinter::Retired(ids) => {
                for id in ids {
                    lookup.forget(id);
                }
            }
            ToPrinter::Writer(pid, command) => {
                lookup.prefer(pid);
                writer = Some((pid, command));
            }
            ToPrinter::Release(name) => release = Some(name),
            ToPrinter::Line(line) => {
                let mut out = io::stdout().lock();
                out.write_all(line.as_bytes())?;
                out.flush()?;
            }
            ToPrinter::Stall(event) => {
                let owner = match (lookup.owner_of(&event), writer.take()) {
                    (Err(NoOwner::NotLocal), Some((pid, command))) => Ok(Owner::writer(
                        &event,
                        pid,
                        command,
                        "the socket is in another network namespace",
                    )),
                    // The kernel saw the held side write here: a socket found only for the
                    // other end is its peer's, the writer's own having closed since.
                    (Ok(found), Some((pid, command))) if found.side != event.finding.held_side => {
                        Ok(Owner::writer(
                            &event,
                            pid,
                            command,
                            "the socket has closed since",
                        ))
                    }
                    (found, _) => found,
                };
                if event.finding.kind.is_stall() {
                    match &owner {
                        Ok(o) => printed.owners.add(&event, o),
                        Err(_) => printed.without_owner += 1,
                    }
                }
                buf.clear();
                if json {
                    write_event_json(&mut buf, &event, owner.as_ref())?;
                    buf.push(b'\n');
                } else {
                    buf.extend_from_slice(event_text(&event, owner.as_ref()).as_bytes());
                }
                if let Some(name) = release.take() {
                    if json {
                        buf.pop(); // the newline, put back after the key
                    }
                    add_release(&mut buf, json, name);
                    if json {
                        buf.push(b'\n');
                    }
                }
                // Each stall is on the terminal (or the pipe) when it is found.
                let mut out = io::stdout().lock();
                out.write_all(&buf)?;
                out.flush()?;
            }
        }
    }
    Ok(printed)
}
