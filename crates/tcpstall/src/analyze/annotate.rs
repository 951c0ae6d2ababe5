//! `analyze --annotate OUT.pcapng`: the captures written back as pcapng, with a packet comment
//! on each event's packet (the held, resent or first segment) and on the peer's packet that
//! released it: the kind, how long the data waited, which side, the first fix. Wireshark
//! shows them as `frame.comment` and under Expert Info's comments.
//!
//! Every input packet is copied as it was ([`crate::capture::pcapng_writer`]); the input files
//! follow one another as the sections of one file, so tshark numbers the frames of the second
//! file after those of the first.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use rustc_hash::FxHashMap;

use crate::capture::pcapng_writer::{copy_with_comments, CopyError};
use crate::capture::{decompressed, open_raw};
use crate::detect::kind::{Holder, Release};
use crate::detect::verdict::fixes;
use crate::detect::{Analysis, StallEvent};
use crate::report::json::InputFacts;

/// The annotated capture being made: a temporary file beside the destination, which takes
/// the destination's name once written whole (a failed run leaves no half-written capture).
pub struct Output {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

/// What [`Output::finish`] wrote.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// Packets copied.
    pub packets: u64,
    /// Packets that carry a comment.
    pub commented: u64,
}

impl Output {
    /// Checks the destination and opens the temporary file beside it: a directory that does
    /// not exist or cannot be written, a destination that is a directory or one of `inputs`,
    /// is an error here, before any reading.
    pub fn create(path: &Path, inputs: &[PathBuf]) -> anyhow::Result<Output> {
        let shown = path.display();
        if path.as_os_str().is_empty() || path.file_name().is_none() {
            anyhow::bail!("--annotate needs a file name to write, e.g. --annotate stalls.pcapng");
        }
        if path.is_dir() {
            anyhow::bail!("--annotate {shown}: that is a directory; give a file name in it, e.g. {shown}/stalls.pcapng");
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            anyhow::bail!(
                "--annotate {shown}: the directory {} does not exist; create it first or choose another",
                dir.display()
            );
        }
        if let Ok(out) = fs::canonicalize(path) {
            if inputs
                .iter()
                .any(|i| fs::canonicalize(i).is_ok_and(|i| i == out))
            {
                anyhow::bail!(
                    "--annotate {shown} is one of the captures read; write the annotated copy to another file"
                );
            }
        }
        let tmp = tempfile::Builder::new()
            .prefix(".tcpstall-annotate-")
            .suffix(".pcapng")
            .tempfile_in(dir)
            .with_context(|| {
                format!(
                    "--annotate {shown}: cannot create a file in {}",
                    dir.display()
                )
            })?;
        Ok(Output {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// Copies the captures `facts` read whole with the comments of `analysis`'s events and
    /// gives the result the destination's name. A capture that could not be read is left
    /// out, and said.
    pub fn finish(self, analysis: &Analysis, facts: &InputFacts) -> anyhow::Result<Written> {
        let comments = comments(analysis, facts);
        let shown = self.path.display().to_string();
        for unreadable in &facts.unreadable {
            eprintln!(
                "tcpstall: warning: {} is left out of {shown}: it could not be read",
                unreadable.file
            );
        }
        let mut out = BufWriter::new(self.tmp.as_file());
        let mut written = Written::default();
        let application = format!(
            "tcpstall {} (analyze --annotate)",
            env!("CARGO_PKG_VERSION")
        );
        let none = FxHashMap::default();
        for (index, (source, name)) in facts.sources.iter().zip(&facts.files).enumerate() {
            let input = open_raw(&source.path).and_then(decompressed)?;
            let wanted = comments.get(&index).unwrap_or(&none);
            let stats = copy_with_comments(input, &mut out, wanted, &application).map_err(
                |err| match err {
                    CopyError::Write(e) => anyhow::anyhow!("cannot write {shown}: {e}"),
                    other => anyhow::anyhow!("{name}: {other}"),
                },
            )?;
            if let Some(why) = &stats.stopped {
                eprintln!(
                    "tcpstall: warning: {name}: {why}; {shown} holds its {} packets before that",
                    stats.packets
                );
            }
            if stats.uncommentable > 0 {
                eprintln!(
                    "tcpstall: warning: {name}: {} packets to comment are simple packet blocks, \
                     which hold no comment; they are copied without",
                    stats.uncommentable
                );
            }
            written.packets += stats.packets;
            written.commented += stats.commented;
        }
        out.flush()
            .and_then(|()| out.get_ref().sync_all())
            .with_context(|| format!("cannot write {shown}"))?;
        drop(out);
        self.tmp
            .persist(&self.path)
            .map_err(|e| io::Error::new(e.error.kind(), e.error))
            .with_context(|| format!("cannot write {shown}"))?;
        Ok(written)
    }
}

/// The comments of every event, by source file (index in [`InputFacts::sources`]) and
/// packet number in it.
fn comments(
    analysis: &Analysis,
    facts: &InputFacts,
) -> FxHashMap<usize, FxHashMap<u64, Vec<String>>> {
    // Frame numbers in the annotated file: each file's packets follow the files before it.
    let offsets: Vec<u64> = facts
        .sources
        .iter()
        .scan(0, |before, s| {
            let offset = *before;
            *before += s.packets;
            Some(offset)
        })
        .collect();
    let frame = |ordinal, packet| {
        let file = facts.source_of(ordinal)?;
        Some((file, packet, offsets[file] + packet))
    };
    let mut by_file: FxHashMap<usize, FxHashMap<u64, Vec<String>>> = FxHashMap::default();
    let mut add = |(file, packet, _), text| {
        by_file
            .entry(file)
            .or_default()
            .entry(packet)
            .or_default()
            .push(text);
    };
    for e in &analysis.events {
        let Some(held) = frame(e.ordinal, e.packet_number) else {
            continue;
        };
        let release = e
            .released_by
            .and_then(|r| frame(r.ordinal, r.packet_number));
        add(held, held_comment(e, release.map(|r| r.2)));
        if let Some(release) = release {
            add(release, release_comment(e, held.2));
        }
    }
    by_file
}

/// Milliseconds with one decimal.
fn ms(span: crate::flow::Span) -> String {
    format!("{:.1}", span.as_millis_f64())
}

/// A release's few microseconds, or milliseconds past one, with the unit.
fn short(span: crate::flow::Span) -> String {
    if span.as_micros() < 1000 {
        format!("{} µs", span.as_micros())
    } else {
        format!("{} ms", ms(span))
    }
}

/// The fix to try first for the event's kind and side.
fn first_fix(e: &StallEvent) -> String {
    let f = &e.finding;
    fixes(f.kind, f.held_side, Some(e))
        .into_iter()
        .next()
        .map_or_else(String::new, |fix| format!(" Fix: {fix}."))
}

/// What the peer's releasing packet was.
fn releaser(e: &StallEvent) -> &'static str {
    match e.finding.kind.info().holder {
        Holder::PeerWindow => "window update",
        Holder::Nagle | Holder::Cork | Holder::Loss => "ACK",
    }
}

/// The comment on the event's own packet: the held segment once sent, the resend, or the
/// first segment of the episode.
/// `release` is the frame of the releasing packet in the annotated file.
fn held_comment(e: &StallEvent, release: Option<u64>) -> String {
    let f = &e.finding;
    let kind = f.kind.name();
    let held = f.held_side.name();
    let peer = f.held_side.peer().name();
    let delay = ms(f.delay_ns);
    let how = match f.kind.info().release {
        Release::OwnTimer => format!("sent by the {held}'s own timer"),
        Release::Acks => format!("each small write waited for the {peer}'s ACK of the one before"),
        Release::DelayedAck | Release::Ack => {
            let after = f
                .release_ns
                .map(|r| format!(", {} before", short(r)))
                .unwrap_or_default();
            match release {
                Some(frame) => format!(
                    "released by the {peer}'s {} in frame {frame}{after}",
                    releaser(e)
                ),
                None => format!("released by the {peer}'s {}{after}", releaser(e)),
            }
        }
    };
    format!(
        "tcpstall {kind}: the {held}'s data waited {delay} ms, {how}.{}",
        first_fix(e)
    )
}

/// The comment on the peer's packet that released the data; `held` is the frame of the
/// released data in the annotated file.
fn release_comment(e: &StallEvent, held_frame: u64) -> String {
    let f = &e.finding;
    let kind = f.kind.name();
    let held = f.held_side.name();
    let peer = f.held_side.peer().name();
    let after = f
        .release_ns
        .map(|r| format!(" (sent {} later)", short(r)))
        .unwrap_or_default();
    format!(
        "tcpstall {kind}: this {peer} {} released the {held}'s data in frame {frame}, which had \
         waited {} ms{after}.{}",
        releaser(e),
        ms(f.delay_ns),
        first_fix(e),
        frame = held_frame
    )
}
