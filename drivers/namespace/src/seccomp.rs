//! The seccomp program bwrap loads into every box (`--seccomp 3`): a
//! classic-BPF filter that refuses, with EPERM, every system call that
//! could give a file in the shared workspace a setuid or setgid bit, and
//! every way into the one process of the box it does not cover (bwrap's
//! own init, pid 1, which bwrap leaves unfiltered). Written out by hand
//! because it is a few dozen instructions; `tests` runs it through a BPF
//! interpreter call by call. ADR 0015 says why each rule is there.

/// `struct seccomp_data` offsets: the call number, the audit architecture,
/// then six 64-bit arguments (little-endian: the low word comes first).
const NR: u32 = 0;
const ARCH: u32 = 4;
fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

const ALLOW: u32 = 0x7fff_0000;
const ERRNO: u32 = 0x0005_0000;
const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// S_ISUID | S_ISGID.
const PRIVILEGED_MODE: u32 = 0o6000;
/// O_CREAT | __O_TMPFILE: the open flags under which the mode is used.
const CREATING: u32 = 0o100 | 0o20000000;
/// x32 calls on x86_64 carry this bit; the filter refuses them all.
const X32_BIT: u32 = 0x4000_0000;

/// The machines a filter can be built for, as `uname -m` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub fn from_uname(machine: &str) -> Option<Arch> {
        match machine {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" | "arm64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    fn audit(self) -> u32 {
        match self {
            Arch::X86_64 => 0xc000_003e,
            Arch::Aarch64 => 0xc000_00b7,
        }
    }
}

/// What the filter does with one system call.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// EPERM when argument `arg` (a mode) has S_ISUID or S_ISGID.
    Mode { arg: u32 },
    /// EPERM when argument `flags` creates a file and argument `mode` has them.
    CreateMode { flags: u32, mode: u32 },
    /// EPERM when argument `arg` (a pid) names bwrap's init, pid 1.
    NotInit { arg: u32 },
    /// Always this errno.
    Refuse { errno: u32 },
}

/// (call number, rule) for `arch`.
fn rules(arch: Arch) -> Vec<(u32, Rule)> {
    use Rule::*;
    // The calls both architectures number alike (the generic table).
    let common = [
        (452, Mode { arg: 2 }),          // fchmodat2
        (437, Refuse { errno: ENOSYS }), // openat2: its mode is in a struct; libcs fall back to openat
        (425, Refuse { errno: ENOSYS }), // io_uring_setup: its openat op bypasses this filter
        (426, Refuse { errno: ENOSYS }), // io_uring_enter
        (427, Refuse { errno: ENOSYS }), // io_uring_register
        (434, NotInit { arg: 0 }),       // pidfd_open
    ];
    let own: Vec<(u32, Rule)> = match arch {
        Arch::X86_64 => vec![
            (90, Mode { arg: 1 }),                   // chmod
            (91, Mode { arg: 1 }),                   // fchmod
            (268, Mode { arg: 2 }),                  // fchmodat
            (85, Mode { arg: 1 }),                   // creat
            (2, CreateMode { flags: 1, mode: 2 }),   // open
            (257, CreateMode { flags: 2, mode: 3 }), // openat
            (83, Mode { arg: 1 }),                   // mkdir
            (258, Mode { arg: 2 }),                  // mkdirat
            (133, Mode { arg: 1 }),                  // mknod
            (259, Mode { arg: 2 }),                  // mknodat
            (101, NotInit { arg: 1 }),               // ptrace
            (310, NotInit { arg: 0 }),               // process_vm_readv
            (311, NotInit { arg: 0 }),               // process_vm_writev
        ],
        Arch::Aarch64 => vec![
            (52, Mode { arg: 1 }),                  // fchmod
            (53, Mode { arg: 2 }),                  // fchmodat
            (56, CreateMode { flags: 2, mode: 3 }), // openat
            (34, Mode { arg: 2 }),                  // mkdirat
            (33, Mode { arg: 2 }),                  // mknodat
            (117, NotInit { arg: 1 }),              // ptrace
            (270, NotInit { arg: 0 }),              // process_vm_readv
            (271, NotInit { arg: 0 }),              // process_vm_writev
        ],
    };
    own.into_iter().chain(common).collect()
}

/// One `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

