//! `redis://` and `rediss://` targets in RESP (the redis serialization protocol): on each
//! connection `AUTH` and `SELECT` when the URL asks for them, one `SET` of `--size` bytes,
//! then `GET`s of it, each command written in one call and its reply awaited, as redis
//! clients (redis-py, hiredis) do.

use super::reply::{excerpt, line_end, quoted, sized_body, Parsed, ReplyError};

/// The key the probe sets and reads.
pub const KEY: &str = "tcpstall:probe";

/// A command the probe sends, and where to, for the words of the server's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The command.
    pub command: Command,
    /// `redis` or `rediss`.
    pub scheme: &'static str,
    /// `HOST:PORT` of the server.
    pub authority: String,
}

/// The commands of the probe's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `AUTH [user] password`; `user` when an ACL user is named.
    Auth {
        /// An ACL user name is sent.
        user: bool,
    },
    /// `SELECT db`.
    Select(u32),
    /// `SET KEY value`.
    Set,
    /// `GET KEY`.
    Get,
}

impl Command {
    fn name(self) -> String {
        match self {
            Command::Auth { .. } => "AUTH".to_string(),
            Command::Select(db) => format!("SELECT {db}"),
            Command::Set => "SET".to_string(),
            Command::Get => "GET".to_string(),
        }
    }
}

/// `AUTH password`, or `AUTH user password` (redis 6 ACL users) when `user` is not empty.
pub fn auth_command(user: &[u8], password: &[u8]) -> Vec<u8> {
    if user.is_empty() {
        command(&[b"AUTH", password])
    } else {
        command(&[b"AUTH", user, password])
    }
}

/// `SELECT db`.
pub fn select_command(db: u32) -> Vec<u8> {
    command(&[b"SELECT", db.to_string().as_bytes()])
}

/// `SET KEY value` as a RESP array of bulk strings.
pub fn set_command(value: &[u8]) -> Vec<u8> {
    command(&[b"SET", KEY.as_bytes(), value])
}

/// `GET KEY`.
pub fn get_command() -> Vec<u8> {
    command(&[b"GET", KEY.as_bytes()])
}

