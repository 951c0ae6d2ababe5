//! A Nagle stall across a real VXLAN tunnel: two network namespaces joined by a veth pair,
//! a kernel `vxlan` device (VNI 42, UDP 4789) on each end, a server that writes each response
//! in two sends. tcpdump captures the same traffic on the veth (VXLAN-encapsulated) and on the
//! vxlan device (the inner packets); analyze must find the same events in both, and name the
//! tunnel in the outer capture's flow.
//!
//! Needs root, `ip`, tcpdump and python3 (scripts/install-deps). Only the test's own
//! namespaces are touched; they are deleted when the test ends, also when it fails.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::tcpdump::Tcpdump;
use support::KillOnDrop;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// Addresses from the documentation ranges (RFC 5737), inside the test's namespaces only.
const UNDERLAY_CLIENT: &str = "192.0.2.1";
const UNDERLAY_SERVER: &str = "192.0.2.2";
const OVERLAY_CLIENT: &str = "198.51.100.1";
const OVERLAY_SERVER: &str = "198.51.100.2";
const PORT: &str = "8080";

/// Request/response turns: from the second on, each response's second send waits for the
/// client's delayed ACK.
const TURNS: usize = 6;

/// Keep-alive server writing each response as two sends (header, body): with Nagle on, the
/// body waits for the delayed ACK of the header. Ends after one connection.
const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
print("ready", flush=True)
s.settimeout(20)
c, _ = s.accept()
c.settimeout(20)
while True:
    req = b""
    while not req.endswith(b"\n"):
        chunk = c.recv(4096)
        if not chunk:
            sys.exit(0)
        req += chunk
    c.sendall(b"header " * 20 + b"\n")
    c.sendall(b"body " * 20 + b"\n")
"#;

/// Client: one request per turn, reads both parts of the response before the next.
const CLIENT: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
for _ in range(int(sys.argv[3])):
    c.sendall(b"GET\n")
    got = b""
    while got.count(b"\n") < 2:
        chunk = c.recv(4096)
        if not chunk:
            sys.exit("server closed early")
        got += chunk
c.close()
"#;

fn require_root() -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    support::skip("needs root for network namespaces and tcpdump");
    false
}

fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "`{program} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The test's two namespaces, deleted on drop (with them the veth pair and vxlan devices).
struct Namespaces {
    client: String,
    server: String,
}

impl Namespaces {
    fn create() -> Namespaces {
        let id = std::process::id();
        let ns = Namespaces {
            client: format!("tcpstall-vxc-{id}"),
            server: format!("tcpstall-vxs-{id}"),
        };
        // Registered before anything is created, so a half-made setup is removed too.
        for name in [&ns.client, &ns.server] {
            run("ip", &["netns", "add", name]);
        }
        let (c, s) = (ns.client.as_str(), ns.server.as_str());
        run(
            "ip",
            &[
                "-n", c, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns",
                s,
            ],
        );
        for (ns_name, veth, underlay, remote, overlay) in [
            (c, "veth0", UNDERLAY_CLIENT, UNDERLAY_SERVER, OVERLAY_CLIENT),
            (s, "veth1", UNDERLAY_SERVER, UNDERLAY_CLIENT, OVERLAY_SERVER),
        ] {
            run("ip", &["-n", ns_name, "link", "set", "lo", "up"]);
            run(
                "ip",
                &[
                    "-n",
                    ns_name,
                    "addr",
                    "add",
                    &format!("{underlay}/24"),
                    "dev",
                    veth,
                ],
            );
            run("ip", &["-n", ns_name, "link", "set", veth, "up"]);
            run(
                "ip",
                &[
                    "-n", ns_name, "link", "add", "vx0", "type", "vxlan", "id", "42", "dstport",
                    "4789", "remote", remote, "local", underlay, "dev", veth,
                ],
            );
            run(
                "ip",
                &[
                    "-n",
                    ns_name,
                    "addr",
                    "add",
                    &format!("{overlay}/24"),
                    "dev",
                    "vx0",
                ],
            );
            run("ip", &["-n", ns_name, "link", "set", "vx0", "up"]);
        }
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in [&self.client, &self.server] {
            let _ = Command::new("ip").args(["netns", "delete", name]).output();
        }
    }
}

