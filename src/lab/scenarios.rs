//! The lab's catalogue, as data: one [`Variant`] per row, grouped by [`Scenario`]. The runner
//! interprets these rows; adding an experiment means adding a row here, not a function.

use super::server::ServerNodelay;
use super::write::WriteStrategy;

/// The five experiments of the source documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Documents 000/003: line echo, `hello ` + `world\r\n`.
    Echo,
    /// Document 004: keep-alive HTTP/1.1 server writing header and body.
    Http,
    /// Document 002: memcached 1.4.4's reply cut at 1400 bytes.
    Memcached,
    /// Document 001: one-way 1200-byte writes with pauses.
    Stream,
    /// Document 002's claim: is TCP_NODELAY (or TCP_QUICKACK) on a listener inherited?
    Inherit,
}

/// Every scenario, in catalogue order.
pub const SCENARIOS: [Scenario; 5] = [
    Scenario::Echo,
    Scenario::Http,
    Scenario::Memcached,
    Scenario::Stream,
    Scenario::Inherit,
];

impl Scenario {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Echo => "echo",
            Scenario::Http => "http",
            Scenario::Memcached => "memcached",
            Scenario::Stream => "stream",
            Scenario::Inherit => "inherit",
        }
    }

    /// One line for `--list`.
    pub fn description(self) -> &'static str {
        match self {
            Scenario::Echo => "line-echo server; client sends `hello ` + `world\\r\\n` and reads the line back (docs 000, 003)",
            Scenario::Http => "keep-alive HTTP/1.1 server answering a 200-byte file, header and body written apart (doc 004)",
            Scenario::Memcached => "memcached text protocol, reply cut like 1.4.4 (first write <= 1400 B, rest in a second write), MSS 1460 (doc 002)",
            Scenario::Stream => "one-way 1200-byte writes with a pause between them; share of writes sent as their own segment (doc 001)",
            Scenario::Inherit => "does an accepted socket inherit TCP_NODELAY / TCP_QUICKACK set on the listener? (doc 002's claim)",
        }
    }

    /// Size of the payload when `--size` is not given, in bytes.
    pub fn default_size(self) -> usize {
        match self {
            Scenario::Echo | Scenario::Inherit => 13,
            Scenario::Http => 200,
            Scenario::Memcached => 1400,
            Scenario::Stream => 1200,
        }
    }

    /// Smallest and largest `--size` that make sense, in bytes.
    pub fn size_range(self) -> (usize, usize) {
        match self {
            // A line needs a head, a body and `\r\n`.
            Scenario::Echo | Scenario::Inherit => (3, 65_536),
            Scenario::Http => (1, 1 << 20),
            // memcached's default item size limit is 1 MiB.
            Scenario::Memcached => (1, 1 << 20),
            Scenario::Stream => (1, 65_536),
        }
    }
}

/// What the client and server exchange in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Echo of one line split in two parts.
    Echo,
    /// HTTP GET of a file.
    Http,
    /// memcached `get` of one value.
    Memcached,
    /// One-way writes with a pause.
    Stream,
}

/// Whether connections are reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionMode {
    /// One connection for every request of the row.
    KeepAlive,
    /// A new connection per request (`ab` without `-k`): each starts in quick-ACK mode.
    PerRequest,
}

/// What Linux is expected to do with a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// Stalls for one delayed-ACK timeout per request while the message's two writes each
    /// fit in one segment (first sub-MSS, second below one MSS); with larger writes the
    /// receiver sees a full segment and ACKs at once. See [`super::explain::Geometry::fit`].
    Stall,
    /// Never waits for the timer.
    NoStall,
}

/// One row of the catalogue.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    /// The experiment it belongs to.
    pub scenario: Scenario,
    /// Its name within the scenario.
    pub name: &'static str,
    /// What is exchanged.
    pub workload: Workload,
    /// Client's way of writing a request (echo: `hello ` and `world\r\n`).
    pub client_write: WriteStrategy,
    /// TCP_NODELAY on the client.
    pub client_nodelay: bool,
    /// Client re-arms TCP_QUICKACK after every read.
    pub client_quickack: bool,
    /// Server's way of writing a reply's parts.
    pub server_reply: WriteStrategy,
    /// Where the server sets TCP_NODELAY.
    pub server_nodelay: ServerNodelay,
    /// Server re-arms TCP_QUICKACK after every read.
    pub server_quickack: bool,
    /// TCP_QUICKACK value set on the listening socket.
    pub listener_quickack: Option<bool>,
    /// Connection reuse.
    pub connections: ConnectionMode,
    /// Payload size (echo line, HTTP body, memcached value, stream write), in bytes.
    pub size: usize,
    /// Stream: pause between writes, in milliseconds.
    pub pause_ms: u64,
    /// Stream and memcached: TCP_MAXSEG on both ends unless `--mss` says otherwise.
    pub mss: Option<u32>,
    /// What Linux should do.
    pub expected: Expectation,
    /// Why, in one line, from the kernel's rules, for the message shape the row is about.
    /// `{first}`, `{second}` (bytes of the message's two writes), `{message}`, `{mss}`
    /// (payload bytes of a full segment) and `{segments}` are filled with the sizes in
    /// effect; a split row whose writes no longer fit that shape gets its text from
    /// [`super::explain::explanation`] instead.
    pub explanation: &'static str,
}

