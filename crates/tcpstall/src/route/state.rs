//! What `fix --route` keeps so that `--undo` puts the route back exactly: one JSON file per
//! changed route under [`STATE_DIR`], named by the namespace and the route's key (family,
//! table, destination, TOS, priority), holding the route as it was before the first change and
//! as tcpstall left it. /run is emptied at boot, as the kernel's routes are.

use std::fs;
use std::io;
use std::path::PathBuf;

use netlink_packet_route::route::RouteMessage;
use serde::{Deserialize, Serialize};

use super::rtnetlink;

/// Where the state files live.
pub const STATE_DIR: &str = "/run/tcpstall/routes";

/// One changed route.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteState {
    /// The destination the route was looked up for.
    pub dest: String,
    /// The namespace, as named on the command line (`null` for tcpstall's own).
    pub netns: Option<String>,
    /// The route before tcpstall changed it, as `fix` showed it.
    pub route_before: String,
    /// The route before the first change: the RTM_NEWROUTE request that recreates it, hex.
    pub original: String,
    /// The route as tcpstall last left it, read back from the kernel, same form.
    pub applied: String,
}

impl RouteState {
    /// The original route.
    pub fn original(&self) -> io::Result<RouteMessage> {
        rtnetlink::from_bytes(&from_hex(&self.original)?)
    }

    /// The route as tcpstall left it.
    pub fn applied(&self) -> io::Result<RouteMessage> {
        rtnetlink::from_bytes(&from_hex(&self.applied)?)
    }
}

/// The state file of `route` in the namespace whose inode is `netns_inode`.
pub fn path_for(netns_inode: u64, route: &RouteMessage) -> PathBuf {
    let family = if route.header.address_family == netlink_packet_route::AddressFamily::Inet6 {
        6
    } else {
        4
    };
    let dest = rtnetlink::destination(route).replace([':', '/'], "_");
    PathBuf::from(STATE_DIR).join(format!(
        "netns{netns_inode}-ipv{family}-table{}-{dest}-tos{}-metric{}.json",
        rtnetlink::table(route),
        route.header.tos,
        rtnetlink::priority(route)
    ))
}

/// The state kept at `path`, `None` when there is none.
pub fn load(path: &PathBuf) -> anyhow::Result<Option<RouteState>> {
    use anyhow::Context;
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is not a tcpstall route state file", path.display())),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Writes `state` to `path` (the directory made if missing, mode 0700), through a temporary
/// file renamed over it, so that a crash leaves the old state or the new, never half of one.
pub fn save(path: &PathBuf, state: &RouteState) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(STATE_DIR)
        .with_context(|| format!("cannot create {STATE_DIR} to keep the route for --undo"))?;
    let temporary = path.with_extension("json.new");
    fs::write(&temporary, serde_json::to_vec_pretty(state)?)
        .and_then(|()| fs::rename(&temporary, path))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Hex of `bytes`, two lower-case digits a byte.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> io::Result<Vec<u8>> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "not a hex string");
    if text.len() % 2 != 0 {
        return Err(invalid());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(invalid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let bytes = [0u8, 1, 0x7f, 0xff];
        assert_eq!(to_hex(&bytes), "00017fff");
        assert_eq!(from_hex("00017fff").expect("hex"), bytes);
        assert!(from_hex("0").is_err());
        assert!(from_hex("zz").is_err());
    }
}
