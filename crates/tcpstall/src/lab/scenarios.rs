//! The lab's catalogue, as data: one [`Variant`] per row, grouped by [`Scenario`]. The runner
//! interprets these rows; adding an experiment means adding a row here, not a function.

use super::explain::Why;
use super::server::ServerNodelay;
use super::workload::{self, Workload};
use crate::exchange::write::WriteStrategy;
use crate::{tcp_rules, Side};

/// The five experiments of the source documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
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
    /// Requests in flight on one connection (a redis pipeline or multiplexed connection).
    Pipeline,
    /// Connections sharing one client thread, each with requests in flight.
    Concurrent,
}

/// What the catalogue says about a scenario.
#[derive(Debug)]
pub(crate) struct ScenarioInfo {
    /// The scenario described.
    pub scenario: Scenario,
    /// The name used on the command line and in JSON.
    pub name: &'static str,
    /// One line for `--list`.
    pub description: &'static str,
    /// Smallest and largest `--size` that make sense, in bytes.
    pub sizes: (usize, usize),
}

/// Every scenario, in catalogue order (and in the order of [`Scenario`]'s variants).
pub(crate) const SCENARIOS: [ScenarioInfo; 7] = [
    ScenarioInfo {
        scenario: Scenario::Echo,
        name: "echo",
        description: "line-echo server; client sends `hello ` + `world\\r\\n` and reads the line back (docs 000, 003)",
        // A line needs a head, a body and `\r\n`.
        sizes: (3, 65_536),
    },
    ScenarioInfo {
        scenario: Scenario::Http,
        name: "http",
        description: "keep-alive HTTP/1.1 server answering a 200-byte file, header and body written apart (doc 004)",
        sizes: (1, 1 << 20),
    },
    ScenarioInfo {
        scenario: Scenario::Memcached,
        name: "memcached",
        description: "memcached text protocol, reply cut like 1.4.4 (first write <= 1400 B, rest in a second write), MSS 1460 (doc 002)",
        // memcached's default item size limit is 1 MiB.
        sizes: (1, 1 << 20),
    },
    ScenarioInfo {
        scenario: Scenario::Stream,
        name: "stream",
        description: "one-way 1200-byte writes with a pause between them; share of writes sent as their own segment (doc 001)",
        sizes: (1, 65_536),
    },
    ScenarioInfo {
        scenario: Scenario::Inherit,
        name: "inherit",
        description: "does an accepted socket inherit TCP_NODELAY / TCP_QUICKACK set on the listener? (doc 002's claim)",
        // Its rows are echo and HTTP rows: the narrower range, echo's.
        sizes: (3, 65_536),
    },
    ScenarioInfo {
        scenario: Scenario::Pipeline,
        name: "pipeline",
        description: "16 redis-like inline commands in flight on one connection, each its own write, replies read as they come; the server sets TCP_NODELAY as redis does",
        // A command needs at least `\r\n`; the batch must stay below one segment for the
        // Nagle rows to be about sub-MSS writes, but larger sizes are allowed to see the rest.
        sizes: (3, 65_536),
    },
    ScenarioInfo {
        scenario: Scenario::Concurrent,
        name: "concurrent",
        description: "16 connections driven by one client thread (poll), 4 redis-like commands in flight on each, each its own write",
        sizes: (3, 65_536),
    },
];

impl Scenario {
    /// The catalogue's entry for this scenario.
    pub fn info(self) -> &'static ScenarioInfo {
        &SCENARIOS[self as usize]
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        self.info().name
    }
}

/// Whether connections are reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionMode {
    /// One connection for every request of the row.
    KeepAlive,
    /// A new connection per request (`ab` without `-k`): each starts in quick-ACK mode.
    PerRequest,
}

/// What Linux is expected to do with a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expectation {
    /// Stalls for one delayed-ACK timeout per request while the message's two writes each
    /// fit in one segment (first sub-MSS, second below one MSS); with larger writes the
    /// receiver sees a full segment and ACKs at once. See [`super::expect::Fit`].
    Stall,
    /// Never waits for the timer.
    NoStall,
}

