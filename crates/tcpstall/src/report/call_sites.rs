//! The call stacks of a held write and of the write before it (`watch --kernel`, `trace`), as
//! text lines fitted to the terminal and as the JSON keys `stack`, `previous_stack`,
//! `stack_missing` and `previous_stack_missing`.

use std::path::Path;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::report::model::watch::{CallSites, CallStack, Frame};

/// One frame in a few words: `function (file:line)`, else `function (module+0xoff)`, else
/// `module+0xoff`, else the address.
fn frame_text(frame: &Frame) -> String {
    let module = frame.module.as_deref().map(file_name);
    let place = match (&frame.file, frame.line, module) {
        (Some(file), Some(line), _) => format!("{}:{line}", file_name(file)),
        (_, _, Some(module)) => format!("{module}+{:#x}", frame.offset),
        _ => format!("{:#x}", frame.offset),
    };
    match &frame.function {
        Some(function) => format!("{function} ({place})"),
        None => place,
    }
}

fn file_name(path: &str) -> &str {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path)
}

/// `  LABEL: f (file:line) <- caller ...`, in `width` columns: from the first frame outside
/// the innermost frame's module (the C library's syscall wrapper says nothing of the program)
/// when there is one, as many callers as fit, `<- …` for the rest.
fn stack_line(label: &str, stack: &CallStack, width: usize) -> String {
    let wrapper = stack.frames.first().map(|f| &f.module);
    let first = stack
        .frames
        .iter()
        .position(|f| Some(&f.module) != wrapper)
        .unwrap_or(0);
    let mut line = format!("  {label}:");
    let frames = &stack.frames[first..];
    if frames.is_empty() {
        line.push_str(" no frames");
    }
    for (i, frame) in frames.iter().enumerate() {
        let text = frame_text(frame);
        let sep = if i == 0 { " " } else { " <- " };
        let more = if i + 1 < frames.len() { " <- …" } else { "" };
        let fits =
            line.chars().count() + sep.len() + text.chars().count() + more.chars().count() <= width;
        if i > 0 && !fits {
            line.push_str(" <- …");
            break;
        }
        line.push_str(sep);
        line.push_str(&text);
    }
    line.push('\n');
    line
}

/// Why there is no stack of the write before a held one: the kernel keeps each socket's last
/// small write (`last_send` in `bpf/user_stack.h`) from the moment tcpstall starts.
pub const PREVIOUS_NOT_SEEN: &str = "not seen: the write before it was made before tcpstall \
                                     started following, or its socket's entry was pushed out of \
                                     the kernel's table (16 384 sockets) by newer writes";

/// The text lines: where the held write was made (`at:`), the write before it (`after:`), and
/// what the stacks lack (`stack:`), each within `width` columns but the last, which is prose.
pub fn text(sites: &CallSites, width: usize) -> String {
    let line = |label: &str, stack: &CallStack| match (&stack.missing, stack.frames.is_empty()) {
        (Some(why), true) => format!("  {label}: {why}\n"),
        _ => stack_line(label, stack, width),
    };
    let mut out = line("at", &sites.held);
    match &sites.previous {
        Some(previous) => out.push_str(&line("after", previous)),
        None => out.push_str(&format!("  after: {PREVIOUS_NOT_SEEN}\n")),
    }
    // What a stack with frames lacks; an empty one said why on its own line.
    let missing: Vec<&str> = [Some(&sites.held), sites.previous.as_ref()]
        .into_iter()
        .flatten()
        .filter(|s| !s.frames.is_empty())
        .filter_map(|s| s.missing.as_deref())
        .collect();
    if let Some(first) = missing.first() {
        out.push_str(&format!("  stack: {first}\n"));
    }
    out
}

/// The JSON keys of `sites`, to add to the event's object: a stack without frames is null,
/// its `*_missing` saying why.
pub fn json_keys(sites: &CallSites) -> Map<String, Value> {
    let frames = |s: &CallStack| match s.frames.is_empty() {
        true => Value::Null,
        false => serde_json::to_value(&s.frames).unwrap_or(Value::Null),
    };
    let missing = |s: &CallStack| s.missing.clone().map_or(Value::Null, Value::String);
    let mut keys = Map::new();
    keys.insert("stack".into(), frames(&sites.held));
    keys.insert(
        "previous_stack".into(),
        sites.previous.as_ref().map_or(Value::Null, frames),
    );
    keys.insert("stack_missing".into(), missing(&sites.held));
    keys.insert(
        "previous_stack_missing".into(),
        sites
            .previous
            .as_ref()
            .map_or_else(|| Value::String(PREVIOUS_NOT_SEEN.into()), missing),
    );
    keys
}