fn command(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// `+OK`, or the server's error.
pub fn parse_ok(buf: &[u8], step: &Step) -> Result<Parsed, ReplyError> {
    let Some(end) = line_end(buf) else {
        return Ok(Parsed::Incomplete);
    };
    match buf.first() {
        Some(b'+') => Ok(Parsed::Complete {
            len: end,
            close: false,
        }),
        Some(b'-') => Err(refusal(step, &buf[1..end - 2])),
        _ => Err(not_resp(step, buf)),
    }
}

/// A bulk string `$N\r\n…\r\n`; a nil (`$-1`) or an error is an error.
pub fn parse_bulk(buf: &[u8], step: &Step) -> Result<Parsed, ReplyError> {
    let Some(end) = line_end(buf) else {
        return Ok(Parsed::Incomplete);
    };
    match buf.first() {
        Some(b'$') => {}
        Some(b'-') => return Err(refusal(step, &buf[1..end - 2])),
        _ => return Err(not_resp(step, buf)),
    }
    let size: i64 = std::str::from_utf8(&buf[1..end - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad RESP bulk length: {}", excerpt(&buf[..end])))?;
    let size = usize::try_from(size)
        .map_err(|_| format!("redis has no value under {KEY} (nil reply): was it evicted?"))?;
    Ok(sized_body(
        buf,
        end,
        size,
        b"\r\n",
        "RESP bulk string",
        "CRLF",
    )?)
}

fn not_resp(step: &Step, buf: &[u8]) -> ReplyError {
    ReplyError::Malformed(format!(
        "not a RESP reply to {}: {}",
        step.command.name(),
        excerpt(buf)
    ))
}

/// The server's error reply (`-CODE words`) in words: what it means for the URL.
fn refusal(step: &Step, line: &[u8]) -> ReplyError {
    let Step {
        command,
        scheme,
        authority: at,
    } = step;
    let said = quoted(line);
    let code = line.split(|&b| b == b' ').next().unwrap_or_default();
    let text = String::from_utf8_lossy(line).to_ascii_lowercase();
    let why = match (command, code) {
        // Every command but AUTH is refused so while a password is set and none was given.
        (_, b"NOAUTH") => format!(
            "redis at {at} needs a password (it answered {said}): write \
             {scheme}://:PASSWORD@{at}, or {scheme}://USER:PASSWORD@{at} for an ACL user \
             (redis 6+), or give the password in {} instead of the command line",
            super::target::PASSWORD_ENV
        ),
        // redis 6+ says WRONGPASS; before, -ERR invalid password.
        (Command::Auth { .. }, b"WRONGPASS") => refused_credentials(at, &said),
        (Command::Auth { .. }, _) if text.contains("invalid password") => {
            refused_credentials(at, &said)
        }
        (Command::Auth { .. }, _) if text.contains("without any password configured") => {
            format!(
                "redis at {at} has no password set, and the URL gives one (it answered \
                 {said}): drop it, {scheme}://{at}"
            )
        }
        // A redis before 6 knows no ACL users: AUTH takes one argument.
        (Command::Auth { user: true }, _) if text.contains("wrong number of arguments") => {
            format!(
                "redis at {at} takes no user name (it answered {said}: a redis before 6 has no \
                 ACL users): write {scheme}://:PASSWORD@{at}"
            )
        }
        (Command::Select(db), _) => {
            let hint = if text.contains("out of range") {
                ": the server has fewer databases (its `databases` setting, 16 by default: 0-15)"
            } else {
                ""
            };
            format!(
                "redis at {at} refused SELECT {db}, the database /{db} of the URL (it answered \
                 {said}){hint}"
            )
        }
        (_, b"NOPERM") => format!(
            "redis at {at} does not let the URL's user run {} (it answered {said}): grant it, \
             e.g. ACL SETUSER USER +set +get ~{KEY}",
            command.name()
        ),
        _ => format!(
            "redis at {at} refused the {} (it answered {said})",
            command.name()
        ),
    };
    ReplyError::Refused(why)
}

fn refused_credentials(at: &str, said: &str) -> String {
    format!(
        "redis at {at} refused the credentials of the URL (it answered {said}): check the user \
         and password (in the URL, write @ : / % in them as %40 %3A %2F %25)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(command: Command) -> Step {
        Step {
            command,
            scheme: "redis",
            authority: "127.0.0.1:6390".to_string(),
        }
    }

    fn refused(buf: &[u8], command: Command) -> String {
        match parse_ok(buf, &step(command)) {
            Err(ReplyError::Refused(why)) => why,
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn commands_and_replies() {
        assert_eq!(
            get_command(),
            b"*2\r\n$3\r\nGET\r\n$14\r\ntcpstall:probe\r\n"
        );
        assert_eq!(
            auth_command(b"", b"pw"),
            b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"
        );
        assert_eq!(
            auth_command(b"al", b"pw"),
            b"*3\r\n$4\r\nAUTH\r\n$2\r\nal\r\n$2\r\npw\r\n"
        );
        assert_eq!(select_command(3), b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n");
        let get = step(Command::Get);
        assert_eq!(
            parse_ok(b"+OK\r\n", &step(Command::Set)),
            Ok(Parsed::Complete {
                len: 5,
                close: false
            })
        );
        assert!(refused(b"-ERR oom\r\n", Command::Set).contains("\"ERR oom\""));
        assert_eq!(parse_bulk(b"$3\r\nab", &get), Ok(Parsed::Incomplete));
        assert_eq!(
            parse_bulk(b"$3\r\nabc\r\n", &get),
            Ok(Parsed::Complete {
                len: 9,
                close: false
            })
        );
        assert!(
            matches!(parse_bulk(b"$-1\r\n", &get), Err(ReplyError::Malformed(w)) if w.contains("nil"))
        );
        assert!(parse_bulk(b"$3\r\nabcXY", &get).is_err());
        assert!(matches!(
            parse_bulk(b"HTTP/1.1 200\r\n", &get),
            Err(ReplyError::Malformed(_))
        ));
    }

    #[test]
    fn refusals_say_what_to_do() {
        let noauth = refused(b"-NOAUTH Authentication required.\r\n", Command::Set);
        assert!(noauth.contains("needs a password"), "{noauth}");
        assert!(
            noauth.contains("redis://:PASSWORD@127.0.0.1:6390"),
            "{noauth}"
        );
        let auth = Command::Auth { user: true };
        for line in [
            &b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"[..],
            b"-ERR invalid password\r\n",
        ] {
            assert!(refused(line, auth).contains("refused the credentials"));
        }
        assert!(refused(
            b"-ERR wrong number of arguments for 'auth' command\r\n",
            auth
        )
        .contains("no user name"));
        let select = refused(b"-ERR DB index is out of range\r\n", Command::Select(99));
        assert!(
            select.contains("SELECT 99") && select.contains("fewer databases"),
            "{select}"
        );
        assert!(refused(b"-NOPERM no\r\n", Command::Set).contains("ACL SETUSER"));
    }
}
