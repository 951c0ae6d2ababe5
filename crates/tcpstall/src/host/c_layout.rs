//! The layout of a record struct of the BPF programs (`bpf/*.bpf.c`) as the C compiler lays it
//! out: the source's struct and its `#define`s compiled with the host's `cc`, each field's
//! `offsetof` printed. The record parsers' tests check their offsets against it, so a field
//! added or moved in the C struct fails a test instead of being read from the wrong bytes.
//! The host compiler and clang's BPF target lay out these fixed-width fields alike (natural
//! alignment, no bit-fields). Used by tests only.

use std::path::Path;
use std::process::Command;

/// The text of `struct NAME { ... };` in `source`.
fn struct_text<'a>(source: &'a str, name: &str) -> Option<&'a str> {
    let start = source.find(&format!("\nstruct {name} {{\n"))? + 1;
    let end = start + source[start..].find("\n};")? + 3;
    Some(&source[start..end])
}

/// Appends to `out` the text of each struct that a field of `body` is (`\tstruct NAME field`),
/// the structs it holds first, as found in `sources`; `used` gets the sources they came from.
fn held_structs(body: &str, sources: &[String], out: &mut String, used: &mut Vec<usize>) {
    for line in body.lines() {
        // Fields are indented; the struct's own first line is not.
        let field = line.starts_with(char::is_whitespace);
        let Some(rest) = line.trim_start().strip_prefix("struct ").filter(|_| field) else {
            continue;
        };
        let Some(inner) = rest.split_whitespace().next() else {
            continue;
        };
        let found = sources
            .iter()
            .enumerate()
            .find_map(|(i, s)| struct_text(s, inner).map(|t| (i, t)));
        if let Some((i, text)) = found {
            if out.contains(&format!("struct {inner} {{")) {
                continue;
            }
            held_structs(text, sources, out, used);
            out.push_str(text);
            out.push('\n');
            used.push(i);
        }
    }
}

/// Checks `parser`'s (field, offset) pairs and its record length against `struct NAME` of
/// `bpf/FILE` in the repository: every field the parser reads is where the C struct has it,
/// and the record is the struct's size. Panics with what differs otherwise.
pub fn assert_layout(file: &str, name: &str, record_len: usize, parser: &[(&str, usize)]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bpf")
        .join(file);
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let body = struct_text(&source, name)
        .unwrap_or_else(|| panic!("no `struct {name} {{` in {}", path.display()));
    // The structs it holds, from the same file or a header of bpf/, before it.
    let mut sources = vec![source.clone()];
    if let Ok(dir) = std::fs::read_dir(path.with_file_name("")) {
        let mut headers: Vec<_> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "h"))
            .collect();
        headers.sort();
        sources.extend(
            headers
                .iter()
                .filter_map(|h| std::fs::read_to_string(h).ok()),
        );
    }
    let mut held = String::new();
    let mut used = Vec::new();
    held_structs(body, &sources, &mut held, &mut used);
    let defines: String = used
        .iter()
        .map(|i| sources[*i].as_str())
        .chain([source.as_str()])
        .flat_map(str::lines)
        .filter(|l| l.starts_with("#define ") && l.split_whitespace().count() == 3)
        .map(|l| format!("{l}\n"))
        .collect();
    let body = format!("{held}{body}");
    let prints: String = parser
        .iter()
        .map(|(field, _)| {
            format!("printf(\"{field} %zu\\n\", offsetof(struct {name}, {field}));\n")
        })
        .collect();
    let program = format!(
        "#include <linux/types.h>\n#include <stddef.h>\n#include <stdio.h>\n{defines}{body}\n\
         int main(void) {{\nprintf(\"sizeof %zu\\n\", sizeof(struct {name}));\n{prints}return 0;\n}}\n"
    );
    let dir = std::env::temp_dir().join(format!("tcpstall-c-layout-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let (c, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&c, program).expect("write the layout program");
    let built = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .expect("cc runs (build-essential: scripts/install-deps)");
    assert!(
        built.status.success(),
        "cc failed on struct {name}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe)
        .output()
        .expect("the layout program runs");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let offset = |field: &str| -> Option<usize> {
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(' ')?.parse().ok())
    };
    assert_eq!(
        offset("sizeof"),
        Some(record_len),
        "struct {name} ({file}): the record's length against the C struct"
    );
    for (field, at) in parser {
        assert_eq!(
            offset(field),
            Some(*at),
            "struct {name}.{field} ({file}): the parser reads it at {at}, the C struct has it \
             elsewhere:\n{text}"
        );
    }
}
