//! Which runtime a process is, read from what the kernel shows of it, cheaply and without
//! stopping it: the executable (`/proc/PID/exe`: `python3.11`, `java`, `beam.smp`, `node`,
//! `perl`, `ruby3.1`, a Go binary's `.go.buildinfo` section), the libraries mapped
//! (`/proc/PID/maps`: `libpython3.x`, `libjvm.so`, `libruby`, `libperl`, `libcoreclr.so`), its
//! thread names (`/proc/PID/task/*/comm`: the JDK's `HTTP-Dispatcher`), and its command line and
//! the script it names (`-m http.server`, `use HTTP::Daemon`, `require 'webrick'`).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::Runtime;
use crate::host::procfs;
use rustc_hash::FxHashMap;

/// A language runtime tcpstall knows the TCP_NODELAY switch of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Language {
    CPython,
    Jvm,
    Erlang,
    Ruby,
    Perl,
    Node,
    Go,
    DotNet,
}

impl Language {
    /// The runtime's name as its users say it.
    fn name(self) -> &'static str {
        match self {
            Language::CPython => "CPython",
            Language::Jvm => "Java (JVM)",
            Language::Erlang => "Erlang/OTP",
            Language::Ruby => "Ruby",
            Language::Perl => "Perl",
            Language::Node => "Node.js",
            Language::Go => "Go",
            Language::DotNet => ".NET",
        }
    }
}

/// One row of the runtime table: for a runtime, and a framework of it or any, the fix.
struct Remedy {
    language: Language,
    /// The framework this row is for; `None`: the runtime's own sockets, any framework.
    framework: Option<&'static str>,
    /// The option, flag or line to add.
    fix: &'static str,
    /// Where it goes, and why it works there.
    place: &'static str,
}

/// The runtime table: the one place that says how each runtime turns Nagle off. A framework's
/// row comes before its runtime's general one.
const REMEDIES: &[Remedy] = &[
    Remedy {
        language: Language::CPython,
        framework: Some("http.server"),
        fix: "disable_nagle_algorithm = True",
        place: "as a class attribute of the request handler (a socketserver.StreamRequestHandler \
                such as http.server's handlers; subclass it when it is the library's): \
                socketserver then sets TCP_NODELAY on every connection it accepts",
    },
    Remedy {
        language: Language::CPython,
        framework: None,
        fix: "sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)",
        place: "on each accepted socket, before its first write",
    },
    Remedy {
        language: Language::Jvm,
        framework: Some("com.sun.net.httpserver"),
        fix: "-Dsun.net.httpserver.nodelay=true",
        place: "on the java command line before the main class (or in JAVA_TOOL_OPTIONS): the \
                JDK's HttpServer then sets TCP_NODELAY on every connection it accepts",
    },
    Remedy {
        language: Language::Jvm,
        framework: None,
        fix: "socket.setTcpNoDelay(true)",
        place: "on each accepted java.net.Socket (a framework's own option where it has one, \
                e.g. Netty's ChannelOption.TCP_NODELAY)",
    },
    Remedy {
        language: Language::Erlang,
        framework: None,
        fix: "-kernel inet_default_listen_options '[{nodelay,true}]'",
        place: "on the erl command line (or in vm.args): every listening socket of the VM, \
                inets httpd's among them, then accepts connections with nodelay (httpd's \
                documented {socket_type, {ip_comm, [{nodelay, true}]}} stops it at start on OTP 25)",
    },
    Remedy {
        language: Language::Ruby,
        framework: Some("WEBrick"),
        fix: "sock.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)",
        place: "in the server's code, on each accepted socket (WEBrick has no option for it: \
                a WEBrick::HTTPServer subclass whose run(sock) sets it, then calls super)",
    },
    Remedy {
        language: Language::Ruby,
        framework: None,
        fix: "sock.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)",
        place: "in the server's code, on each accepted socket, before its first write",
    },
    Remedy {
        language: Language::Perl,
        framework: Some("HTTP::Daemon"),
        fix: "use Socket qw(IPPROTO_TCP TCP_NODELAY); setsockopt($conn, IPPROTO_TCP, TCP_NODELAY, 1);",
        place: "in the server's code, on each connection $d->accept returns, before its first \
                answer (HTTP::Daemon has no option for it)",
    },
    Remedy {
        language: Language::Perl,
        framework: None,
        fix: "use Socket qw(IPPROTO_TCP TCP_NODELAY); setsockopt($sock, IPPROTO_TCP, TCP_NODELAY, 1);",
        place: "in the server's code, on each accepted socket, before its first write",
    },
    Remedy {
        language: Language::Node,
        framework: None,
        fix: "http.createServer({ noDelay: true }, handler)",
        place: "where the server is created; for net sockets, socket.setNoDelay(true) on each \
                connection",
    },
    Remedy {
        language: Language::Go,
        framework: None,
        fix: "remove SetNoDelay(false)",
        place: "Go sets TCP_NODELAY on every connection by default: a hold there means the \
                program calls (*net.TCPConn).SetNoDelay(false), or a proxy in front of it holds",
    },
    Remedy {
        language: Language::DotNet,
        framework: None,
        fix: "Socket.NoDelay = true",
        place: "on each accepted Socket (TcpClient.NoDelay for a TcpClient)",
    },
];

