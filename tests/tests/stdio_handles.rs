//! What a box can do with the streams `tinybox exec` gives it, attacked from
//! inside: the caller's stdout, stderr and stdin are redirected to files it
//! owns, the box reopens them through /proc/self/fd/N, and the files are
//! checked from outside. A box must get the bytes and nothing it can reopen.
//! Every sandbox that runs here, as this user and (where it can) rootless.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::docker::{self, Namespace};
use tinybox_tests::microvm::{Reaper, TCG};
use tinybox_tests::{have, need_microvm, skip};

/// Bounds a hung exec; asserts nothing about speed.
const GUARD: Duration = Duration::from_secs(120);

const PRECIOUS: &str = "precious\n";

/// One box under attack, and what must be cleaned up after it.
struct Target {
    env: BoxEnv,
    id: String,
    label: String,
    _namespace: Option<Namespace>,
}

#[derive(Debug, Clone, Copy)]
enum Sandbox {
    Passthrough,
    Namespace,
    Docker,
}

/// The boxes a test attacks on `sandbox`: one per principal that can run it
/// here, with a visible skip for each that cannot.
fn targets(test: &str, sandbox: Sandbox) -> Vec<Target> {
    let principals = match sandbox {
        Sandbox::Passthrough => Principal::all(test),
        Sandbox::Namespace if !have("bwrap") => {
            skip(test, "bwrap is not installed (apt-get install bubblewrap)");
            vec![]
        }
        Sandbox::Namespace => Principal::all(test),
        Sandbox::Docker => match docker::unavailable() {
            Some(why) => {
                skip(test, &why);
                vec![]
            }
            // The daemon's socket is root's: a rootless caller has no docker.
            None => vec![Principal::Me],
        },
    };
    principals
        .into_iter()
        .map(|who| {
            let env = BoxEnv::new(&who);
            let (id, namespace) = match sandbox {
                Sandbox::Passthrough => (env.create(&["--sandbox", "passthrough"]), None),
                Sandbox::Namespace => (env.create(&["--sandbox", "namespace"]), None),
                Sandbox::Docker => {
                    let short: String = test.chars().rev().take(24).map(|c| if c == ':' { '-' } else { c }).collect();
                    let ns = Namespace::new(&short.chars().rev().collect::<String>());
                    (env.create(&["--sandbox", "docker", "--namespace", &ns.name]), Some(ns))
                }
            };
            let label = format!("{sandbox:?} {}", who.label());
            Target { env, id, label, _namespace: namespace }
        })
        .collect()
}

/// A file the caller owns, holding `contents`, in a directory of its own.
struct CallerFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl CallerFile {
    fn new(who: &Principal, contents: &[u8]) -> CallerFile {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("caller-file");
        std::fs::write(&path, contents).expect("write caller file");
        // The caller's own file: the box runs as the caller, so only the
        // handle, not the permissions, stands between it and the file.
        who.own(&path);
        CallerFile { _dir: dir, path }
    }

    fn append(&self) -> File {
        OpenOptions::new().append(true).open(&self.path).expect("open for append")
    }

    fn read_only(&self) -> File {
        File::open(&self.path).expect("open for reading")
    }