const ECHO: Variant = Variant {
    scenario: Scenario::Echo,
    name: "",
    workload: Workload::Echo,
    client_write: WriteStrategy::Split,
    client_nodelay: false,
    client_quickack: false,
    server_reply: WriteStrategy::Single,
    server_nodelay: ServerNodelay::Off,
    server_quickack: false,
    listener_quickack: None,
    connections: ConnectionMode::KeepAlive,
    size: 13,
    pause_ms: 0,
    mss: None,
    expected: Expectation::NoStall,
    explanation: "",
};

const HTTP: Variant = Variant {
    scenario: Scenario::Http,
    workload: Workload::Http,
    client_write: WriteStrategy::Single,
    server_reply: WriteStrategy::Split,
    size: 200,
    ..ECHO
};

/// memcached 1.4.4 on a 1500-byte MTU: MSS 1460.
const MEMCACHED: Variant = Variant {
    scenario: Scenario::Memcached,
    workload: Workload::Memcached,
    client_write: WriteStrategy::Single,
    server_reply: WriteStrategy::Split,
    mss: Some(1460),
    expected: Expectation::Stall,
    ..ECHO
};

/// Every memcached value row: which sizes stall is the point of the scenario, so the text of a
/// row whose reply does not fit this shape comes from the geometry (`explain::explanation`).
const MEMCACHED_SPLIT: &str = "the server writes {first} B then a {second} B rest, both below one {mss} B segment: the rest waits in tcp_nagle_check for the ACK of the sub-MSS first write (Minshall), which the client delays (ping-pong) until the timer";

const STREAM: Variant = Variant {
    scenario: Scenario::Stream,
    workload: Workload::Stream,
    client_write: WriteStrategy::Single,
    size: 1200,
    ..ECHO
};

const STREAM_EXPLANATION: &str = "Nagle on: a write waits only while an earlier sub-MSS segment is unacknowledged; on loopback the ACK (the receiver never sends data, so it stays in quick-ACK mode) is back within microseconds, so little is merged; doc 001's 22% needs a real RTT";

const STREAM_NODELAY_EXPLANATION: &str = "TCP_NODELAY: every write leaves at once unless autocorking defers it (tcp_should_autocork: an earlier skb of the socket still queued below TCP); lo has no qdisc, so that is rare";