fn stmt(code: u16, k: u32) -> Insn {
    Insn { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// The instructions of a rule's block, each block ending in its own returns.
fn block(rule: Rule) -> Vec<Insn> {
    match rule {
        Rule::Mode { arg } => vec![
            stmt(LD_W_ABS, arg_low(arg)),
            jump(JSET_K, PRIVILEGED_MODE, 0, 1),
            stmt(RET_K, ERRNO | EPERM),
            stmt(RET_K, ALLOW),
        ],
        Rule::CreateMode { flags, mode } => vec![
            stmt(LD_W_ABS, arg_low(flags)),
            jump(JSET_K, CREATING, 0, 3),
            stmt(LD_W_ABS, arg_low(mode)),
            jump(JSET_K, PRIVILEGED_MODE, 0, 1),
            stmt(RET_K, ERRNO | EPERM),
            stmt(RET_K, ALLOW),
        ],
        // The kernel reads a pid as a 32-bit pid_t, whatever the register holds.
        Rule::NotInit { arg } => {
            vec![stmt(LD_W_ABS, arg_low(arg)), jump(JEQ_K, 1, 0, 1), stmt(RET_K, ERRNO | EPERM), stmt(RET_K, ALLOW)]
        }
        Rule::Refuse { errno } => vec![stmt(RET_K, ERRNO | errno)],
    }
}

fn program(arch: Arch) -> Vec<Insn> {
    let rules = rules(arch);
    // Another architecture's calls (i386 through int 0x80 on x86_64) have
    // other numbers: none is allowed.
    let mut head = vec![stmt(LD_W_ABS, ARCH), jump(JEQ_K, arch.audit(), 1, 0), stmt(RET_K, ERRNO | ENOSYS)];
    head.push(stmt(LD_W_ABS, NR));
    if arch == Arch::X86_64 {
        head.push(jump(JGE_K, X32_BIT, 0, 1));
        head.push(stmt(RET_K, ERRNO | ENOSYS));
    }
    let blocks: Vec<Vec<Insn>> = rules.iter().map(|(_, r)| block(*r)).collect();
    // Dispatch: one jeq per rule, then ALLOW, then the blocks in order.
    let dispatch_len = rules.len();
    let mut out = head;
    let mut block_start = dispatch_len + 1; // relative to the first dispatch insn
    for (i, (nr, _)) in rules.iter().enumerate() {
        let offset = block_start - (i + 1);
        out.push(jump(JEQ_K, *nr, u8::try_from(offset).expect("the filter fits in 255 jumps"), 0));
        block_start += blocks[i].len();
    }
    out.push(stmt(RET_K, ALLOW));
    out.extend(blocks.into_iter().flatten());
    out
}

/// The program as bwrap reads it: `struct sock_filter`s, little-endian like both machines.
pub fn bytes(arch: Arch) -> Vec<u8> {
    program(arch)
        .iter()
        .flat_map(|i| {
            let mut b = Vec::with_capacity(8);
            b.extend(i.code.to_le_bytes());
            b.push(i.jt);
            b.push(i.jf);
            b.extend(i.k.to_le_bytes());
            b
        })
        .collect()
}

/// A `printf` format that writes exactly `bytes`: every byte as an octal
/// escape, so no `%` or `\` of the data reaches printf as itself.
/// The program for `arch` as a file in `dir` (the driver's state directory
/// on this machine), named by its contents and written (0600, replaced
/// whole) when it is missing or differs; `None` when it cannot be. Boxes
/// never see that directory (no workspace may hold the store), and the
/// start shell opening it on fd 3 saves the pipe's two forks.
pub fn program_file(dir: &std::path::Path, arch: Arch) -> Option<std::path::PathBuf> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let program = bytes(arch);
    let hash = blake3::hash(&program).to_hex();
    let path = dir.join(format!("seccomp-{}-{}.bpf", arch.name(), &hash[..16]));
    if std::fs::read(&path).ok().as_deref() == Some(&program[..]) {
        return Some(path);
    }
    let tmp = dir.join(format!(".seccomp-{}.{}.tmp", arch.name(), std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&program))
        .and_then(|()| std::fs::rename(&tmp, &path));
    match written {
        Ok(()) => Some(path),
        Err(_) => {
            let _ = std::fs::remove_file(&tmp);
            None
        }
    }
}

pub fn printf_format(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program over one call, as the kernel would: the verdict.
    fn run(prog: &[Insn], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                0 => nr,
                4 => arch,
                o if (16..64).contains(&o) && (o - 16) % 8 == 0 => args[((o - 16) / 8) as usize] as u32,
                o if (16..64).contains(&o) && (o - 16) % 8 == 4 => (args[((o - 16) / 8) as usize] >> 32) as u32,
                o => panic!("load at {o}"),
            }
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            pc += 1;
            let taken = match i.code {
                LD_W_ABS => {
                    acc = word(i.k);
                    continue;
                }
                RET_K => return i.k,
                JEQ_K => acc == i.k,
                JGE_K => acc >= i.k,
                JSET_K => acc & i.k != 0,
                other => panic!("opcode {other:#x}"),
            };
            pc += usize::from(if taken { i.jt } else { i.jf });
        }
    }

    fn x86(nr: u32, args: [u64; 6]) -> u32 {
        run(&program(Arch::X86_64), Arch::X86_64.audit(), nr, args)
    }

    const DENY: u32 = ERRNO | EPERM;

    #[test]
    fn privileged_modes_are_refused_and_plain_ones_allowed_on_every_route() {
        // (call, where the mode goes, other args).
        let mode_calls: [(u32, usize); 8] =
            [(90, 1), (91, 1), (268, 2), (452, 2), (85, 1), (83, 1), (258, 2), (133, 1)];
        for (nr, at) in mode_calls {
            for (mode, verdict) in [(0o4755u64, DENY), (0o2755, DENY), (0o6777, DENY), (0o755, ALLOW), (0o1777, ALLOW)]
            {
                let mut args = [0u64; 6];
                args[at] = mode;
                assert_eq!(x86(nr, args), verdict, "call {nr} mode {mode:o}");
                // High bits of the register do not hide the low ones.
                args[at] = mode | 0xffff_0000_0000_0000;
                assert_eq!(x86(nr, args), verdict, "call {nr} mode {mode:o} with high bits");
            }
        }
        assert_eq!(x86(259, [0, 0, 0o104755, 0, 0, 0]), DENY, "mknodat of a setuid regular file");
    }

    #[test]
    fn open_refuses_a_privileged_mode_only_when_it_creates() {
        for (nr, flags_at, mode_at) in [(2u32, 1usize, 2usize), (257, 2, 3)] {
            for (flags, mode, verdict) in [
                (0o100u64, 0o4755u64, DENY),      // O_CREAT
                (0o20200000 | 0o2, 0o2755, DENY), // O_TMPFILE|O_RDWR
                (0o101, 0o644, ALLOW),
                (0o2, 0o4755, ALLOW), // no create: the mode is ignored by the kernel
            ] {
                let mut args = [0u64; 6];
                args[flags_at] = flags;
                args[mode_at] = mode;
                assert_eq!(x86(nr, args), verdict, "call {nr} flags {flags:o} mode {mode:o}");
            }
        }
    }

    #[test]
    fn pid_1_cannot_be_traced_or_read_and_other_pids_can() {
        assert_eq!(x86(101, [16, 1, 0, 0, 0, 0]), DENY, "PTRACE_ATTACH 1");
        assert_eq!(x86(101, [16, 1 | (1 << 32), 0, 0, 0, 0]), DENY, "a pid the kernel truncates to 1");
        assert_eq!(x86(101, [16, 7, 0, 0, 0, 0]), ALLOW);
        assert_eq!(x86(101, [0, 0, 0, 0, 0, 0]), ALLOW, "PTRACE_TRACEME");
        for nr in [310, 311, 434] {
            assert_eq!(x86(nr, [1, 0, 0, 0, 0, 0]), DENY, "call {nr}");
            assert_eq!(x86(nr, [2, 0, 0, 0, 0, 0]), ALLOW, "call {nr}");
        }
    }

    #[test]
    fn openat2_io_uring_x32_and_foreign_architectures_are_refused_and_the_rest_allowed() {
        for nr in [437, 425, 426, 427, X32_BIT | 2, X32_BIT | 90] {
            assert_eq!(x86(nr, [0; 6]), ERRNO | ENOSYS, "call {nr:#x}");
        }
        let prog = program(Arch::X86_64);
        assert_eq!(run(&prog, 0x4000_0003, 15, [0o4755; 6]), ERRNO | ENOSYS, "i386 calls");
        for nr in [0, 1, 59, 87, 92, 260] {
            assert_eq!(x86(nr, [0o4755; 6]), ALLOW, "call {nr} is not filtered");
        }
    }

    #[test]
    fn the_aarch64_program_filters_its_own_numbers() {
        let prog = program(Arch::Aarch64);
        let a = |nr: u32, args: [u64; 6]| run(&prog, Arch::Aarch64.audit(), nr, args);
        assert_eq!(a(53, [0, 0, 0o4755, 0, 0, 0]), DENY, "fchmodat");
        assert_eq!(a(52, [0, 0o2755, 0, 0, 0, 0]), DENY, "fchmod");
        assert_eq!(a(56, [0, 0, 0o100, 0o4755, 0, 0]), DENY, "openat O_CREAT");
        assert_eq!(a(117, [16, 1, 0, 0, 0, 0]), DENY, "ptrace 1");
        assert_eq!(a(56, [0, 0, 0o100, 0o644, 0, 0]), ALLOW);
        assert_eq!(a(90, [0, 0o4755, 0, 0, 0, 0]), ALLOW, "90 is not chmod here");
        assert_eq!(run(&prog, Arch::X86_64.audit(), 90, [0; 6]), ERRNO | ENOSYS, "another architecture");
    }

    #[test]
    fn the_bytes_are_sock_filters_and_the_format_escapes_every_byte() {
        let b = bytes(Arch::X86_64);
        assert_eq!(b.len(), program(Arch::X86_64).len() * 8);
        assert_eq!(&b[..8], &[0x20, 0, 0, 0, 4, 0, 0, 0][..], "ld [arch]");
        let f = printf_format(&[0, b'%', b'\\', 255, b'a']);
        assert_eq!(f, "\\000\\045\\134\\377\\141");
        assert_eq!(Arch::from_uname("x86_64"), Some(Arch::X86_64));
        assert_eq!(Arch::from_uname("riscv64"), None);
    }
}
