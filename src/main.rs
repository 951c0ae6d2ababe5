//! The `tcpstall` command: parses arguments, runs one verb, maps the result to an exit status
//! (0 done, 1 stalls found with `--fail-on-stall`, 2 error with the reason on stderr; a
//! reader that closes standard output early ends the run quietly with 0).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tcpstall::Outcome;

/// Reproduce, find, explain and fix TCP small-write stalls (Nagle's algorithm × delayed ACK).
#[derive(Parser)]
#[command(name = "tcpstall", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand)]
enum Verb {
    /// Run the source documents' experiments on real kernel sockets over loopback.
    Lab(tcpstall::lab::LabArgs),
    /// Find and explain stalls in pcap/pcapng captures (`-` reads standard input).
    Analyze(tcpstall::analyze::AnalyzeArgs),
    /// Show Nagle, cork and quick-ACK state of a process's TCP sockets.
    Sockets(tcpstall::process::sockets::SocketsArgs),
    /// Switch TCP_NODELAY on for a running process's TCP sockets.
    Fix(tcpstall::process::fix::FixArgs),
    /// Follow a program's socket syscalls and name write-write-read patterns.
    Trace(tcpstall::process::trace::TraceArgs),
    /// Drive a real server like a typical client and say whether, why and where it stalls.
    Probe(tcpstall::probe::ProbeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (result, fail_on_stall) = match &cli.verb {
        Verb::Lab(args) => (tcpstall::lab::run(args), args.fail_on_stall),
        Verb::Analyze(args) => (tcpstall::analyze::run(args), args.fail_on_stall),
        Verb::Sockets(args) => (tcpstall::process::sockets::run(args), false),
        Verb::Fix(args) => (tcpstall::process::fix::run(args), false),
        Verb::Trace(args) => (tcpstall::process::trace::run(args), args.fail_on_stall),
        Verb::Probe(args) => (tcpstall::probe::run(args), args.fail_on_stall),
    };
    match result {
        Ok(Outcome::StallsFound) if fail_on_stall => ExitCode::from(1),
        Ok(_) => ExitCode::SUCCESS,
        // The reader of standard output went away (`tcpstall lab | head -1`): it took what
        // it wanted, so end quietly, as Unix tools do. Rust ignores SIGPIPE, so the write
        // returned EPIPE instead of killing the process.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tcpstall: error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether `err` comes from writing to a pipe whose reader has closed it.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
