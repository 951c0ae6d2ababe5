//! `capture::live` on real loopback sockets: what a consumer is handed is what the pcap file
//! holds (read back by the file reader `analyze` uses), each packet once, only the watched
//! ports, and a Detector fed live finds a Nagle × delayed-ACK stall. Needs root (CAP_NET_RAW).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tcpstall::capture::for_each_segment;
use tcpstall::capture::live::{CaptureOptions, LiveCapture, OpenError, PacketSocket, PortFilter};
use tcpstall::decode::{flags, Segment};
use tcpstall::detect::{Detector, DetectorConfig, StallKind};
use tcpstall::Side;

mod support;

fn require_root() {
    support::require_root("tests/live_capture.rs needs root (CAP_NET_RAW)");
}

fn temp_path(file: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tcpstall-live-{}-{file}", std::process::id()))
}

/// One connection to `listener`: the client sends `request` in the given writes, the server
/// answers `reply` bytes, both close.
fn exchange(listener: &TcpListener, writes: &[&[u8]], reply: usize) {
    let addr = listener.local_addr().expect("listener address");
    let mut client = TcpStream::connect(addr).expect("connect on loopback");
    let (mut server, _) = listener.accept().expect("accept");
    for write in writes {
        client.write_all(write).expect("client write");
    }
    let request_len: usize = writes.iter().map(|w| w.len()).sum();
    let mut got = vec![0u8; request_len];
    server.read_exact(&mut got).expect("server read");
    server.write_all(&vec![b'r'; reply]).expect("server write");
    let mut answer = vec![0u8; reply];
    client.read_exact(&mut answer).expect("client read");
    client.shutdown(Shutdown::Write).expect("client FIN");
    server.shutdown(Shutdown::Write).expect("server FIN");
    let _ = server.read(&mut got);
    let _ = client.read(&mut answer);
}

#[test]
fn consumer_and_pcap_file_get_every_watched_packet_once() {
    require_root();
    assert_captures_once_and_only_the_watched_port("127.0.0.1", "v4.pcap");
    // The kernel filter reads IPv6's ports at other offsets.
    assert_captures_once_and_only_the_watched_port("::1", "v6.pcap");
}

/// Captures one exchange with a server on `address` while another server on the same address
/// is used too, and checks what the consumer and the file got.
fn assert_captures_once_and_only_the_watched_port(address: &str, file: &str) {
    let ip: std::net::IpAddr = address.parse().expect("an address");
    let watched = TcpListener::bind((ip, 0)).expect("bind");
    let other = TcpListener::bind((ip, 0)).expect("bind");
    let port = watched.local_addr().unwrap().port();
    let pcap = temp_path(file);
    let socket = PacketSocket::open("lo").expect("a packet socket on lo");
    assert_eq!(socket.linktype(), 1, "lo frames are Ethernet");
    let seen: Arc<Mutex<Vec<Segment>>> = Arc::default();
    let sink = seen.clone();
    let capture = LiveCapture::start(
        socket,
        CaptureOptions {
            ports: PortFilter::Only(vec![port]),
            pcap: Some(pcap.clone()),
        },
        move |segment: &Segment| sink.lock().unwrap().push(*segment),
    )
    .expect("capture starts");
    exchange(&watched, &[b"hello ", b"world\r\n"], 100);
    exchange(&other, &[b"not watched"], 10);
    let finished = capture.finish().expect("capture finishes");
    let live = seen.lock().unwrap().clone();

    assert_eq!(finished.summary.flows, 1);
    assert_eq!(finished.summary.unclosed_flows, 0);
    assert_eq!(finished.summary.packets, live.len() as u64);
    // The kernel's filter let through only these: no other port, no outgoing copy.
    assert_eq!(finished.summary.queued, finished.summary.packets);
    assert_eq!(finished.summary.dropped, 0);
    assert!(
        live.iter()
            .all(|s| (s.src_port == port || s.dst_port == port) && s.src == ip),
        "only the watched port"
    );
    // Each packet once: exactly one SYN, one SYN-ACK, one FIN each way.
    let count = |bits: u8, from_server: bool| {
        live.iter()
            .filter(|s| s.flags & bits == bits && (s.src_port == port) == from_server)
            .count()
    };
    assert_eq!(count(flags::SYN, false), 1);
    assert_eq!(count(flags::SYN | flags::ACK, true), 1);
    assert_eq!(count(flags::FIN, false), 1);
    assert_eq!(count(flags::FIN, true), 1);
    let payload = |from_server: bool| -> u32 {
        live.iter()
            .filter(|s| (s.src_port == port) == from_server)
            .map(|s| s.payload_len)
            .sum()
    };
    assert_eq!((payload(false), payload(true)), (13, 100));

    // The file holds the same segments, in the same order, with the same timestamps.
    let file = std::fs::File::open(&pcap).expect("the pcap file exists");
    let mut from_file = Vec::new();
    // Packets sent on two CPUs are stamped at netif_rx and may reach the ring in the other
    // order (each CPU drains its own backlog), so the file may say its timestamps go back.
    // That is the kernel's order, kept faithfully; any other warning is damage.
    let mut warnings = Vec::new();
    let stats = for_each_segment(file, |s| from_file.push(*s), |w| warnings.push(w.clone()))
        .expect("the file reads back");
    assert!(
        warnings
            .iter()
            .all(|w| w.message.contains("timestamps go backwards")),
        "only timestamp order may be remarked on: {warnings:?}"
    );
    let _ = std::fs::remove_file(&pcap);
    assert_eq!(stats.packets, live.len() as u64);
    assert_eq!(from_file, live);
}