/// The runtime of `pid`, when it is one in the table; `None` for a native program or when
/// `/proc/PID/exe` cannot be read (another user's process, without root).
pub fn runtime_of(pid: u32) -> Option<Runtime> {
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let (language, version) =
        language_of(&exe, &maps).or_else(|| go_version(pid).map(|v| (Language::Go, Some(v))))?;
    let version = match language {
        Language::Jvm => version.or_else(|| java_version(&exe, &maps)),
        Language::Erlang => otp_version(&exe).or(version),
        _ => version,
    };
    let framework = framework_of(pid, language);
    let remedy = remedy(language, framework)?;
    Some(Runtime {
        name: language.name(),
        version,
        framework,
        fix: remedy.fix,
        place: remedy.place,
    })
}

/// Processes whose runtime a [`RuntimeCache`] keeps at most; past that it starts again.
const CACHED_PROCESSES: usize = 4096;

/// Runtimes already read, by process: its pid and start time (`/proc/PID/stat` field 22), so
/// that a pid reused by another program is read again. A verb naming many sockets or flows of
/// one process reads its executable, maps and threads once.
#[derive(Debug, Default)]
pub struct RuntimeCache {
    known: FxHashMap<(u32, u64), Option<Runtime>>,
}

impl RuntimeCache {
    /// The runtime of `pid` ([`runtime_of`]), read once per process.
    pub fn runtime_of(&mut self, pid: u32) -> Option<Runtime> {
        let started = procfs::stat_field(pid, 22)?;
        if self.known.len() >= CACHED_PROCESSES {
            self.known.clear();
        }
        self.known
            .entry((pid, started))
            .or_insert_with(|| runtime_of(pid))
            .clone()
    }
}

/// The table's row for `language` and `framework`: the framework's own, else the runtime's.
fn remedy(language: Language, framework: Option<&str>) -> Option<&'static Remedy> {
    REMEDIES
        .iter()
        .filter(|r| r.language == language)
        .find(|r| r.framework.is_none() || r.framework == framework)
}

/// The runtime an executable and its mapped libraries name, with the version the names carry.
fn language_of(exe: &Path, maps: &str) -> Option<(Language, Option<String>)> {
    let name = exe.file_name()?.to_str()?.trim_end_matches(" (deleted)");
    let libraries: Vec<&str> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter_map(|path| path.rsplit('/').next())
        .collect();
    let library = |prefix: &str| libraries.iter().copied().find(|l| l.starts_with(prefix));
    // `python3` links to `python3.11`; a shared libpython3.12.so names its minor version too.
    if let Some(lib) = library("libpython") {
        return Some((Language::CPython, dotted(&lib["libpython".len()..])));
    }
    if let Some(rest) = name.strip_prefix("python") {
        return Some((Language::CPython, dotted(rest)));
    }
    if name == "java" || library("libjvm.so").is_some() {
        return Some((Language::Jvm, None));
    }
    if name == "beam.smp" || name == "beam" {
        // The emulator sits in …/erts-13.1.5/bin/: its ERTS version.
        let erts = exe
            .iter()
            .filter_map(|c| c.to_str()?.strip_prefix("erts-"))
            .next()
            .map(|v| format!("erts {v}"));
        return Some((Language::Erlang, erts));
    }
    if let Some(rest) = name.strip_prefix("ruby") {
        let from_lib = library("libruby-").map(|l| &l["libruby-".len()..]);
        return Some((
            Language::Ruby,
            dotted(rest).or_else(|| from_lib.and_then(dotted)),
        ));
    }
    if let Some(lib) = library("libruby") {
        return Some((Language::Ruby, dotted(lib.trim_start_matches("libruby-"))));
    }
    if name.starts_with("perl") || library("libperl").is_some() {
        // Debian's perl maps its modules from …/perl/5.36/ or …/perl5/5.36/.
        let version = maps
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find_map(|path| {
                let (_, rest) = path.split_once("/perl5/").or(path.split_once("/perl/"))?;
                dotted(rest.split('/').next()?)
            })
            .or_else(|| library("libperl.so.").and_then(|l| dotted(&l["libperl.so.".len()..])));
        return Some((Language::Perl, version));
    }
    if name == "node" || name == "nodejs" {
        return Some((Language::Node, None));
    }
    if library("libcoreclr.so").is_some() {
        // …/shared/Microsoft.NETCore.App/8.0.4/libcoreclr.so
        let version = maps
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find_map(|path| {
                let rest = path.split_once("/Microsoft.NETCore.App/")?.1;
                Some(rest.split('/').next()?.to_string())
            });
        return Some((Language::DotNet, version));
    }
    None
}