/// The same keys as [`json_keys`], for a report that serializes `sites` within its own object
/// (`#[serde(flatten)]`: `trace --json`'s example).
impl Serialize for CallSites {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let keys = json_keys(self);
        let mut map = serializer.serialize_map(Some(keys.len()))?;
        for (key, value) in &keys {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Adds `sites` to a rendered event in `buf` (without its final newline): the JSON keys
/// inside its object, or the text lines after its block.
pub fn add(buf: &mut Vec<u8>, json: bool, sites: &CallSites) {
    if json {
        if buf.last() == Some(&b'}') {
            buf.pop();
            for (key, value) in json_keys(sites) {
                buf.push(b',');
                // Strings and arrays of plain values: serialization cannot fail.
                let _ = serde_json::to_writer(&mut *buf, &key);
                buf.push(b':');
                let _ = serde_json::to_writer(&mut *buf, &value);
            }
            buf.push(b'}');
        }
    } else {
        let width = super::terminal_width();
        buf.extend_from_slice(text(sites, width).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: Option<(&str, u32)>, module: &str) -> Frame {
        Frame {
            function: Some(function.into()),
            file: file.map(|(f, _)| format!("/src/{f}")),
            line: file.map(|(_, l)| l),
            module: Some(module.into()),
            offset: 0x11a9,
        }
    }

    fn sites() -> CallSites {
        CallSites {
            held: CallStack {
                frames: vec![
                    frame("write", Some(("write.c", 26)), "/usr/lib/libc.so.6"),
                    frame("send_body", Some(("client.c", 14)), "/tmp/client"),
                    frame("main", Some(("client.c", 40)), "/tmp/client"),
                    frame("__libc_start_call_main", None, "/usr/lib/libc.so.6"),
                ],
                missing: None,
            },
            previous: None,
        }
    }

    #[test]
    fn the_text_starts_at_the_program_and_fits_the_width() {
        let text = text(&sites(), 100);
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some(
                "  at: send_body (client.c:14) <- main (client.c:40) <- __libc_start_call_main \
                 (libc.so.6+0x11a9)"
            )
        );
        assert!(lines
            .next()
            .is_some_and(|l| l.starts_with("  after: not seen: the write before it")));
        let narrow = super::text(&sites(), 60);
        let at = narrow.lines().next().expect("a line");
        assert_eq!(
            at,
            "  at: send_body (client.c:14) <- main (client.c:40) <- …"
        );
    }

    #[test]
    fn the_json_keys_are_added_inside_the_object() {
        let mut buf = br#"{"kind":"nagle_delayed_ack"}"#.to_vec();
        add(&mut buf, true, &sites());
        let v: Value = serde_json::from_slice(&buf).expect("JSON");
        assert_eq!(v["kind"], "nagle_delayed_ack");
        assert_eq!(v["stack"][1]["function"], "send_body");
        assert_eq!(v["stack"][1]["line"], 14);
        assert_eq!(v["stack"][1]["file"], "/src/client.c");
        assert_eq!(v["stack"][0]["function"], "write");
        assert_eq!(v["stack"][0]["offset"], 0x11a9);
        assert_eq!(v["previous_stack"], Value::Null);
        assert_eq!(v["previous_stack_missing"], PREVIOUS_NOT_SEEN);
        assert_eq!(v["stack_missing"], Value::Null);
    }

    #[test]
    fn a_stack_without_frames_says_why_in_its_place() {
        let why = "none taken: the kernel saw no hold at this write";
        let none = CallSites {
            held: CallStack {
                frames: Vec::new(),
                missing: Some(why.into()),
            },
            previous: Some(sites().held),
        };
        let text = text(&none, 200);
        assert!(text.starts_with(&format!("  at: {why}\n")), "{text}");
        assert!(text.contains("  after: send_body (client.c:14)"), "{text}");
        assert!(!text.contains("  stack:"), "{text}");
        let v = serde_json::to_value(&none).expect("JSON");
        assert_eq!(v["stack"], Value::Null);
        assert_eq!(v["stack_missing"], why);
        assert_eq!(v["previous_stack"][1]["function"], "send_body");
    }
}
