//! Python's http.server as the tests' real server that stalls: with HTTP/1.1 keep-alive it
//! writes each answer's header and body apart (CPython issue 108736), so every request after a
//! connection's first waits for the client's delayed ACK.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{first_line_within, KillOnDrop};

/// Python's http.server, HTTP/1.1 keep-alive, serving a 200-byte file from a directory of
/// its own, on a port it picks.
pub struct PythonServer {
    child: KillOnDrop,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
}

impl PythonServer {
    /// Starts it and waits for it to say its port.
    pub fn start() -> PythonServer {
        let dir = std::env::temp_dir().join(format!(
            "tcpstall-http-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("index.html"), [b'x'; 200]).expect("file");
        let mut child = Command::new("python3")
            .args(["-u", "-m", "http.server", "--protocol", "HTTP/1.1"])
            .args(["--bind", "127.0.0.1", "--directory"])
            .arg(&dir)
            .arg("0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs");
        let stdout = child.stdout.take().expect("piped stdout");
        let child = KillOnDrop(child);
        // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
        let line = first_line_within(stdout, Duration::from_secs(10))
            .expect("http.server announces its port");
        let port = line
            .split(" port ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        PythonServer { child, port, dir }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// `n` GETs on one keep-alive connection, each answer read whole before the next request.
    pub fn requests(&self, n: usize) {
        drop(self.requests_kept_open(n));
    }

    /// [`PythonServer::requests`] on a connection returned open.
    pub fn requests_kept_open(&self, n: usize) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut writer = stream.try_clone().expect("clone");
        let mut reader = BufReader::new(stream);
        for i in 0..n {
            writer
                .write_all(b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .expect("request");
            let mut length = None;
            loop {
                let mut line = String::new();
                let read = reader.read_line(&mut line).expect("response header");
                assert!(read > 0, "server closed during request {i}");
                if line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse::<usize>().ok();
                    }
                }
            }
            let mut body = vec![0u8; length.expect("Content-Length")];
            reader.read_exact(&mut body).expect("body");
        }
        writer
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