/// A row's name: fixed, or made of a stem and the parameter the row is about, so that
/// `--size` can name the row by the size in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowName {
    /// The name as written.
    Fixed(&'static str),
    /// `<stem>-<size>`: the payload size, the catalogue's or `--size`'s (`value-1400`).
    Sized(&'static str),
    /// `<stem>-<pause>ms`: the stream's pause between writes (`nagle-5ms`).
    Paused(&'static str),
}

/// Which host-wide lever a `route-*` row pulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouteLever {
    /// `quickack 1` (RTAX_QUICKACK).
    QuickAck,
    /// A locked `rto_min` just over one jiffy, which caps the delayed ACK (6.7+).
    DelackMax,
}

/// A route metric set for a row on the side that ACKs the writer's first part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RouteFix {
    /// The side whose namespace's route to its peer carries the metric.
    pub side: Side,
    /// The metric.
    pub lever: RouteLever,
}

/// One row of the catalogue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Variant {
    /// The experiment it belongs to.
    pub scenario: Scenario,
    /// Its name within the scenario.
    pub name: RowName,
    /// What is exchanged.
    pub workload: &'static Workload,
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
    /// The side whose socket caps its delayed ACK once (TCP_DELACK_MAX_US), at the run's
    /// [`RunSettings::delack_cap`](super::runner::RunSettings::delack_cap): the side that ACKs
    /// the writer's first part.
    pub delack_cap: Option<Side>,
    /// The route metric the ACKing side's namespace puts on its route to the writer for the
    /// row (what `tcpstall fix --route` sets); only over the lab's own namespaces (`--rtt`).
    pub route_fix: Option<RouteFix>,
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
    /// Why, for the message shape the row is about; a split row whose writes no longer fit
    /// that shape is explained by the geometry instead ([`super::explain::Explanation`]).
    pub why: Why,
}

impl Variant {
    /// The row's name with a payload of `size` bytes.
    fn name_with(&self, size: usize) -> String {
        match self.name {
            RowName::Fixed(name) => name.to_string(),
            RowName::Sized(stem) => format!("{stem}-{size}"),
            RowName::Paused(stem) => format!("{stem}-{}ms", self.pause_ms),
        }
    }

    /// The row's name in the catalogue, with its own size.
    pub fn name(&self) -> String {
        self.name_with(self.size)
    }

    /// The row's name in a run: `--size` (`size`) renames a row named by its size.
    pub fn name_in_run(&self, size: Option<usize>) -> String {
        self.name_with(size.unwrap_or(self.size))
    }

    /// Whether the side that ACKs the writer's first part caps its delayed ACK, on its socket
    /// (`delack-max` rows) or through its route's `rto_min` (`route-delack-max` rows).
    pub fn caps_delayed_ack(&self) -> bool {
        self.delack_cap.is_some()
            || self
                .route_fix
                .is_some_and(|fix| fix.lever == RouteLever::DelackMax)
    }

    /// Whether the client writes a new connection for every request.
    pub fn per_request(&self) -> bool {
        self.connections == ConnectionMode::PerRequest
    }

    /// How `side` writes its message, and whether Nagle is on for it.
    pub fn writes_of(&self, side: Side) -> (WriteStrategy, bool) {
        match side {
            Side::Client => (self.client_write, !self.client_nodelay),
            // A listener's TCP_NODELAY is what the inherit row tests: the accepted socket is
            // a copy of the listener (`inet_csk_clone_lock`), so Nagle is off there too.
            Side::Server => (self.server_reply, self.server_nodelay == ServerNodelay::Off),
        }
    }
}

