//! Printing stalls as they are found, on a thread of its own: finding a socket's owner reads
//! /proc, which must not hold up the capture loop while the kernel's buffer fills. The capture
//! loop never waits for the printer: past [`QUEUE`] stalls waiting, stalls are counted (in the
//! summary and the metrics) but not printed, and the backlog is said.

use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::container::Containers;
use super::metrics::{Metrics, OwnerCosts, OwnerStalls, StallCounters};
use crate::detect::{KindCounts, StallEvent};
use crate::host::owner::{NoOwner, Owner, OwnerLookup};
use crate::report::call_sites;
use crate::report::fit_prose;
use crate::report::model::watch::{CallSites, OwnerTally};
use crate::report::watch::{
    add_release, cork_confirmed, event_text, undecided_text, write_event_json, write_undecided_json,
};

/// Messages from the capture loop.
#[derive(Debug)]
pub enum ToPrinter {
    /// A stall to print.
    Stall(Box<StallEvent>),
    /// A claim the capture set apart that the held socket's TCP_CORK settles: a stall when
    /// it is set, else printed as undecided for the reason named.
    AwaitingSocket(Box<StallEvent>, &'static str),
    /// Flows that left the detector: their owners are forgotten.
    Retired(Vec<u64>),
    /// The process (pid, command) that wrote the next stall's held bytes, as the kernel saw it
    /// (`watch --kernel`): searched first for the socket, and named when the socket is in
    /// another network namespace.
    Writer(u32, String),
    /// What ended the next stall's hold, by name (`watch --kernel`): added to its rendering.
    Release(&'static str),
    /// Where the next stall's held write and the write before it were made (`watch
    /// --kernel`): added to its rendering.
    CallSites(Box<CallSites>),
    /// A line rendered already (a hold that ended with its socket, `watch --kernel`).
    Line(String),
}

/// What the kernel saw of a hold (`watch --kernel`), printed with its stall.
#[derive(Debug)]
pub struct KernelSaw {
    /// The process that wrote the held bytes.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// What ended the hold, by name.
    pub release: &'static str,
    /// Where the held write and the write before it were made, when stacks are taken.
    pub call_sites: Option<CallSites>,
}

/// What the printer saw, returned when the channel closes.
#[derive(Debug, Default)]
pub struct Printed {
    /// Stalls by owning process.
    pub owners: OwnerTally,
    /// Stalls printed without an owner.
    pub without_owner: u64,
    /// Stalls the held socket's state settled, by held side (client, server), and by kind:
    /// not in the capture loop's counts.
    pub settled_by_socket: [u64; 2],
    /// The same stalls by kind.
    pub settled_kinds: KindCounts,
}

/// Stalls (and rendered lines) waiting for the printer before more are counted but not
/// printed: a burst is absorbed; a sustained flood never slows the capture.
pub const QUEUE: usize = 4096;

/// The printer has gone (standard output closed): its `join` says why.
#[derive(Debug)]
pub struct Gone;

/// The capture loop's end of the printer's channel; no call waits.
#[derive(Debug)]
pub struct Queue {
    tx: Sender<ToPrinter>,
    waiting: Arc<AtomicUsize>,
    unprinted: u64,
}

impl Queue {
    /// Sends a message that is not a stall (retired flows).
    pub fn send(&self, message: ToPrinter) -> Result<(), Gone> {
        self.tx.send(message).map_err(|_| Gone)
    }

    /// Queues a stall (with what the kernel saw of it, `watch --kernel`), or counts it
    /// unprinted when [`QUEUE`] are waiting already.
    pub fn stall(&mut self, event: StallEvent, kernel: Option<KernelSaw>) -> Result<(), Gone> {
        if !self.room() {
            return Ok(());
        }
        if let Some(saw) = kernel {
            self.send(ToPrinter::Writer(saw.pid, saw.command))?;
            self.send(ToPrinter::Release(saw.release))?;
            if let Some(sites) = saw.call_sites {
                self.send(ToPrinter::CallSites(Box::new(sites)))?;
            }
        }
        self.send(ToPrinter::Stall(Box::new(event)))
    }

    /// Queues a claim awaiting the held socket's word, or counts it unprinted.
    pub fn awaiting_socket(&mut self, event: StallEvent, reason: &'static str) -> Result<(), Gone> {
        match self.room() {
            true => self.send(ToPrinter::AwaitingSocket(Box::new(event), reason)),
            false => Ok(()),
        }
    }

    /// Queues a rendered line, or counts it unprinted.
    pub fn line(&mut self, line: String) -> Result<(), Gone> {
        match self.room() {
            true => self.send(ToPrinter::Line(line)),
            false => Ok(()),
        }
    }

    fn room(&mut self) -> bool {
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= QUEUE {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            self.unprinted += 1;
            return false;
        }
        true
    }

    /// Stalls waiting for the printer now.
    pub fn backlog(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Stalls counted but not printed so far.
    pub fn unprinted(&self) -> u64 {
        self.unprinted
    }
}

/// Says, at most once per call (each tick), that stalls went unprinted since `before`.
pub fn say_backlog(queue: &Queue, before: u64) {
    if queue.unprinted() > before {
        eprintln!(
            "tcpstall: the printer is {} stalls behind (naming their processes); {} stalls \
             counted but not printed so far, the capture goes on",
            queue.backlog(),
            queue.unprinted()
        );
    }
}

/// The metrics the printer keeps: stalls by owner, stalls the socket settles, and what
/// finding the owners cost.
struct PrinterMetrics {
    owner_stalls: OwnerStalls,
    stalls: StallCounters,
    owner_costs: OwnerCosts,
}

/// Starts the printer: text blocks, or one JSON object per line with `json`; each stall whose
/// owner is found is counted in `metrics`' stalls by process, each the socket settles in its
/// stalls, and the owner searches' cost as they go.
pub fn spawn(
    json: bool,
    metrics: &Metrics,
) -> io::Result<(Queue, JoinHandle<io::Result<Printed>>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let waiting = Arc::new(AtomicUsize::new(0));
    let done = Arc::clone(&waiting);
    let metrics = PrinterMetrics {
        owner_stalls: metrics.owner_stalls(),
        stalls: metrics.stall_counters(),
        owner_costs: metrics.owner_costs(),
    };
    let handle = std::thread::Builder::new()
        .name("watch-printer".into())
        .spawn(move || print_all(&rx, json, &metrics, &done))?;
    let queue = Queue {
        tx,
        waiting,
        unprinted: 0,
    };
    Ok((queue, handle))
}

fn print_all(
    rx: &Receiver<ToPrinter>,
    json: bool,
    metrics: &PrinterMetrics,
    waiting: &AtomicUsize,
) -> io::Result<Printed> {
    let PrinterMetrics {
        owner_stalls,
        stalls,
        owner_costs,
    } = metrics;
    let mut lookup = OwnerLookup::new();
    let mut containers = Containers::default();
    let mut printed = Printed::default();
    let mut writer = None;
    let mut release = None;
    let mut sites = None;
    let mut buf = Vec::with_capacity(1024);
    for message in rx {
        if matches!(
            message,
            ToPrinter::Stall(_) | ToPrinter::Line(_) | ToPrinter::AwaitingSocket(..)
        ) {
            waiting.fetch_sub(1, Ordering::Relaxed);
        }
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
            ToPrinter::CallSites(found) => sites = Some(found),
            ToPrinter::Line(line) => {
                let mut out = io::stdout().lock();
                out.write_all(line.as_bytes())?;
                out.flush()?;
            }
            ToPrinter::AwaitingSocket(event, reason) => {
                let mut owner = lookup.owner_of(&event);
                if let Ok(o) = &mut owner {
                    o.container = containers.of_pid(o.pid);
                }
                buf.clear();
                if cork_confirmed(&event, owner.as_ref().ok()) == Some(true) {
                    stalls.record(&event);
                    printed.settled_by_socket[event.finding.held_side.index()] += 1;
                    printed.settled_kinds.add(event.finding.kind);
                    if let Ok(o) = &owner {
                        owner_stalls.record(&event, o);
                        printed.owners.add(&event, o);
                    }
                    write_stall(&mut buf, json, &event, owner.as_ref())?;
                } else if json {
                    write_undecided_json(&mut buf, &event, owner.as_ref(), reason)?;
                    buf.push(b'\n');
                } else {
                    let text = fit_prose(undecided_text(&event, owner.as_ref()));
                    buf.extend_from_slice(text.as_bytes());
                }
                print_now(&buf)?;
                owner_costs.update(lookup.costs());
            }
            ToPrinter::Stall(event) => {
                let mut owner = match (lookup.owner_of(&event), writer.take()) {
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
                if let Ok(o) = &mut owner {
                    // Read at each event: a pid is in one container for its life, and the
                    // read is one small file (its pod's names are remembered).
                    o.container = containers.of_pid(o.pid);
                    if o.fd < 0 {
                        o.runtime = lookup.runtime_of(o.pid);
                    }
                    owner_stalls.record(&event, o);
                }
                if event.finding.kind.is_stall() {
                    match &owner {
                        Ok(o) => printed.owners.add(&event, o),
                        Err(_) => printed.without_owner += 1,
                    }
                }
                buf.clear();
                write_stall(&mut buf, json, &event, owner.as_ref())?;
                let (name, found) = (release.take(), sites.take());
                if name.is_some() || found.is_some() {
                    if json {
                        buf.pop(); // the newline, put back after the keys
                    }
                    if let Some(name) = name {
                        add_release(&mut buf, json, name);
                    }
                    if let Some(found) = found {
                        call_sites::add(&mut buf, json, &found);
                    }
                    if json {
                        buf.push(b'\n');
                    }
                }
                print_now(&buf)?;
                owner_costs.update(lookup.costs());
            }
        }
    }
    Ok(printed)
}

/// One stall into `buf`: a JSON line, or its text block.
fn write_stall(
    buf: &mut Vec<u8>,
    json: bool,
    event: &StallEvent,
    owner: Result<&Owner, &NoOwner>,
) -> io::Result<()> {
    if json {
        write_event_json(buf, event, owner)?;
        buf.push(b'\n');
    } else {
        buf.extend_from_slice(fit_prose(event_text(event, owner)).as_bytes());
    }
    Ok(())
}

/// Writes `buf` out at once: each stall is on the terminal (or the pipe) when it is found.
fn print_now(buf: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(buf)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_printer_that_falls_behind_never_holds_up_the_sender() {
        // A printer that takes nothing: the sender must go on, counting what it could not queue.
        let (tx, _rx) = std::sync::mpsc::channel();
        let mut queue = Queue {
            tx,
            waiting: Arc::new(AtomicUsize::new(0)),
            unprinted: 0,
        };
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for i in 0..QUEUE + 10 {
                let _ = queue.line(format!("{i}\n"));
            }
            let _ = done_tx.send((queue.backlog(), queue.unprinted()));
        });
        let (backlog, unprinted) = done_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the sender did not wait for the printer");
        assert_eq!((backlog, unprinted), (QUEUE, 10));
    }
}
