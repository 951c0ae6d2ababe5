//! A C client whose writes' call stacks are known from its source: it writes each request in
//! two small writes, each from a function of its own, and reads the answer (write-write-read:
//! the second write held behind the first), against a server of 8-byte requests that delays
//! its ACK of the first write, having nothing to send with it. Built by the test with frame
//! pointers and DWARF; the function and line of each write come from the source's marker
//! comments, for `watch --kernel` and `trace` to be checked against.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{first_line_within, spawn_printing_port, KillOnDrop};

/// The client: connects, waits for a byte on its standard input (so that a tracer can follow
/// it first), makes its requests, prints `done` and waits for its standard input to close, so
/// its stacks are named while it runs.
const SOURCE: &str = r#"#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void send_header(int fd)
{
	if (write(fd, "HEAD", 4) != 4) /* first write */
		exit(1);
}

static void send_body(int fd)
{
	if (write(fd, "BODY", 4) != 4) /* held write */
		exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = {0};
	addr.sin_family = AF_INET;
	addr.sin_port = htons(atoi(argv[1]));
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
		return 1;
	char c;
	if (read(0, &c, 1) != 1)
		return 1;
	for (int i = 0; i < atoi(argv[2]); i++) {
		char reply[2];
		send_header(fd);
		send_body(fd);
		if (recv(fd, reply, sizeof(reply), MSG_WAITALL) != sizeof(reply))
			return 1;
	}
	puts("done");
	fflush(stdout);
	return read(0, &c, 1) < 0;
}
"#;

/// The line of the client's source holding `marker`, counted from 1.
pub fn line_of(marker: &str) -> u64 {
    let index = SOURCE
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no {marker:?} in the client's source"));
    index as u64 + 1
}

/// Where the held write is made (`send_body`) and where `main` calls it.
pub fn held_lines() -> (u64, u64) {
    (line_of("/* held write */"), line_of("send_body(fd);"))
}

/// Where the write before it is made (`send_header`) and where `main` calls it.
pub fn first_lines() -> (u64, u64) {
    (line_of("/* first write */"), line_of("send_header(fd);"))
}

/// Builds the client with `cc -g -O0 -fno-omit-frame-pointer` in `dir`; its path.
pub fn build(dir: &Path) -> PathBuf {
    let source = dir.join("client.c");
    std::fs::write(&source, SOURCE).expect("write the client's source");
    let exe = dir.join("client");
    let built = Command::new("cc")
        .args(["-g", "-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&source)
        .output()
        .expect("cc runs (build-essential: scripts/install-deps)");
    assert!(
        built.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    exe
}

/// The server of 8-byte requests, each answered with 2 bytes once it is all in; its port.
pub fn request_server() -> (KillOnDrop, u16) {
    let script = r#"
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    while True:
        got = b""
        while len(got) < 8:
            d = c.recv(8 - len(got))
            if not d:
                break
            got += d
        if len(got) < 8:
            c.close()
            break
        c.sendall(b"ok")
"#;
    spawn_printing_port(
        Command::new("python3").args(["-c", script]),
        "python3 request server",
    )
}

/// The client started, connected and waiting for [`Client::go`]; killed when dropped.
pub struct Client {
    child: KillOnDrop,
    stdin: ChildStdin,
}

impl Client {
    /// Starts the client at `exe` for `requests` requests to `port`.
    pub fn start(exe: &Path, port: u16, requests: usize) -> Client {
        let mut child = Command::new(exe)
            .args([port.to_string(), requests.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the C client starts");
        let stdin = child.stdin.take().expect("piped stdin");
        Client {
            child: KillOnDrop(child),
            stdin,
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Lets it make its requests, and waits until it has (it then runs on until dropped).
    pub fn go(&mut self) {
        self.stdin.write_all(b"g").expect("let the client go");
        let stdout = self.child.0.stdout.take().expect("piped stdout");
        let line = first_line_within(stdout, Duration::from_secs(20));
        assert_eq!(
            line.as_deref().map(str::trim_end),
            Some("done"),
            "the client made its requests"
        );
    }
}

/// The index of the frame of `function` in `stack` (a JSON array of frames), checked at
/// `line` of the client's source, in its file and module.
pub fn frame_at(stack: &Value, function: &str, line: u64) -> usize {
    let frames = stack
        .as_array()
        .unwrap_or_else(|| panic!("no frames: {stack}"));
    let at = frames
        .iter()
        .position(|f| f["function"] == function)
        .unwrap_or_else(|| panic!("no frame of {function}: {stack}"));
    let frame = &frames[at];
    assert_eq!(frame["line"].as_u64(), Some(line), "{function}: {frame}");
    assert!(
        frame["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("client.c")),
        "{frame}"
    );
    assert!(
        frame["module"]
            .as_str()
            .is_some_and(|m| m.ends_with("/client")),
        "{frame}"
    );
    at
}

/// Checks the stacks of a held write of the client in `found` (a watch event, or trace's
/// example: keys `stack`, `previous_stack` and their `*_missing`): the held write in
/// `send_body` called from `main`, whole; the write before it in `send_header`, called from
/// `main` when its stack was walked whole, else its calling line alone, as
/// `previous_stack_missing` says. True when the write before was whole.
pub fn assert_both_writes_named(found: &Value) -> bool {
    let (held, held_call) = held_lines();
    let (first, first_call) = first_lines();
    // The frameless write() wrapper's caller, which the frame-pointer walk skips, is there,
    // and the frames go on to its caller.
    let at = frame_at(&found["stack"], "send_body", held);
    assert!(frame_at(&found["stack"], "main", held_call) > at, "{found}");
    assert_eq!(found["stack_missing"], Value::Null, "{found}");
    frame_at(&found["previous_stack"], "send_header", first);
    match found["previous_stack_missing"].as_str() {
        None => {
            let before = frame_at(&found["previous_stack"], "send_header", first);
            assert!(
                frame_at(&found["previous_stack"], "main", first_call) > before,
                "{found}"
            );
            true
        }
        Some(why) => {
            assert!(why.contains("only the line that wrote"), "{found}");
            false
        }
    }
}