const ECHO: Variant = Variant {
    scenario: Scenario::Echo,
    name: RowName::Fixed(""),
    workload: &workload::ECHO,
    client_write: WriteStrategy::Split,
    client_nodelay: false,
    client_quickack: false,
    server_reply: WriteStrategy::Single,
    server_nodelay: ServerNodelay::Off,
    server_quickack: false,
    listener_quickack: None,
    delack_cap: None,
    route_fix: None,
    connections: ConnectionMode::KeepAlive,
    size: 13,
    pause_ms: 0,
    mss: None,
    expected: Expectation::NoStall,
    why: Why::EchoSplit,
};

const HTTP: Variant = Variant {
    scenario: Scenario::Http,
    workload: &workload::HTTP,
    client_write: WriteStrategy::Single,
    server_reply: WriteStrategy::Split,
    size: 200,
    ..ECHO
};

/// memcached 1.4.4 on a 1500-byte MTU: MSS 1460. Which sizes stall is the point of the
/// scenario, so a row whose reply does not fit its shape is explained by the geometry.
const MEMCACHED: Variant = Variant {
    scenario: Scenario::Memcached,
    workload: &workload::MEMCACHED,
    client_write: WriteStrategy::Single,
    server_reply: WriteStrategy::Split,
    mss: Some(tcp_rules::DEFAULT_MSS_V4),
    expected: Expectation::Stall,
    why: Why::MemcachedSplit,
    ..ECHO
};

const STREAM: Variant = Variant {
    scenario: Scenario::Stream,
    workload: &workload::STREAM,
    client_write: WriteStrategy::Single,
    size: 1200,
    why: Why::StreamNagle,
    ..ECHO
};

/// Requests in flight, the server answering each at once with TCP_NODELAY as redis does: the
/// client's Nagle is the row's subject.
const PIPELINE: Variant = Variant {
    scenario: Scenario::Pipeline,
    workload: &workload::PIPELINE,
    server_nodelay: ServerNodelay::Accepted,
    size: 16,
    why: Why::PipelineNagle,
    ..ECHO
};

const CONCURRENT: Variant = Variant {
    scenario: Scenario::Concurrent,
    workload: &workload::CONCURRENT,
    ..PIPELINE
};

/// The rows of a batched scenario: Nagle on, TCP_NODELAY, the batch in one gathering write,
/// and the client fixed but the server's replies each its own write with Nagle on.
const fn batch_rows(base: Variant) -> [Variant; 4] {
    [
        Variant {
            name: RowName::Fixed("nagle"),
            ..base
        },
        Variant {
            name: RowName::Fixed("nodelay"),
            client_nodelay: true,
            why: Why::PipelineNodelay,
            ..base
        },
        Variant {
            name: RowName::Fixed("writev"),
            client_write: WriteStrategy::Writev,
            why: Why::PipelineGather,
            ..base
        },
        Variant {
            name: RowName::Fixed("server-nagle"),
            client_write: WriteStrategy::Writev,
            server_nodelay: ServerNodelay::Off,
            expected: Expectation::Stall,
            why: Why::PipelineServerNagle,
            ..base
        },
    ]
}

const PIPELINE_ROWS: [Variant; 4] = batch_rows(PIPELINE);
const CONCURRENT_ROWS: [Variant; 4] = batch_rows(CONCURRENT);