/// `3.11` from `3.11`, `3.11.so.1.0` or `5.36`: the leading digits and dots, when they are a
/// version (a digit first).
fn dotted(text: &str) -> Option<String> {
    let text = text.trim_start_matches('-');
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let version = text[..end].trim_end_matches('.');
    let version = version.strip_suffix(".so").unwrap_or(version);
    (version.starts_with(|c: char| c.is_ascii_digit())).then(|| version.to_string())
}

/// The JDK's version from its `release` file (`JAVA_VERSION="17.0.15"`), beside `bin/java` or
/// above `lib/server/libjvm.so`.
fn java_version(exe: &Path, maps: &str) -> Option<String> {
    let from_exe = exe.parent()?.parent().map(Path::to_path_buf);
    let from_lib = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.ends_with("/libjvm.so"))
        .and_then(|path| Path::new(path).ancestors().nth(3).map(Path::to_path_buf));
    [from_exe, from_lib]
        .into_iter()
        .flatten()
        .find_map(|home: PathBuf| {
            let release = fs::read_to_string(home.join("release")).ok()?;
            release.lines().find_map(|line| {
                let value = line.strip_prefix("JAVA_VERSION=")?;
                Some(value.trim_matches('"').to_string())
            })
        })
}

/// The OTP release from `releases/*/OTP_VERSION` under the Erlang root that holds
/// `erts-V/bin/beam.smp` (`25.2.3`).
fn otp_version(exe: &Path) -> Option<String> {
    let releases = exe.ancestors().nth(3)?.join("releases");
    fs::read_dir(releases).ok()?.flatten().find_map(|release| {
        let text = fs::read_to_string(release.path().join("OTP_VERSION")).ok()?;
        Some(text.trim().to_string())
    })
}

/// A Go program's version from its build information (`runtime/debug.BuildInfo`, the
/// `.go.buildinfo` section: a 16-byte header `\xff Go buildinf:`, pointer size and flags, then,
/// with flag 2 (Go 1.18 and later), the version as a varint-prefixed string at offset 32).
fn go_version(pid: u32) -> Option<String> {
    use object::{Object, ObjectSection};
    let file = fs::File::open(format!("/proc/{pid}/exe")).ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let data = elf.section_by_name(".go.buildinfo")?.data().ok()?;
    if !data.starts_with(b"\xff Go buildinf:") {
        return None;
    }
    let flags = *data.get(15)?;
    if flags & 2 == 0 {
        return Some("(before 1.18)".to_string());
    }
    let mut length = 0usize;
    let mut at = 32;
    for shift in (0..35).step_by(7) {
        let byte = *data.get(at)?;
        at += 1;
        length |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
    }
    let version = std::str::from_utf8(data.get(at..at + length)?).ok()?;
    Some(version.trim_start_matches("go").to_string())
}

/// Bytes of a script read to find the framework it uses.
const SCRIPT_READ: u64 = 256 * 1024;