/// An unwatched port's connection already kept is kept to its end, a new one to the port is
/// not (once its user is done with a port the kernel may give it to another program), and
/// watched again the port's new connections are kept again.
#[test]
fn an_unwatched_port_keeps_its_open_connection_and_no_new_one() {
    require_root();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Segment>>> = Arc::default();
    let sink = seen.clone();
    let capture = LiveCapture::start(
        PacketSocket::open("lo").expect("a packet socket on lo"),
        CaptureOptions {
            ports: PortFilter::Only(vec![addr.port()]),
            pcap: None,
        },
        move |segment: &Segment| sink.lock().unwrap().push(*segment),
    )
    .expect("capture starts");
    let connect = || {
        let client = TcpStream::connect(addr).expect("connect on loopback");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    };
    // Sends `bytes` from the client, reads them at the server.
    let send = |client: &mut TcpStream, server: &mut TcpStream, bytes: &[u8]| {
        client.write_all(bytes).expect("client write");
        let mut got = vec![0u8; bytes.len()];
        server.read_exact(&mut got).expect("server read");
    };
    let close = |client: TcpStream, mut server: TcpStream| {
        client.shutdown(Shutdown::Write).expect("client FIN");
        let _ = server.read(&mut [0u8; 1]);
        drop(server);
        let mut client = client;
        let _ = client.read(&mut [0u8; 1]);
    };
    let (mut kept_client, mut kept_server) = connect();
    send(&mut kept_client, &mut kept_server, b"before ");
    // The reader may not have read a packet yet: its kernel stamp decides, not the reading.
    capture.unwatch_port(addr.port());
    let (mut new_client, mut new_server) = connect();
    send(&mut new_client, &mut new_server, b"not kept");
    close(new_client, new_server);
    send(&mut kept_client, &mut kept_server, b"after");
    close(kept_client, kept_server);
    capture.watch_port(addr.port());
    let (mut again_client, mut again_server) = connect();
    send(&mut again_client, &mut again_server, b"watched again");
    let again_port = again_client.local_addr().unwrap().port();
    close(again_client, again_server);
    let finished = capture.finish().expect("capture finishes");
    let live = seen.lock().unwrap().clone();

    let listing: Vec<String> = live
        .iter()
        .map(|s| format!("{} > {} {} B", s.src_port, s.dst_port, s.payload_len))
        .collect();
    assert_eq!(
        finished.summary.flows, 2,
        "the kept and the watched-again one: {listing:#?}"
    );
    assert_eq!(finished.summary.unclosed_flows, 0);
    let client_ports: std::collections::BTreeSet<u16> = live
        .iter()
        .map(|s| {
            if s.src_port == addr.port() {
                s.dst_port
            } else {
                s.src_port
            }
        })
        .collect();
    assert_eq!(client_ports.len(), 2, "{client_ports:?}");
    assert!(client_ports.contains(&again_port));
    let sent = |port: u16| -> u32 {
        live.iter()
            .filter(|s| s.src_port == port)
            .map(|s| s.payload_len)
            .sum()
    };
    let kept_port = *client_ports.iter().find(|p| **p != again_port).unwrap();
    assert_eq!(sent(kept_port), 12, "\"before \" and \"after\"");
    assert_eq!(sent(again_port), 13);
    let fins = |port: u16| {
        live.iter()
            .filter(|s| s.has(flags::FIN) && (s.src_port == port || s.dst_port == port))
            .count()
    };
    assert_eq!(
        (fins(kept_port), fins(again_port)),
        (2, 2),
        "both close, both ways"
    );
}

#[test]
fn a_detector_fed_live_finds_the_write_write_read_stall() {
    require_root();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let capture = LiveCapture::start(
        PacketSocket::open("lo").expect("a packet socket on lo"),
        CaptureOptions {
            ports: PortFilter::All,
            pcap: None,
        },
        Detector::new(DetectorConfig::default()),
    )
    .expect("capture starts");
    capture.watch_port(port); // already kept with PortFilter::All: a no-op
    let client = std::thread::spawn({
        let addr = listener.local_addr().unwrap();
        move || {
            let mut stream = TcpStream::connect(addr).expect("connect");
            let mut line = [0u8; 13];
            // The first turns leave quick-ACK mode; then the 7 B tail waits in
            // tcp_nagle_check for the delayed ACK of the 6 B head.
            for _ in 0..4 {
                stream.write_all(b"hello ").unwrap();
                stream.write_all(b"world\r\n").unwrap();
                stream.read_exact(&mut line).unwrap();
            }
        }
    });
    let (mut server, _) = listener.accept().expect("accept");
    let mut line = [0u8; 13];
    for _ in 0..4 {
        server.read_exact(&mut line).unwrap();
        server.write_all(&line).unwrap();
    }
    client.join().expect("client thread");
    drop(server);
    let analysis = capture.stop().expect("capture stops").consumer.finish();
    let stalls: Vec<_> = analysis
        .events
        .iter()
        .filter(|e| e.server.port == port)
        .collect();
    assert!(!stalls.is_empty(), "no stall found");
    for event in stalls {
        assert_eq!(event.finding.kind, StallKind::NagleDelayedAck);
        assert_eq!(event.finding.held_side, Side::Client);
        assert!(
            event.finding.delay_ns.as_nanos() >= 30_000_000,
            "{:?}",
            event.finding
        );
    }
}

#[test]
fn opening_names_what_is_wrong() {
    require_root();
    match PacketSocket::open("tcpstall-no-such-if") {
        Err(err @ OpenError::NoInterface { .. }) => {
            assert!(err.to_string().contains("tcpstall-no-such-if"), "{err}")
        }
        other => panic!("expected NoInterface, got {other:?}"),
    }
}
