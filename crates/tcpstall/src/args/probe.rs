//! The command line of `tcpstall probe`.

use std::path::PathBuf;

use clap::Args;

/// Most requests a run may make.
pub const MAX_REQUESTS: usize = 10_000;

/// Arguments of `tcpstall probe`.
#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:\n  \
    tcpstall probe http://127.0.0.1:8000/\n  \
    tcpstall probe --insecure https://127.0.0.1:8443/\n  \
    tcpstall probe memcached://127.0.0.1:11211 --size 4000\n  \
    tcpstall probe redis://127.0.0.1:6379 --size 100\n  \
    tcpstall probe 'redis://:PASSWORD@127.0.0.1:6379/3'\n  \
    tcpstall probe --insecure 'rediss://USER:PASSWORD@127.0.0.1:6380'\n  \
    tcpstall probe tcp://127.0.0.1:7000 --send 'PING\\r\\n' --until '\\r\\n'\n\n\
    With CAP_NET_RAW (root) the probe captures its own packets and runs the same detector as \
    `analyze`; without it, it judges from its socket's receive times and TCP_INFO, which \
    cannot see ACKs. Verdicts: stall (a hold seen), slow (the server's own time, no hold \
    seen), undecided (a timer's shape behind a server it cannot see into), error (HTTP error \
    answers), clean. Exit status: 0 done, 1 stall found with --fail-on-stall, 2 error or HTTP \
    error answers (the results measured before it are still printed), 130 interrupted by \
    Ctrl-C (the results so far are printed).")]
pub struct ProbeArgs {
    /// The target: http://HOST:PORT/PATH, https://…, memcached://HOST:PORT, redis://HOST:PORT,
    /// rediss://… (redis over TLS), tcp://HOST:PORT (with --send and --until). Credentials go
    /// in the URL: http://USER:PASSWORD@… (HTTP Basic), redis://:PASSWORD@HOST:PORT or
    /// redis://USER:PASSWORD@… (AUTH, ACL users), with a database as /N (SELECT); write
    /// @ : / % in them as %40 %3A %2F %25. Reports show the password as ***; to keep it off
    /// the command line (`ps`), give it in TCPSTALL_PASSWORD instead.
    pub url: String,
    /// Timed requests (1-10000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=MAX_REQUESTS as i64))]
    pub requests: u32,
    /// Connections in parallel, each kept alive (1-64).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub connections: u16,
    /// Requests written back to back on a connection, each its own write, before their replies
    /// are read (1-256): a pipelining client. Each timed request (--requests) is then a batch.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub pipeline: u16,
    /// Seconds allowed for each connect, TLS handshake and request.
    #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
    pub timeout: f64,
    /// Seconds allowed for the whole run (the confirmation re-run gets as long again).
    #[arg(long, default_value_t = 60.0, value_parser = positive_seconds)]
    pub max_time: f64,
    /// HTTP method.
    #[arg(long, default_value = "GET")]
    pub method: String,
    /// HTTP request body bytes (POST, PUT), up to 16 MiB.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=16 << 20))]
    pub body_size: u32,
    /// HTTP: write the request head and body in two calls, as many clients do (the probe's
    /// own Nagle hold can then be the culprit).
    #[arg(long)]
    pub split_request: bool,
    /// memcached/redis value bytes (1 B - 1 MiB).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    pub size: u32,
    /// tcp://: the request, with escapes \r \n \t \0 \\ \xHH.
    #[arg(long)]
    pub send: Option<String>,
    /// tcp://: the bytes that end a reply, with the same escapes.
    #[arg(long)]
    pub until: Option<String>,
    /// https://, rediss://: accept any certificate (self-signed, wrong name); signatures are
    /// still checked.
    #[arg(long)]
    pub insecure: bool,
    /// Print JSON (stable keys: target, requests, p50_ms, p99_ms, max_ms, verdict, culprit,
    /// stalls, advice, confirmed).
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when the verdict is `stall`.
    #[arg(long)]
    pub fail_on_stall: bool,
    /// Draw the ladder diagram of the stalled turn the diagnosis names (needs the capture of
    /// the probe's own traffic: CAP_NET_RAW).
    #[arg(long, conflicts_with = "json")]
    pub ladder: bool,
    /// Also write a self-contained HTML report to FILE: the verdict, the latency histogram of
    /// the requests with the delayed-ACK modes marked, the ladder of the stalled turn.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 3600.0 => Ok(s),
        _ => Err(format!("{text:?} is not a number of seconds in (0, 3600]")),
    }
}