/// The framework of a `language` process, where its threads, command line or script say it.
fn framework_of(pid: u32, language: Language) -> Option<&'static str> {
    match language {
        Language::Jvm => {
            // com.sun.net.httpserver's ServerImpl names its dispatcher thread so.
            let named = procfs::thread_ids(pid).ok()?.into_iter().any(|tid| {
                fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                    .is_ok_and(|comm| comm.trim_end() == "HTTP-Dispatcher")
            });
            named.then_some("com.sun.net.httpserver")
        }
        Language::CPython => {
            let text = program_text(pid);
            (text.contains("http.server") || text.contains("socketserver")).then_some("http.server")
        }
        Language::Perl => program_text(pid)
            .contains("HTTP::Daemon")
            .then_some("HTTP::Daemon"),
        Language::Ruby => program_text(pid)
            .to_ascii_lowercase()
            .contains("webrick")
            .then_some("WEBrick"),
        Language::Erlang => program_text(pid).contains("inets").then_some("inets"),
        Language::Node | Language::Go | Language::DotNet => None,
    }
}

/// The command line of `pid` and the start of each file it names (the script, relative to the
/// process's working directory), joined: where a script says which framework it imports.
fn program_text(pid: u32) -> String {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return String::new();
    };
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .skip(1)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut text = args.join(" ");
    let cwd = PathBuf::from(format!("/proc/{pid}/cwd"));
    for arg in args.iter().filter(|a| !a.starts_with('-')) {
        let path = cwd.join(arg);
        if !path.is_file() {
            continue;
        }
        if let Ok(file) = fs::File::open(&path) {
            let mut script = Vec::new();
            let _ = file.take(SCRIPT_READ).read_to_end(&mut script);
            text.push('\n');
            text.push_str(&String::from_utf8_lossy(&script));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_runtime_has_a_general_remedy_after_its_frameworks() {
        for language in [
            Language::CPython,
            Language::Jvm,
            Language::Erlang,
            Language::Ruby,
            Language::Perl,
            Language::Node,
            Language::Go,
            Language::DotNet,
        ] {
            let rows: Vec<&Remedy> = REMEDIES.iter().filter(|r| r.language == language).collect();
            assert!(
                rows.last().is_some_and(|r| r.framework.is_none()),
                "{} needs a general row, last",
                language.name()
            );
        }
    }

    #[test]
    fn names_and_versions_from_the_executable_and_libraries() {
        let cases = [
            ("/usr/bin/python3.11", "", Language::CPython, Some("3.11")),
            (
                "/opt/bin/python3",
                "7f00-7f80 r-xp 0 08:01 1 /opt/lib/libpython3.12.so.1.0",
                Language::CPython,
                Some("3.12"),
            ),
            (
                "/usr/lib/erlang/erts-13.1.5/bin/beam.smp",
                "",
                Language::Erlang,
                Some("erts 13.1.5"),
            ),
            ("/usr/bin/ruby3.1", "", Language::Ruby, Some("3.1")),
            (
                "/usr/bin/perl",
                "7f00-7f80 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/perl/5.36/auto/Socket/Socket.so",
                Language::Perl,
                Some("5.36"),
            ),
            ("/usr/bin/node", "", Language::Node, None),
            (
                "/srv/app/api",
                "7f00-7f80 r-xp 0 08:01 1 /usr/share/dotnet/shared/Microsoft.NETCore.App/8.0.4/libcoreclr.so",
                Language::DotNet,
                Some("8.0.4"),
            ),
        ];
        for (exe, maps, language, version) in cases {
            let found = language_of(Path::new(exe), maps);
            assert_eq!(
                found,
                Some((language, version.map(str::to_string))),
                "{exe} {maps}"
            );
        }
        assert_eq!(language_of(Path::new("/usr/sbin/nginx"), ""), None);
    }

    #[test]
    fn this_test_binary_is_no_runtime_and_a_missing_process_none() {
        assert_eq!(runtime_of(std::process::id()), None);
        assert_eq!(runtime_of(u32::MAX), None);
    }

    #[test]
    fn a_framework_row_wins_over_its_runtime_row() {
        let framework = remedy(Language::Jvm, Some("com.sun.net.httpserver"));
        assert_eq!(
            framework.map(|r| r.fix),
            Some("-Dsun.net.httpserver.nodelay=true")
        );
        let general = remedy(Language::Jvm, None);
        assert_eq!(general.map(|r| r.fix), Some("socket.setTcpNoDelay(true)"));
        let runtime = Runtime {
            name: Language::Jvm.name(),
            version: Some("17.0.15".into()),
            framework: Some("com.sun.net.httpserver"),
            fix: "-Dsun.net.httpserver.nodelay=true",
            place: "on the java command line",
        };
        assert_eq!(
            runtime.advice(),
            "for good, in the program (Java (JVM) 17.0.15, com.sun.net.httpserver): \
             -Dsun.net.httpserver.nodelay=true; on the java command line"
        );
    }
}
