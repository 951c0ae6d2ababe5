//! One builder for every classic BPF program tcpstall writes (`Documentation/networking/
//! filter.rst`): the compiled filter expressions (codegen.rs), the live capture's port filter
//! (capture/bpf.rs) and the prologue that drops `lo`'s outgoing copies. Jumps go to labels,
//! resolved once the program is laid out; every jump goes forward. A conditional jump's
//! offsets are 8 bits, `ja`'s 32: [`Program::jump_if`] pairs them for any distance.

/// A place in the program a jump goes to.
pub(crate) type Label = usize;

/// A jump not yet resolved: instruction `at` goes to `label` on true (`jt`) or false (`jf`),
/// or always (`ja`).
#[derive(Debug, Clone, Copy)]
enum Patch {
    Conditional {
        at: usize,
        on_true: Label,
        on_false: Label,
    },
    Always {
        at: usize,
        to: Label,
    },
}

/// A program under construction.
#[derive(Debug, Default)]
pub(crate) struct Program {
    code: Vec<libc::sock_filter>,
    labels: Vec<Option<usize>>,
    patches: Vec<Patch>,
}

impl Program {
    /// A new label, placed later with [`Program::place`].
    pub(crate) fn label(&mut self) -> Label {
        self.labels.push(None);
        self.labels.len() - 1
    }

    /// Puts `label` at the next instruction.
    pub(crate) fn place(&mut self, label: Label) {
        self.labels[label] = Some(self.code.len());
    }

    /// An instruction that does not jump.
    pub(crate) fn op(&mut self, code: u32, k: u32) {
        self.raw(code, 0, 0, k);
    }

    /// An instruction with its jump offsets as given (`jt`, `jf`: instructions skipped).
    pub(crate) fn raw(&mut self, code: u32, jt: u8, jf: u8, k: u32) {
        self.code.push(libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        });
    }

    /// `return value`.
    pub(crate) fn ret(&mut self, value: u32) {
        self.op(libc::BPF_RET | libc::BPF_K, value);
    }

    /// A conditional jump to `on_true` or `on_false`, each at most 255 instructions on.
    pub(crate) fn branch(&mut self, code: u32, k: u32, on_true: Label, on_false: Label) {
        let at = self.code.len();
        self.op(code, k);
        self.patches.push(Patch::Conditional {
            at,
            on_true,
            on_false,
        });
    }

    /// `ja label`, any distance.
    pub(crate) fn jump(&mut self, to: Label) {
        let at = self.code.len();
        self.op(libc::BPF_JMP | libc::BPF_JA, 0);
        self.patches.push(Patch::Always { at, to });
    }

    /// `if condition { ja label }`, any distance: the condition skips over nothing when true
    /// and over the `ja` when false.
    pub(crate) fn jump_if(&mut self, code: u32, k: u32, to: Label) {
        self.raw(code, 0, 1, k);
        self.jump(to);
    }

    /// `if A == value { return keep }`.
    pub(crate) fn return_if_equal(&mut self, value: u32, keep: u32) {
        self.raw(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 1, value);
        self.ret(keep);
    }

    /// `if A != value { return keep }`.
    pub(crate) fn return_if_not_equal(&mut self, value: u32, keep: u32) {
        self.raw(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 1, 0, value);
        self.ret(keep);
    }

    /// Appends a whole program whose jumps stay within itself.
    pub(crate) fn append(&mut self, program: &[libc::sock_filter]) {
        self.code.extend_from_slice(program);
    }

    /// Resolves every jump; `None` when a conditional jump is longer than its 8-bit offset.
    pub(crate) fn finish(mut self) -> Option<Vec<libc::sock_filter>> {
        for patch in &self.patches {
            match *patch {
                Patch::Conditional {
                    at,
                    on_true,
                    on_false,
                } => {
                    let distance = |label: Label| {
                        self.labels[label]
                            .and_then(|to| to.checked_sub(at + 1))
                            .and_then(|d| u8::try_from(d).ok())
                    };
                    self.code[at].jt = distance(on_true)?;
                    self.code[at].jf = distance(on_false)?;
                }
                Patch::Always { at, to } => {
                    self.code[at].k = u32::try_from(self.labels[to]?.checked_sub(at + 1)?).ok()?;
                }
            }
        }
        Some(self.code)
    }
}