/// The catalogue. `tcpstall lab` runs every row; `--scenario`/`--variant` select.
pub const CATALOGUE: &[Variant] = &[
    Variant {
        name: "split",
        expected: Expectation::Stall,
        explanation: "write-write-read: the {second} B tail waits in tcp_nagle_check for the ACK of the {first} B head (both below one {mss} B segment), which the server delays (ping-pong mode) until the delayed-ACK timer",
        ..ECHO
    },
    Variant {
        name: "single",
        client_write: WriteStrategy::Single,
        explanation: "one write, {segments}: full segments are never held and no sub-MSS segment is in flight ahead of the last, so nothing waits; the reply carries the ACK",
        ..ECHO
    },
    Variant {
        name: "writev",
        client_write: WriteStrategy::Writev,
        explanation: "one gathering writev ({segments}): same as a single write without the copy",
        ..ECHO
    },
    Variant {
        name: "nodelay",
        client_nodelay: true,
        explanation: "client TCP_NODELAY: tcp_nagle_test passes, the {second} B tail leaves right after the {first} B head",
        ..ECHO
    },
    Variant {
        name: "flush",
        client_write: WriteStrategy::BufferedFlush,
        expected: Expectation::Stall,
        explanation: "flush() only hands each part to the kernel: still write-write-read, Nagle holds the {second} B tail behind the unacknowledged {first} B head (both below one {mss} B segment) until the delayed ACK (doc 003)",
        ..ECHO
    },
    Variant {
        name: "cork",
        client_write: WriteStrategy::CorkUncork,
        explanation: "TCP_CORK gathers both parts; uncorking pushes all {message} B at once ({segments})",
        ..ECHO
    },
    Variant {
        name: "msg_more",
        client_write: WriteStrategy::MsgMore,
        explanation: "send(MSG_MORE) keeps the {first} B head queued; the second send pushes all {message} B at once ({segments})",
        ..ECHO
    },
    Variant {
        name: "quickack",
        server_quickack: true,
        explanation: "server re-arms TCP_QUICKACK after every read: it ACKs the {first} B head at once, which releases the {second} B tail",
        ..ECHO
    },
    Variant {
        name: "short",
        connections: ConnectionMode::PerRequest,
        explanation: "one request per connection: a new connection is in quick-ACK mode, the server ACKs the {first} B head at once",
        ..ECHO
    },
    Variant {
        name: "split",
        expected: Expectation::Stall,
        explanation: "write(header) write(body): the {second} B body waits for the ACK of the {first} B header (both below one {mss} B segment), which the client delays (ping-pong) until the timer (doc 004, `ab -k`)",
        ..HTTP
    },
    Variant {
        name: "single",
        server_reply: WriteStrategy::Single,
        explanation: "header and body in one write of {message} B ({segments}): nothing held",
        ..HTTP
    },
    Variant {
        name: "nodelay",
        server_nodelay: ServerNodelay::Accepted,
        explanation: "TCP_NODELAY on the accepted socket (nginx's tcp_nodelay): the body leaves right after the header",
        ..HTTP
    },
    Variant {
        name: "short",
        connections: ConnectionMode::PerRequest,
        explanation: "new connection per request (`ab` without -k): the server closes after the body, and closing pushes the held body out with the FIN (tcp_send_fin); the client, in quick-ACK mode, ACKs the header at once anyway",
        ..HTTP
    },
    Variant {
        name: "value-100",
        size: 100,
        explanation: MEMCACHED_SPLIT,
        ..MEMCACHED
    },
    Variant {
        name: "value-1400",
        size: 1400,
        explanation: MEMCACHED_SPLIT,
        ..MEMCACHED
    },
    Variant {
        name: "value-2400",
        size: 2400,
        explanation: MEMCACHED_SPLIT,
        ..MEMCACHED
    },
    Variant {
        name: "value-4000",
        size: 4000,
        explanation: MEMCACHED_SPLIT,
        ..MEMCACHED
    },
    Variant {
        name: "quickack-1400",
        size: 1400,
        client_quickack: true,
        expected: Expectation::NoStall,
        explanation: "client re-arms TCP_QUICKACK after each receive: it ACKs the first {first} B at once, the {second} B rest follows (doc 002's client fix)",
        ..MEMCACHED
    },
    Variant {
        name: "nodelay-1400",
        size: 1400,
        server_nodelay: ServerNodelay::Accepted,
        expected: Expectation::NoStall,
        explanation: "server TCP_NODELAY on the accepted socket: the {second} B rest leaves right after the first {first} B (doc 002's server fix)",
        ..MEMCACHED
    },
    Variant {
        name: "nagle-0ms",
        explanation: STREAM_EXPLANATION,
        ..STREAM
    },
    Variant {
        name: "nagle-5ms",
        pause_ms: 5,
        explanation: STREAM_EXPLANATION,
        ..STREAM
    },
    Variant {
        name: "nagle-10ms",
        pause_ms: 10,
        explanation: STREAM_EXPLANATION,
        ..STREAM
    },
    Variant {
        name: "nagle-15ms",
        pause_ms: 15,
        explanation: STREAM_EXPLANATION,
        ..STREAM
    },
    Variant {
        name: "nodelay-0ms",
        client_nodelay: true,
        explanation: STREAM_NODELAY_EXPLANATION,
        ..STREAM
    },
    Variant {
        name: "nodelay-5ms",
        client_nodelay: true,
        pause_ms: 5,
        explanation: STREAM_NODELAY_EXPLANATION,
        ..STREAM
    },
    Variant {
        name: "nodelay-10ms",
        client_nodelay: true,
        pause_ms: 10,
        explanation: STREAM_NODELAY_EXPLANATION,
        ..STREAM
    },
    Variant {
        name: "nodelay-15ms",
        client_nodelay: true,
        pause_ms: 15,
        explanation: STREAM_NODELAY_EXPLANATION,
        ..STREAM
    },
    Variant {
        scenario: Scenario::Inherit,
        name: "nodelay-listener",
        workload: Workload::Http,
        client_write: WriteStrategy::Single,
        server_reply: WriteStrategy::Split,
        server_nodelay: ServerNodelay::Listener,
        size: 200,
        explanation: "HTTP header and body in two writes ({first} B + {second} B), TCP_NODELAY set on the listener only: accepted sockets are copies of it (nonagle included), so no stall",
        ..ECHO
    },
    Variant {
        scenario: Scenario::Inherit,
        name: "quickack-listener",
        listener_quickack: Some(false),
        expected: Expectation::Stall,
        explanation: "echo split ({first} B + {second} B), TCP_QUICKACK=0 (ping-pong) set on the listener only: not carried over to accepted sockets, and quick-ACK is no lasting setting anyway; ping-pong starts after the first turn and the split request stalls",
        ..ECHO
    },
];

/// Rows of a scenario, in catalogue order.
pub fn variants_of(scenario: Scenario) -> impl Iterator<Item = &'static Variant> {
    CATALOGUE.iter().filter(move |v| v.scenario == scenario)
}

/// The scenario called `name`, if any.
pub fn scenario_named(name: &str) -> Option<Scenario> {
    SCENARIOS.into_iter().find(|s| s.name() == name)
}

/// The catalogue row `scenario`/`name`, for unit tests.
#[cfg(test)]
pub(crate) fn catalogue_row(scenario: &str, name: &str) -> &'static Variant {
    CATALOGUE
        .iter()
        .find(|v| v.scenario.name() == scenario && v.name == name)
        .unwrap_or_else(|| panic!("no row {scenario}/{name} in the catalogue"))
}
