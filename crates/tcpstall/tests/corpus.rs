//! `analyze` over the public capture corpus (`TCPSTALL_CORPUS`:
//! tcpdump's, zeek's and libpcap's test suites, compressed files included): every file, in a
//! bounded time, ends with exit 0 or exit 2 and a reason, never a panic or a hang; its claims
//! hold on a real path ([`invariant_breaches`]); and for the files kept in [`COMPARED`] the
//! TCP segments analyze reads are as many as tshark counts.
//!
//! `TCPSTALL_CORPUS` names another folder. The test is skipped, with a message, only when the
//! folder is absent.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest one file may take (debug build, two cores shared with the rest of the suite); the
/// largest corpus file is half a megabyte.
const PER_FILE: Duration = Duration::from_secs(20);

/// Files whose TCP segment count must equal tshark's: the ones behind tunnels and on link
/// types the decoder learnt for them (VXLAN and Geneve over IPv4 and IPv6 with GSO
/// super-packets inside, Geneve with options, GRE/WCCP, MPLS, PPP, Juniper, ARCnet in both
/// RFC framings, IP over InfiniBand), and plain ones as a check that nothing else moved
/// (Ethernet, VLAN, Linux cooked, raw IP, loopback, IPv6 extension headers, fragments,
/// ICMP errors quoting TCP, truncated headers).
///
/// Left out: `bigtcp-*`, BIG TCP super-packets (IPv4 total length 0, RFC 2675 jumbograms for
/// IPv6) in VXLAN/Geneve, which tcpdump reads as one TCP segment each but tshark 4.0 does not
/// decode at all.
///
/// From zeek's and libpcap's suites: every encapsulation and link type that once hid TCP
/// (802.11 in Aruba's GRE, A-MSDU, AYIYA, GRE in UDP, PBB, LLC/SNAP, VN-Tag, FabricPath, FDDI,
/// NFLOG, PPI, IPsec AH with IPComp), and the gzip'd captures.
const COMPARED: &[&str] = &[
    "zeek/tunnels/gre-aruba.pcap",
    "zeek/tunnels/gre-aruba-amsdu.pcap",
    "zeek/tunnels/ayiya3.pcap",
    "zeek/tunnels/gre-over-udp-4754.pcap",
    "zeek/tunnels/Teredo.pcap",
    "zeek/pbb.pcap",
    "zeek/snap-tcp.pcap",
    "zeek/vntag_vlan_sandwich_clean.pcap",
    "zeek/cisco-fabric-path.pcap",
    "zeek/llc.pcap",
    "zeek/nflog-http.pcap",
    "libpcap/tests/filter/http_PPI.pcap",
    "libpcap/tests/filter/AH-IPcomp-IPv4.pcap",
    "libpcap/tests/filter/AH-IPcomp-IPv6.pcap",
    "zeek/echo-connections.pcap.gz",
    "zeek/http/1000-requests-one-dropped-response.pcap.gz",
    "zeek/contentline/telnet-long-line-no-eol.pcapng.gz",
    "zeek/tls/tls-fragmented-handshake.pcap.gz",
    // Tunnels and overlays.
    "tcpdump/geneve.pcap",
    "tcpdump/geneve-gcp.pcap",
    "tcpdump/gso-ipv4-geneve-ipv4.pcap",
    "tcpdump/gso-ipv4-geneve-ipv6.pcap",
    "tcpdump/gso-ipv4-vxlan-ipv4.pcap",
    "tcpdump/gso-ipv4-vxlan-ipv6.pcap",
    "tcpdump/gso-ipv6-geneve-ipv4.pcap",
    "tcpdump/gso-ipv6-geneve-ipv6.pcap",
    "tcpdump/gso-ipv6-vxlan-ipv4.pcap",
    "tcpdump/gso-ipv6-vxlan-ipv6.pcap",
    "tcpdump/lspping-fec-ldp.pcap",
    "tcpdump/wccp_redirect_gre.pcap",
    // Link types.
    "tcpdump/arcnet-rfc1051-arp-icmp-http.pcap",
    "tcpdump/arcnet-rfc1201-arp-icmp-http.pcap",
    "tcpdump/bgp-aigp.pcap",
    "tcpdump/bgp_vpn_attrset.pcap",
    "tcpdump/ipoib.pcap",
    // Already read before, kept as they were: GSO and BIG TCP super-packets (IPv6 hop-by-hop
    // jumbogram), TSO, MPTCP options, ECN, pcapng, PPTP's control connection, DNS on another
    // port, damaged headers.
    "tcpdump/accecn_handshake.pcap",
    "tcpdump/bigtcp-ipv6-hbh.pcap",
    "tcpdump/dns_tcp_8053.pcap",
    "tcpdump/gso-ipv4.pcap",
    "tcpdump/gso-ipv6.pcap",
    "tcpdump/heapoverflow-tcp_print.pcap",
    "tcpdump/ipv4_tcp_http_xml_tso.pcap",
    "tcpdump/kday4.pcap",
    "tcpdump/mptcp-v0.pcap",
    "tcpdump/of13_ericsson.pcapng",
    "tcpdump/pptp.pcap",
    "tcpdump/print-flags.pcap",
    "tcpdump/resp_3_malicious.pcap",
];

