//! `tcpstall lab --serve`: one catalogue row's server on its own, as the row's run sets it up
//! (protocol, write strategy, socket options), for any client to meet: `tcpstall probe`, `ab`,
//! a library under test. It prints its address, then serves until SIGINT/SIGTERM or the row
//! timeout.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::runner::{delack_max_on, server_config, RunSettings};
use super::scenarios::Variant;
use super::server::{Server, ServerConfig};
use crate::Outcome;

/// How often the wait looks at the stop flag and the deadline.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Serves the one row in `selected` on 127.0.0.1:`port` (0: a port the kernel picks) until a
/// signal or `settings.row_timeout`.
pub(crate) fn serve(
    selected: &[Variant],
    settings: &RunSettings,
    port: u16,
) -> anyhow::Result<Outcome> {
    let variant = match selected {
        [variant] => variant,
        rows => bail!(
            "--serve starts one row's server, but the selection holds {} rows{}: name one \
             with --scenario S --variant V (see `tcpstall lab --list`)",
            rows.len(),
            match rows.len() {
                0 => String::new(),
                _ => format!(
                    " ({})",
                    rows.iter()
                        .map(|v| format!("{}/{}", v.scenario.name(), v.name_in_run(settings.size)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        ),
    };
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("cannot catch SIGINT/SIGTERM to stop the server")?;
    }
    let sizes = settings
        .segments
        .sizes_of(variant, settings.size, settings.mss);
    let deadline = Instant::now() + settings.row_timeout;
    let cap = delack_max_on(variant, settings, crate::Side::Server)?;
    let config = server_config(variant, sizes.size, sizes.mss, deadline, None, cap);
    let server = Server::start(ServerConfig { port, ..config })
        .with_context(|| format!("cannot listen on {}:{port}", Ipv4Addr::LOCALHOST))?;
    let name = format!(
        "{}/{}",
        variant.scenario.name(),
        variant.name_in_run(settings.size)
    );
    let mut out = std::io::stdout().lock();
    writeln!(out, "serving {name} on {}", server.addr())
        .and_then(|()| out.flush())
        .context("cannot write the server's address to standard output")?;
    drop(out);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(STOP_POLL);
    }
    let report = server.stop();
    eprintln!(
        "tcpstall: {name}: served {} connections{}",
        report.connections,
        if stop.load(Ordering::SeqCst) {
            ""
        } else {
            " (stopped by --row-timeout)"
        }
    );
    for error in report.errors.lines() {
        eprintln!("tcpstall: {name}: {error}");
    }
    Ok(Outcome::Done)
}