/// The catalogue. `tcpstall lab` runs every row; `--scenario`/`--variant` select.
pub(crate) const CATALOGUE: &[Variant] = &[
    Variant {
        name: RowName::Fixed("split"),
        expected: Expectation::Stall,
        why: Why::EchoSplit,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("single"),
        client_write: WriteStrategy::Single,
        why: Why::EchoSingle,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("writev"),
        client_write: WriteStrategy::Writev,
        why: Why::Writev,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("nodelay"),
        client_nodelay: true,
        why: Why::ClientNodelay,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("flush"),
        client_write: WriteStrategy::BufferedFlush,
        expected: Expectation::Stall,
        why: Why::Flush,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("cork"),
        client_write: WriteStrategy::CorkUncork,
        why: Why::Cork,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("msg_more"),
        client_write: WriteStrategy::MsgMore,
        why: Why::MsgMore,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("quickack"),
        server_quickack: true,
        why: Why::ServerQuickack,
        ..ECHO
    },
    // The server ACKs the client's head: its cap shortens the hold, not removes it.
    Variant {
        name: RowName::Fixed("delack-max"),
        delack_cap: Some(Side::Server),
        why: Why::DelackCap,
        ..ECHO
    },
    // The host's levers, on the server's route to the client (its namespace under --rtt).
    Variant {
        name: RowName::Fixed("route-quickack"),
        route_fix: Some(RouteFix {
            side: Side::Server,
            lever: RouteLever::QuickAck,
        }),
        why: Why::RouteQuickack,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("route-delack-max"),
        route_fix: Some(RouteFix {
            side: Side::Server,
            lever: RouteLever::DelackMax,
        }),
        why: Why::RouteDelackCap,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("short"),
        connections: ConnectionMode::PerRequest,
        why: Why::EchoShort,
        ..ECHO
    },
    Variant {
        name: RowName::Fixed("split"),
        expected: Expectation::Stall,
        why: Why::HttpSplit,
        ..HTTP
    },
    Variant {
        name: RowName::Fixed("single"),
        server_reply: WriteStrategy::Single,
        why: Why::HttpSingle,
        ..HTTP
    },
    Variant {
        name: RowName::Fixed("nodelay"),
        server_nodelay: ServerNodelay::Accepted,
        why: Why::HttpNodelay,
        ..HTTP
    },
    Variant {
        name: RowName::Fixed("delack-max"),
        delack_cap: Some(Side::Client),
        why: Why::DelackCap,
        ..HTTP
    },
    Variant {
        name: RowName::Fixed("route-quickack"),
        route_fix: Some(RouteFix {
            side: Side::Client,
            lever: RouteLever::QuickAck,
        }),
        why: Why::RouteQuickack,
        ..HTTP
    },
    Variant {
        name: RowName::Fixed("route-delack-max"),
        route_fix: Some(RouteFix {
            side: Side::Client,
            lever: RouteLever::DelackMax,
        }),
        why: Why::RouteDelackCap,
        ..HTTP
    },
    Variant {
        name: RowName::Fixed("short"),
        connections: ConnectionMode::PerRequest,
        why: Why::HttpShort,
        ..HTTP
    },
    Variant {
        name: RowName::Sized("value"),
        size: 100,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Sized("value"),
        size: 1400,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Sized("value"),
        size: 2400,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Sized("value"),
        size: 4000,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Sized("quickack"),
        size: 1400,
        client_quickack: true,
        expected: Expectation::NoStall,
        why: Why::ClientQuickack,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Sized("delack-max"),
        size: 1400,
        delack_cap: Some(Side::Client),
        expected: Expectation::NoStall,
        why: Why::DelackCap,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Sized("route-quickack"),
        size: 1400,
        route_fix: Some(RouteFix {
            side: Side::Client,
            lever: RouteLever::QuickAck,
        }),
        expected: Expectation::NoStall,
        why: Why::RouteQuickack,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Sized("route-delack-max"),
        size: 1400,
        route_fix: Some(RouteFix {
            side: Side::Client,
            lever: RouteLever::DelackMax,
        }),
        expected: Expectation::NoStall,
        why: Why::RouteDelackCap,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Sized("nodelay"),
        size: 1400,
        server_nodelay: ServerNodelay::Accepted,
        expected: Expectation::NoStall,
        why: Why::AcceptedNodelay,
        ..MEMCACHED
    },
    Variant {
        name: RowName::Paused("nagle"),
        ..STREAM
    },
    Variant {
        name: RowName::Paused("nagle"),
        pause_ms: 5,
        ..STREAM
    },
    Variant {
        name: RowName::Paused("nagle"),
        pause_ms: 10,
        ..STREAM
    },
    Variant {
        name: RowName::Paused("nagle"),
        pause_ms: 15,
        ..STREAM
    },
    Variant {
        name: RowName::Paused("nodelay"),
        client_nodelay: true,
        why: Why::StreamNodelay,
        ..STREAM
    },
    Variant {
        name: RowName::Paused("nodelay"),
        client_nodelay: true,
        pause_ms: 5,
        why: Why::StreamNodelay,
        ..STREAM
    },
    Variant {
        name: RowName::Paused("nodelay"),
        client_nodelay: true,
        pause_ms: 10,
        why: Why::StreamNodelay,
        ..STREAM
    },
    Variant {
        name: RowName::Paused("nodelay"),
        client_nodelay: true,
        pause_ms: 15,
        why: Why::StreamNodelay,
        ..STREAM
    },
    Variant {
        scenario: Scenario::Inherit,
        name: RowName::Fixed("nodelay-listener"),
        workload: &workload::HTTP,
        client_write: WriteStrategy::Single,
        server_reply: WriteStrategy::Split,
        server_nodelay: ServerNodelay::Listener,
        size: 200,
        why: Why::ListenerNodelay,
        ..ECHO
    },
    Variant {
        scenario: Scenario::Inherit,
        name: RowName::Fixed("quickack-listener"),
        listener_quickack: Some(false),
        expected: Expectation::Stall,
        why: Why::ListenerQuickack,
        ..ECHO
    },
    PIPELINE_ROWS[0],
    PIPELINE_ROWS[1],
    PIPELINE_ROWS[2],
    PIPELINE_ROWS[3],
    CONCURRENT_ROWS[0],
    CONCURRENT_ROWS[1],
    CONCURRENT_ROWS[2],
    CONCURRENT_ROWS[3],
];