    fn contents(&self) -> Vec<u8> {
        std::fs::read(&self.path).expect("read caller file")
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.contents()).into_owned()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `tinybox exec BOX -- ARGV` with the given streams (pipes read to the end
/// when asked for); fails the test if it does not end within the guard.
fn exec(t: &Target, argv: &[&str], stdin: Stdio, stdout: Stdio, stderr: Stdio) -> Output {
    let mut args = vec!["exec", t.id.as_str(), "--"];
    args.extend_from_slice(argv);
    finish(t.env.cli(&args).stdin(stdin).stdout(stdout).stderr(stderr), &t.label)
}

fn finish(command: &mut Command, label: &str) -> Output {
    let child = command.spawn().expect("spawn tinybox");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(GUARD) {
        Ok(out) => out.expect("wait for tinybox"),
        Err(_) => {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            panic!("{label}: tinybox exec did not end within {GUARD:?}");
        }
    }
}

/// (1) An append-mode stdout cannot be reopened and truncated.
fn stdout_file_cannot_be_truncated(sandbox: Sandbox, test: &str) {
    for t in targets(test, sandbox) {
        let log = CallerFile::new(&t.env.who, PRECIOUS.as_bytes());
        let out = exec(&t, &["sh", "-c", ": > /proc/self/fd/1"], Stdio::null(), log.append().into(), Stdio::piped());
        assert_eq!(
            log.text(),
            PRECIOUS,
            "{}: the box truncated the caller's stdout file: {}",
            t.label,
            text(&out.stderr)
        );
    }
}

/// (2) What the caller's stdout file held cannot be read through it.
fn stdout_file_cannot_be_read_back(sandbox: Sandbox, test: &str) {
    for t in targets(test, sandbox) {
        let log = CallerFile::new(&t.env.who, PRECIOUS.as_bytes());
        // A fresh open of the box's stdout for reading, kept from blocking
        // forever on a pipe by timeout; whatever it reads goes to stderr.
        let script = "exec 3</proc/self/fd/1 || exit 0; timeout 3 cat <&3 >&2";
        let out = exec(&t, &["sh", "-c", script], Stdio::null(), log.append().into(), Stdio::piped());
        assert!(
            !text(&out.stderr).contains("precious"),
            "{}: the box read the caller's stdout file: {}",
            t.label,
            text(&out.stderr)
        );
        assert_eq!(log.text(), PRECIOUS, "{}", t.label);
    }
}

/// (3) A stdin file cannot be reopened for writing.
fn stdin_file_cannot_be_written(sandbox: Sandbox, test: &str) {
    for t in targets(test, sandbox) {
        let input = CallerFile::new(&t.env.who, PRECIOUS.as_bytes());
        let script = "echo pwned > /proc/self/fd/0";
        let out = exec(&t, &["sh", "-c", script], input.read_only().into(), Stdio::piped(), Stdio::piped());
        assert_eq!(input.text(), PRECIOUS, "{}: the box wrote the caller's stdin file: {}", t.label, text(&out.stderr));
    }
}

/// (4) stderr likewise: neither truncated nor read back.
fn stderr_file_cannot_be_truncated_or_read(sandbox: Sandbox, test: &str) {
    for t in targets(test, sandbox) {
        let log = CallerFile::new(&t.env.who, PRECIOUS.as_bytes());
        let script = "exec 3</proc/self/fd/2 && timeout 3 cat <&3; : > /proc/self/fd/2";
        let out = exec(&t, &["sh", "-c", script], Stdio::null(), Stdio::piped(), log.append().into());
        assert!(
            !text(&out.stdout).contains("precious"),
            "{}: the box read the caller's stderr file: {}",
            t.label,
            text(&out.stdout)
        );
        // What the box itself wrote to stderr (busybox timeout's "Terminated") may follow.
        assert!(log.text().starts_with(PRECIOUS), "{}: the box truncated the caller's stderr file", t.label);
    }
}

/// Pseudo-random bytes, every value present, more than a pipe's buffer.
fn binary(len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

/// (5) The ordinary path through files: bytes exact both ways, stderr
/// apart, status passed through; and stdout and stderr sharing one file
/// keep the order the command wrote them in.
fn files_carry_exact_bytes_and_status(sandbox: Sandbox, test: &str) {
    for t in targets(test, sandbox) {
        let payload = binary(3 << 19);
        let input = CallerFile::new(&t.env.who, &payload);
        let out_file = CallerFile::new(&t.env.who, b"");
        let err_file = CallerFile::new(&t.env.who, b"");
        let script = "cat; printf 'to stderr' >&2; exit 7";
        let out = exec(
            &t,
            &["sh", "-c", script],
            input.read_only().into(),
            out_file.append().into(),
            err_file.append().into(),
        );
        assert_eq!(out.status.code(), Some(7), "{}", t.label);
        let got = out_file.contents();
        assert_eq!(got.len(), payload.len(), "{}: stdout file length", t.label);
        assert!(got == payload, "{}: stdin through cat to a stdout file changed the bytes", t.label);
        assert_eq!(err_file.text(), "to stderr", "{}", t.label);

        // `> log 2>&1`: one file description for both, so the order the
        // command wrote in is kept. Docker relays the two streams apart and
        // cannot keep it (`docker exec` has no merged mode without a tty).
        if matches!(sandbox, Sandbox::Docker) {
            continue;
        }
        let both = CallerFile::new(&t.env.who, b"");
        let shared = both.append();
        let script = "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done";
        let out =
            exec(&t, &["sh", "-c", script], Stdio::null(), shared.try_clone().expect("dup").into(), shared.into());
        assert!(out.status.success(), "{}", t.label);
        assert_eq!(both.text(), "out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\n", "{}", t.label);

        // Through pipes too: a binary stream, with stdin's end reaching the command.
        let mut child = t
            .env
            .cli(&["exec", &t.id, "--", "sh", "-c", "cat; echo end"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn tinybox");
        let mut stdin = child.stdin.take().expect("stdin");
        let feed = payload.clone();
        let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &feed));
        let mut echoed = Vec::new();
        child.stdout.take().expect("stdout").read_to_end(&mut echoed).expect("read stdout");
        writer.join().expect("writer").expect("write stdin");
        assert!(child.wait().expect("wait").success(), "{}", t.label);
        let mut expected = payload;
        expected.extend_from_slice(b"end\n");
        assert!(echoed == expected, "{}: {} bytes came back, {} expected", t.label, echoed.len(), expected.len());
    }
}

macro_rules! attacked {
    ($module:ident, $sandbox:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn stdout_file_cannot_be_truncated() {
                super::stdout_file_cannot_be_truncated($sandbox, concat!(stringify!($module), "::stdout_truncate"));
            }

            #[test]
            fn stdout_file_cannot_be_read_back() {
                super::stdout_file_cannot_be_read_back($sandbox, concat!(stringify!($module), "::stdout_read"));
            }

            #[test]
            fn stdin_file_cannot_be_written() {
                super::stdin_file_cannot_be_written($sandbox, concat!(stringify!($module), "::stdin_write"));
            }

            #[test]
            fn stderr_file_cannot_be_truncated_or_read() {
                super::stderr_file_cannot_be_truncated_or_read($sandbox, concat!(stringify!($module), "::stderr"));
            }

            #[test]
            fn files_carry_exact_bytes_and_status() {
                super::files_carry_exact_bytes_and_status($sandbox, concat!(stringify!($module), "::exact"));
            }
        }
    };
}

attacked!(passthrough, Sandbox::Passthrough);
attacked!(namespace, Sandbox::Namespace);
attacked!(docker_box, Sandbox::Docker);

/// A terminal is not handed to the box either: it would let the box read
/// the keystrokes typed at it. `script` gives tinybox a terminal as stdout.
#[test]
fn a_terminal_is_not_handed_over() {
    if !have("script") {
        skip("a_terminal_is_not_handed_over", "no script(1) here to make a terminal (apt-get install bsdutils)");
        return;
    }
    for sandbox in [Sandbox::Passthrough, Sandbox::Namespace] {
        for t in targets("a_terminal_is_not_handed_over", sandbox) {
            let line = format!(
                "{} --store {} exec {} -- sh -c 'if [ -t 1 ] || [ -t 2 ]; then echo A-TERMINAL; else echo no-terminal; fi'",
                tinybox_tests::bin("tinybox").display(),
                t.env.store.path().display(),
                t.id
            );
            let mut script = t.env.who.command(Path::new("/usr/bin/script"), &["-qec", &line, "/dev/null"]);
            let out = finish(script.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()), &t.label);
            let seen = text(&out.stdout);
            assert!(!seen.contains("A-TERMINAL"), "{}: the box holds the caller's terminal", t.label);
            assert!(seen.contains("no-terminal"), "{}: the command did not run: {seen}", t.label);
        }
    }
}

/// A command that leaves a process holding its stdout does not hold
/// `tinybox exec` for longer than the grace the CLI allows (5 s), and what
/// the command itself wrote arrives.
#[test]
fn a_lingering_process_does_not_hold_exec() {
    for t in targets("a_lingering_process_does_not_hold_exec", Sandbox::Passthrough) {
        let log = CallerFile::new(&t.env.who, b"");
        let started = Instant::now();
        // stderr not a pipe this test reads, which the sleep would hold open.
        let out = exec(&t, &["sh", "-c", "sleep 300 & echo $!"], Stdio::null(), log.append().into(), Stdio::null());
        let took = started.elapsed();
        let pid: i32 = log.text().trim().parse().unwrap_or_else(|_| panic!("{}: no pid in {:?}", t.label, log.text()));
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        assert!(out.status.success(), "{}", t.label);
        assert!(took < Duration::from_secs(60), "{}: exec waited {took:?} for a background process", t.label);
    }
}

/// A destination that fails (here /dev/full) stops the command as a closed
/// pipe would, and tinybox says which stream it could not write.
#[test]
fn a_failing_destination_ends_the_command_and_is_named() {
    for t in targets("a_failing_destination_ends_the_command_and_is_named", Sandbox::Passthrough) {
        let full = OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
        let out = exec(&t, &["yes"], Stdio::null(), full.into(), Stdio::piped());
        assert_eq!(out.status.code(), Some(128 + 13), "{}: yes ends by SIGPIPE: {}", t.label, text(&out.stderr));
        let said = text(&out.stderr);
        assert!(
            said.contains("cannot write the command's stdout") && said.contains("No space left"),
            "{}: {said}",
            t.label
        );
    }
}

/// microvm: the guest's streams are its own; the caller's files stay whole.
#[test]
fn microvm_box_cannot_reach_the_callers_files() {
    need_microvm!("stdio_handles::microvm_box_cannot_reach_the_callers_files");
    for who in Principal::all("stdio_handles::microvm_box_cannot_reach_the_callers_files") {
        let env = BoxEnv::new(&who);
        let _reaper = Reaper(env.store.path().to_owned());
        let id = env.create(TCG);
        let t = Target { env, id, label: format!("microvm {}", who.label()), _namespace: None };
        let log = CallerFile::new(&who, PRECIOUS.as_bytes());
        let input = CallerFile::new(&who, PRECIOUS.as_bytes());
        let script = ": > /proc/self/fd/1; : > /proc/self/fd/2; echo pwned > /proc/self/fd/0; cat; echo after";
        let out = exec(&t, &["sh", "-c", script], input.read_only().into(), log.append().into(), log.append().into());
        assert!(out.status.success(), "{}", t.label);
        // What the guest wrote is appended; nothing of the caller's is lost or changed.
        assert!(
            log.text().starts_with(PRECIOUS),
            "{}: the caller's stdout file was truncated: {:?}",
            t.label,
            log.text()
        );
        assert!(log.text().ends_with("after\n"), "{}: {:?}", t.label, log.text());
        assert_eq!(input.text(), PRECIOUS, "{}: the caller's stdin file was written", t.label);
        // Nor can what the caller's stdout or stderr file held be read back
        // through the guest's own stream: each file in turn, the other a pipe.
        for fd in [1, 2] {
            let file = CallerFile::new(&who, PRECIOUS.as_bytes());
            let other = 3 - fd;
            let script =
                format!("exec 3</proc/self/fd/{fd} || exit 0; timeout 3 cat <&3 >&{other}; echo done >&{other}");
            let (stdout, stderr): (Stdio, Stdio) =
                if fd == 1 { (file.append().into(), Stdio::piped()) } else { (Stdio::piped(), file.append().into()) };
            let out = exec(&t, &["sh", "-c", &script], Stdio::null(), stdout, stderr);
            let seen = text(if fd == 1 { &out.stderr } else { &out.stdout });
            assert!(seen.contains("done"), "{}: the read-back probe on fd {fd} did not finish: {seen:?}", t.label);
            assert!(!seen.contains("precious"), "{}: the guest read the caller's fd {fd} file: {seen:?}", t.label);
            // What the guest wrote itself (busybox timeout's "Terminated") may follow.
            assert!(file.text().starts_with(PRECIOUS), "{}: fd {fd}: {:?}", t.label, file.text());
        }
        let rm = t.env.run(&["rm", &t.id]);
        assert!(rm.status.success(), "{}: {}", t.label, text(&rm.stderr));
    }
}