/// Every capture below `dir` (the corpus's README and other text left out).
fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, files);
        } else if !path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
}

/// What one run of analyze gave.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` to its end or until `limit`, then kills it; `None` when it had to be killed.
fn run_bounded(mut cmd: Command, limit: Duration) -> Option<Run> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Pipes drained on threads so a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    status.map(|s| Run {
        code: s.code(),
        stdout,
        stderr,
    })
}

/// TCP segments in `file` as tshark counts them: frames with a TCP header, with IP reassembly
/// off and ICMP left out. A flow analyser reads each frame's own TCP header once: an ICMP
/// error quotes the header of another packet, which is no segment of the flow; and with
/// reassembly on, tshark shows TCP on a datagram's last fragment, while the header (which
/// is what is read) is in the first.
fn tshark_tcp_count(file: &Path) -> usize {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(file).args([
        "-o",
        "ip.defragment:FALSE",
        "-o",
        "ipv6.defragment:FALSE",
        "-Y",
        "tcp && !icmp && !icmpv6",
        "-T",
        "fields",
        "-e",
        "frame.number",
    ]);
    let run = run_bounded(cmd, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("tshark did not finish on {}", file.display()));
    assert_eq!(
        run.code,
        Some(0),
        "tshark failed on {} (install it with scripts/install-deps): {}",
        file.display(),
        run.stderr
    );
    run.stdout.lines().filter(|l| !l.is_empty()).count()
}

/// `summary.tcp_segments` of analyze's JSON.
fn tcp_segments(json: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(json).expect("analyze printed valid JSON");
    v["summary"]["tcp_segments"]
        .as_u64()
        .expect("summary.tcp_segments")
}

