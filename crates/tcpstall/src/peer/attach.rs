//! Puts the peer on one end of the lab's emulated path (`lab --rtt`, [`crate::host::netns`]).
//! That end's namespace keeps its TUN device to the relay (`tcpstall0`) but loses its address,
//! so its kernel stack answers nothing; a second TUN device (`tcpstall1`), owned by the peer's
//! smoltcp stack, carries the end's address, and the namespace's kernel only forwards packets
//! between the two devices (IP forwarding, no TCP). A capture on the other end's device sees
//! the peer's packets exactly as the relay delivers them.

use std::fs::File;
use std::net::Ipv4Addr;

use anyhow::Context;

use crate::host::netns::{open_tun, run, NetNs, TUN_NAME};

/// Name of the peer's own TUN device in its namespace.
pub const PEER_TUN_NAME: &str = "tcpstall1";

/// Moves the address `own` of namespace `ns` from its kernel to a new TUN device, returned
/// open for the peer's stack; packets to `other` still leave through the relay's device.
pub fn attach_peer(ns: &NetNs, own: Ipv4Addr, other: Ipv4Addr) -> anyhow::Result<File> {
    let name = ns.name().to_string();
    let (own_route, other_route) = (format!("{own}/32"), format!("{other}/32"));
    run("ip", &["-n", &name, "addr", "flush", "dev", TUN_NAME])?;
    run(
        "ip",
        &["-n", &name, "route", "add", &other_route, "dev", TUN_NAME],
    )?;
    let tun = ns
        .run(|| {
            let tun = open_tun(PEER_TUN_NAME)?;
            // Forwarding between two devices without addresses: reverse-path filtering would
            // find no address to validate the source against (`fib_validate_source`).
            for (key, value) in [
                ("ipv4/ip_forward", "1"),
                ("ipv4/conf/all/rp_filter", "0"),
                ("ipv4/conf/default/rp_filter", "0"),
                ("ipv4/conf/tcpstall0/rp_filter", "0"),
                ("ipv4/conf/tcpstall1/rp_filter", "0"),
            ] {
                std::fs::write(format!("/proc/sys/net/{key}"), value).map_err(|err| {
                    std::io::Error::other(format!(
                        "cannot set net.{key} in the peer's namespace: {err}"
                    ))
                })?;
            }
            Ok(tun)
        })
        .with_context(|| format!("cannot create the peer's TUN device in {name}"))?;
    let mtu = super::device::PEER_MTU.to_string();
    run(
        "ip",
        &["-n", &name, "link", "set", PEER_TUN_NAME, "mtu", &mtu, "up"],
    )?;
    run(
        "ip",
        &[
            "-n",
            &name,
            "route",
            "add",
            &own_route,
            "dev",
            PEER_TUN_NAME,
        ],
    )?;
    Ok(File::from(tun))
}