/// The scenario called `name`, if any.
pub(crate) fn scenario_named(name: &str) -> Option<Scenario> {
    SCENARIOS
        .iter()
        .find(|info| info.name == name)
        .map(|info| info.scenario)
}

/// The catalogue row `scenario`/`name` (its catalogue name), for unit tests.
#[cfg(test)]
pub(crate) fn catalogue_row(scenario: &str, name: &str) -> &'static Variant {
    CATALOGUE
        .iter()
        .find(|v| v.scenario.name() == scenario && v.name() == name)
        .unwrap_or_else(|| panic!("no row {scenario}/{name} in the catalogue"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_table_is_in_the_order_of_the_enum() {
        for (index, info) in SCENARIOS.iter().enumerate() {
            assert_eq!(info.scenario as usize, index, "{}", info.name);
            assert!(info.sizes.0 <= info.sizes.1 && info.sizes.1 <= crate::args::lab::MAX_SIZE);
        }
        // Every row has a name of its own within its scenario, and a size it accepts.
        for (index, v) in CATALOGUE.iter().enumerate() {
            assert!(!v.name().is_empty());
            let twins = CATALOGUE[..index]
                .iter()
                .filter(|w| w.scenario == v.scenario && w.name() == v.name());
            assert_eq!(twins.count(), 0, "{}/{}", v.scenario.name(), v.name());
            let (min, max) = v.scenario.info().sizes;
            assert!(
                (min..=max).contains(&v.size),
                "{}/{}",
                v.scenario.name(),
                v.name()
            );
        }
    }

    #[test]
    fn names_made_of_the_size_show_the_size_in_use() {
        assert_eq!(
            catalogue_row("memcached", "value-100").name_in_run(Some(2400)),
            "value-2400"
        );
        assert_eq!(
            catalogue_row("memcached", "nodelay-1400").name_in_run(Some(7)),
            "nodelay-7"
        );
        assert_eq!(
            catalogue_row("memcached", "value-100").name_in_run(None),
            "value-100"
        );
        assert_eq!(
            catalogue_row("echo", "split").name_in_run(Some(100)),
            "split"
        );
        assert_eq!(
            catalogue_row("stream", "nagle-0ms").name_in_run(Some(1200)),
            "nagle-0ms"
        );
        assert_eq!(
            catalogue_row("stream", "nodelay-15ms").name_in_run(Some(9)),
            "nodelay-15ms"
        );
    }
}
