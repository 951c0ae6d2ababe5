//! The lab's capture of its own traffic: on `lo`, or over an emulated path on the server
//! namespace's TUN device (each packet as the server's kernel sends and receives it).

use std::path::Path;

use anyhow::Context;

use super::path::{PathEnds, TUN_NAME};
use crate::capture::live::{CaptureOptions, LiveCapture, PacketSocket, PortFilter};

/// Opens the packet socket the lab captures with: `lo`, or the server's TUN device when the
/// rows run over an emulated path.
fn open_socket(path: Option<&PathEnds>) -> anyhow::Result<PacketSocket> {
    match path {
        None => Ok(PacketSocket::open("lo")?),
        Some(ends) => {
            let opened = ends.server.run(|| Ok(PacketSocket::open(TUN_NAME)))?;
            Ok(opened.with_context(|| format!("in namespace {}", ends.server.name()))?)
        }
    }
}

/// Starts `--capture FILE`: the rows' ports are added as they start.
pub fn start_file_capture(file: &Path, path: Option<&PathEnds>) -> anyhow::Result<LiveCapture<()>> {
    let socket = open_socket(path).context("--capture")?;
    let options = CaptureOptions {
        ports: PortFilter::Only(Vec::new()),
        pcap: Some(file.to_path_buf()),
    };
    LiveCapture::start(socket, options, ())
}
