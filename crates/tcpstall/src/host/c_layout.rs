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
    let defines: String = source
        .lines()
        .filter(|l| l.starts_with("#define ") && l.split_whitespace().count() == 3)
        .map(|l| format!("{l}\n"))
        .collect();
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