/// The claims a real path forbids, in analyze's JSON of one file (docs/ACCURACY.md): an
/// event longer than its flow, a flow losing more time than it lasts, a cork gap the round
/// trip explains, a Nagle release sooner than the round trip to the held side allows, and a
/// connection made into two flows with client and server swapped.
fn invariant_breaches(json: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).expect("analyze printed valid JSON");
    let empty = Vec::new();
    let flows = v["flows"].as_array().unwrap_or(&empty);
    let mut breaches = Vec::new();
    // 1 µs of slack: the JSON's milliseconds are rounded.
    const SLACK_MS: f64 = 0.001;
    let mut endpoints = std::collections::HashSet::new();
    for f in flows {
        let span = f["span_ms"].as_f64().expect("flows[].span_ms");
        let lost = f["time_lost_ms"].as_f64().expect("flows[].time_lost_ms");
        if lost > span + SLACK_MS {
            breaches.push(format!("flow {} loses {lost} ms in {span} ms", f["flow"]));
        }
        let (c, s) = (f["client"].as_str(), f["server"].as_str());
        if endpoints.contains(&(s, c)) {
            breaches.push(format!(
                "flow {} also made with the roles swapped",
                f["flow"]
            ));
        }
        endpoints.insert((c, s));
    }
    for e in v["events"].as_array().unwrap_or(&empty) {
        let Some(f) = flows.iter().find(|f| f["flow_id"] == e["flow_id"]) else {
            continue;
        };
        let delay = e["delay_ms"].as_f64().expect("events[].delay_ms");
        let span = f["span_ms"].as_f64().expect("flows[].span_ms");
        if delay > span + SLACK_MS {
            breaches.push(format!(
                "{} event of {delay} ms in a flow of {span} ms",
                e["kind"]
            ));
        }
        let path = &f["path"];
        let (c, s) = (
            path["client_rtt_ms"].as_f64(),
            path["server_rtt_ms"].as_f64(),
        );
        let held = if e["held_side"] == "client" { c } else { s };
        match e["kind"].as_str() {
            Some("cork_timer") if path["from"] == "handshake" => {
                let rtt = c.unwrap_or(0.0) + s.unwrap_or(0.0);
                if delay < rtt + 100.0 {
                    breaches.push(format!("cork gap of {delay} ms on a {rtt} ms path"));
                }
            }
            Some("nagle_delayed_ack" | "nagle_minor") => {
                if let (Some(release), Some(held)) = (e["release_ms"].as_f64(), held) {
                    if release + 1.0 < held {
                        breaches.push(format!(
                            "Nagle release {release} ms after the ACK, {held} ms from the held side"
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    breaches
}

fn analyze(file: &Path) -> Option<Run> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tcpstall"));
    cmd.args(["analyze", "--json", "--workers", "1"]).arg(file);
    run_bounded(cmd, PER_FILE)
}

#[test]
fn analyze_reads_every_corpus_file_and_counts_tcp_as_tshark_does() {
    let dir = support::corpus_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        support::skip(format!(
            "no capture corpus at {} (set TCPSTALL_CORPUS to another folder)",
            dir.display()
        ));
        return;
    };
    drop(entries);
    let mut files = Vec::new();
    walk(&dir, &mut files);
    files.sort();
    assert!(
        files.len() > 100,
        "only {} files in {}",
        files.len(),
        dir.display()
    );

    // Two threads: the machine has two cores.
    let queue = Mutex::new(files.iter());
    let failures = Mutex::new(Vec::<String>::new());
    let counts = Mutex::new(Vec::<(String, u64)>::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let Some(file) = queue.lock().unwrap().next() else {
                    break;
                };
                let name = file
                    .strip_prefix(&dir)
                    .unwrap_or(file)
                    .to_string_lossy()
                    .to_string();
                let fail = |why: String| failures.lock().unwrap().push(format!("{name}: {why}"));
                let Some(run) = analyze(file) else {
                    fail(format!("still running after {PER_FILE:?}"));
                    continue;
                };
                if run.stderr.contains("panicked") {
                    fail(format!("panicked: {}", run.stderr));
                    continue;
                }
                match run.code {
                    Some(0) => {
                        let breaches = invariant_breaches(&run.stdout);
                        if !breaches.is_empty() {
                            fail(format!(
                                "claims a real path forbids: {}",
                                breaches.join("; ")
                            ));
                        }
                        if COMPARED.contains(&name.as_str()) {
                            counts
                                .lock()
                                .unwrap()
                                .push((name, tcp_segments(&run.stdout)));
                        }
                    }
                    Some(2)
                        if run.stderr.contains("tcpstall: ") && run.stderr.trim().len() > 20 =>
                    {
                        if COMPARED.contains(&name.as_str()) {
                            fail(format!("refused: {}", run.stderr.trim()));
                        }
                    }
                    other => fail(format!("exit {other:?}, stderr: {}", run.stderr.trim())),
                }
            });
        }
    });
    // tshark's counts, for the kept files only (tshark takes most of a second to start).
    let counts = counts.into_inner().unwrap();
    let queue = Mutex::new(counts.iter());
    let compared = Mutex::new(0usize);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let Some((name, ours)) = queue.lock().unwrap().next() else {
                    break;
                };
                let theirs = tshark_tcp_count(&dir.join(name));
                *compared.lock().unwrap() += 1;
                if theirs as u64 != *ours {
                    failures.lock().unwrap().push(format!(
                        "{name}: analyze read {ours} TCP segments, tshark {theirs}"
                    ));
                }
            });
        }
    });
    let compared = compared.into_inner().unwrap();
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} corpus files failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        compared,
        COMPARED.len(),
        "some kept files are missing from the corpus"
    );
    println!(
        "{} corpus files read; {compared} TCP counts equal tshark's",
        files.len()
    );
}
