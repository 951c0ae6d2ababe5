//! The `tcpstall` command: parses arguments, runs one verb, maps the result to an exit status
//! (0 done, 1 stalls found with `--fail-on-stall`, 2 error with the reason on stderr; a
//! reader that closes standard output early ends the run quietly with 0).

use std::process::ExitCode;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;
use tcpstall::args::{fix::FixArgs, lab::LabArgs, probe::ProbeArgs};
use tcpstall::args::{sockets::SocketsArgs, trace::TraceArgs, watch::WatchArgs};
use tcpstall::probe;
use tcpstall::report::style::{set_color_choice, ColorChoice};
use tcpstall::Outcome;
// The verbs that need Linux; elsewhere, stand-ins that say so (tcpstall::unsupported).
#[cfg(not(target_os = "linux"))]
use tcpstall::unsupported::{fix, lab, sockets, trace, watch};
#[cfg(target_os = "linux")]
use tcpstall::{lab, process::fix, process::sockets, process::trace, watch};

/// The static (musl) build's allocator: musl's own is much slower under analyze's and
/// watch's allocation patterns (figures in docs/PERFORMANCE.md).
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Reproduce, find, explain and fix TCP small-write stalls (Nagle's algorithm × delayed ACK).
#[derive(Parser)]
// `bin_name`: usage lines say `tcpstall` whatever the file is called (tcpstall.exe on Windows).
#[command(name = "tcpstall", bin_name = "tcpstall", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
    /// When to colour the output: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

#[derive(Subcommand)]
enum Verb {
    /// Run the source documents' experiments on real kernel sockets over loopback.
    Lab(LabArgs),
    /// Find and explain stalls in pcap/pcapng captures (`-` reads standard input).
    Analyze(tcpstall::analyze::AnalyzeArgs),
    /// Show Nagle, cork and quick-ACK state of a process's TCP sockets.
    Sockets(SocketsArgs),
    /// Switch TCP_NODELAY on for a running process's TCP sockets (or, --route, quick ACKs
    /// for a route's connections).
    Fix(FixArgs),
    /// Follow a program's socket syscalls and name write-write-read patterns.
    Trace(TraceArgs),
    /// Drive a real server like a typical client and say whether, why and where it stalls.
    Probe(ProbeArgs),
    /// Watch live traffic and name each stall, and the local process behind it, as it happens.
    Watch(WatchArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Write the manual pages (tcpstall.1 and one per verb) into a directory.
    Man {
        /// Directory to write the pages to (created if missing), e.g. /usr/local/share/man/man1.
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    set_color_choice(cli.color);
    let (result, fail_on_stall) = match &cli.verb {
        Verb::Lab(args) => (lab::run(args), args.fail_on_stall),
        Verb::Analyze(args) => (tcpstall::analyze::run(args), args.fail_on_stall),
        Verb::Sockets(args) => (sockets::run(args), false),
        Verb::Fix(args) => (fix::run(args), false),
        Verb::Trace(args) => (trace::run(args), args.fail_on_stall),
        Verb::Probe(args) => (probe::run(args), args.fail_on_stall),
        Verb::Watch(args) => (watch::run(args), args.fail_on_stall),
        Verb::Completions { shell } => (completions(*shell), false),
        Verb::Man { dir } => (man_pages(dir), false),
    };
    match result {
        Ok(Outcome::StallsFound) if fail_on_stall => ExitCode::from(1),
        Ok(_) => ExitCode::SUCCESS,
        // The reader of standard output went away (`tcpstall lab | head -1`): it took what
        // it wanted, so end quietly, as Unix tools do. Rust ignores SIGPIPE, so the write
        // returned EPIPE instead of killing the process.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            // A lab torn down by Ctrl-C fails in its own threads: the signal's exit (130)
            // and the rows finished come first.
            lab::wait_if_ending_on_signal();
            eprintln!("tcpstall: error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Writes the completion script of `shell` to standard output.
fn completions(shell: Shell) -> anyhow::Result<Outcome> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tcpstall", &mut out);
    tcpstall::report::print_stdout(&String::from_utf8_lossy(&out))?;
    Ok(Outcome::Done)
}

/// Writes `tcpstall.1` and `tcpstall-VERB.1` for every verb into `dir`.
fn man_pages(dir: &Path) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    let command = Cli::command();
    let write = |name: &str, cmd: clap::Command| -> anyhow::Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page)?;
        std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))
    };
    for verb in command.get_subcommands() {
        let name = format!("tcpstall-{}", verb.get_name());
        let bin = format!("tcpstall {}", verb.get_name());
        write(&name, verb.clone().name(name.clone()).bin_name(bin))?;
    }
    write("tcpstall", command)?;
    eprintln!("tcpstall: manual pages written to {}", dir.display());
    Ok(Outcome::Done)
}

/// Whether `err` comes from writing to a pipe whose reader has closed it.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