fn analyze(file: &Path, flags: &[&str]) -> Value {
    let out = Command::new(BIN)
        .args(["analyze", "--json"])
        .args(flags)
        .arg(file)
        .output()
        .expect("run tcpstall");
    assert!(
        out.status.success(),
        "analyze {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// (kind, held side, delay in ms) of each event, in order.
fn events(analysis: &Value) -> Vec<(String, String, f64)> {
    analysis["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or_default().to_string(),
                e["held_side"].as_str().unwrap_or_default().to_string(),
                e["delay_ms"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect()
}

/// A copy of the Ethernet pcap `from` with VXLAN moved from UDP port 4789 to `port`, as a
/// host configured with another port (Linux's old default 8472, flannel) would send it.
fn move_vxlan_port(from: &Path, to: &Path, port: u16) {
    let mut bytes = std::fs::read(from).expect("read the capture");
    assert_eq!(
        &bytes[..4],
        &[0xd4, 0xc3, 0xb2, 0xa1],
        "tcpdump writes little-endian pcap"
    );
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let captured = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = at + 16;
        at = frame + captured;
        let Some(f) = bytes.get_mut(frame..at) else {
            break;
        };
        // Ethernet, IPv4 carrying UDP: the ports follow the IPv4 header.
        if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[14 + 9] != 17 {
            continue;
        }
        let udp = 14 + usize::from(f[14] & 0x0f) * 4;
        for field in [udp, udp + 2] {
            if f[field..field + 2] == 4789u16.to_be_bytes() {
                f[field..field + 2].copy_from_slice(&port.to_be_bytes());
            }
        }
    }
    std::fs::write(to, bytes).expect("write the copy");
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("TCPSTALL_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn nagle_stall_inside_vxlan_gives_the_same_events_as_the_inner_capture() {
    if !require_root() {
        return;
    }
    let dir = Scratch(std::env::temp_dir().join(format!("tcpstall-vxlan-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("scratch dir");
    let ns = Namespaces::create();
    let outer_file = dir.0.join("veth.pcap");
    let inner_file = dir.0.join("vxlan.pcap");
    let outer_dump = Tcpdump::start_on(Some(&ns.client), "veth0", &outer_file, &[]);
    let inner_dump = Tcpdump::start_on(Some(&ns.client), "vx0", &inner_file, &[]);

    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.server,
            "python3",
            "-c",
            SERVER,
            OVERLAY_SERVER,
            PORT,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 must be installed");
    let ready = server.stdout.take().expect("stdout");
    let server = KillOnDrop(server);
    let mut line = String::new();
    BufReader::new(ready)
        .read_line(&mut line)
        .expect("server output");
    assert_eq!(line.trim(), "ready", "server did not start");

    let client = Command::new("timeout")
        .args([
            "30", "ip", "netns", "exec", &ns.client, "python3", "-c", CLIENT,
        ])
        .args([OVERLAY_SERVER, PORT, &TURNS.to_string()])
        .output()
        .expect("run the client");
    assert!(
        client.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&client.stderr)
    );
    drop(server);
    // Each capture is stopped once the connection's close has reached it.
    outer_dump.stop();
    inner_dump.stop();

    let outer = analyze(&outer_file, &[]);
    let inner = analyze(&inner_file, &[]);
    let (outer_events, inner_events) = (events(&outer), events(&inner));
    assert!(
        inner_events
            .iter()
            .any(|(kind, side, delay)| kind == "nagle_delayed_ack"
                && side == "server"
                && *delay >= 30.0),
        "the inner capture shows the server's Nagle hold: {inner_events:?}"
    );
    assert_eq!(
        outer_events.len(),
        inner_events.len(),
        "same events in both captures: outer {outer_events:?} ({} segments), inner {inner_events:?} ({} segments)",
        outer["summary"]["tcp_segments"],
        inner["summary"]["tcp_segments"]
    );
    for (o, i) in outer_events.iter().zip(&inner_events) {
        assert_eq!((&o.0, &o.1), (&i.0, &i.1), "same kind and held side");
        assert!(
            (o.2 - i.2).abs() <= 1.0,
            "delays within 1 ms: outer {o:?}, inner {i:?}"
        );
    }
    for key in ["flows", "tcp_segments"] {
        assert_eq!(
            outer["summary"][key], inner["summary"][key],
            "summary.{key}"
        );
    }
    let flow = &outer["flows"][0];
    let client = flow["client"].as_str().unwrap_or_default();
    assert!(
        client.starts_with(&format!("{OVERLAY_CLIENT}:")),
        "the flow is the inner connection: {client}"
    );
    assert_eq!(
        flow["outer"]["kind"], "vxlan",
        "the outer capture's flow names its tunnel"
    );
    let endpoints = [flow["outer"]["src"].clone(), flow["outer"]["dst"].clone()];
    assert!(
        endpoints.contains(&Value::from(UNDERLAY_CLIENT))
            && endpoints.contains(&Value::from(UNDERLAY_SERVER)),
        "outer endpoints are the underlay addresses: {endpoints:?}"
    );
    assert!(
        inner["flows"][0].get("outer").is_none(),
        "no tunnel in the inner capture"
    );

    // The same capture with VXLAN on port 8472: read as VXLAN only when asked.
    let moved = dir.0.join("veth-8472.pcap");
    move_vxlan_port(&outer_file, &moved, 8472);
    assert_eq!(analyze(&moved, &[])["summary"]["tcp_segments"], 0);
    let asked = analyze(&moved, &["--vxlan-port", "8472"]);
    assert_eq!(
        events(&asked),
        outer_events,
        "--vxlan-port 8472 reads it as the original"
    );
}
