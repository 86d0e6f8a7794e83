//! `tinybox exec -it` under a real terminal: each test makes a pty, starts
//! tinybox on its slave as the session leader controlling it (as a login
//! shell would be), and drives it by writing keystrokes to the master and
//! reading until an expected string appears (every wait bounded). The same
//! session is run on every sandbox and host that declares a terminal: a
//! prompt, line editing, the window size and a resize, Ctrl-C stopping the
//! foreground command and leaving the shell, the command's exit status,
//! and the caller's terminal modes put back afterwards.

mod module_support;

use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::pty::OpenptFlags;
use rustix::termios::{LocalModes, Termios, Winsize};
use tinybox_tests::sshd::Sshd;
use tinybox_tests::{Cli, have, skip};

/// Bounds each wait for the terminal; a guard against a hang, not a speed claim.
const GUARD: Duration = Duration::from_secs(30);

/// The test's terminal, with tinybox (or anything else) running on it.
struct Term {
    master: OwnedFd,
    slave: OwnedFd,
    child: Option<Child>,
    /// What the terminal showed and no `expect` has consumed yet.
    pending: Vec<u8>,
}

impl Term {
    /// A fresh terminal of `rows` x `cols`, nothing running on it yet.
    fn new(rows: u16, cols: u16) -> Term {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = rustix::pty::openpt(flags).expect("openpt");
        rustix::pty::grantpt(&master).expect("grantpt");
        rustix::pty::unlockpt(&master).expect("unlockpt");
        let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags).expect("pty slave");
        let term = Term { master, slave, child: None, pending: Vec::new() };
        term.set_size(rows, cols);
        term
    }

    fn set_size(&self, rows: u16, cols: u16) {
        let ws = Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        rustix::termios::tcsetwinsize(&self.master, ws).expect("set the window size");
    }

    fn modes(&self) -> Termios {
        rustix::termios::tcgetattr(&self.slave).expect("tcgetattr")
    }

    /// Runs `cmd` on the terminal as the leader of a session it controls
    /// (util-linux setsid -c: it execs in place, so the pid is the command's).
    fn start(&mut self, cmd: &Command) {
        let mut c = Command::new("setsid");
        c.arg("-c").arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let fd = |f: &OwnedFd| Stdio::from(f.try_clone().expect("dup the slave"));
        c.stdin(fd(&self.slave)).stdout(fd(&self.slave)).stderr(fd(&self.slave));
        self.child = Some(c.spawn().expect("start on the terminal"));
    }

    fn pid(&self) -> rustix::process::Pid {
        let id = self.child.as_ref().expect("started").id();
        rustix::process::Pid::from_raw(id as i32).expect("a pid")
    }

    fn send(&self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = rustix::io::write(&self.master, rest).expect("type on the terminal");
            rest = &rest[n..];
        }
    }

    /// Reads until `needle` has been shown; returns everything up to and
    /// including it. Fails the test with what was shown when it never is.
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + GUARD;
        loop {
            if let Some(at) = find(&self.pending, needle.as_bytes()) {
                let upto: Vec<u8> = self.pending.drain(..at + needle.len()).collect();
                return String::from_utf8_lossy(&upto).into_owned();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero() && self.read_within(left),
                "the terminal never showed {needle:?}; it showed {:?}",
                String::from_utf8_lossy(&self.pending)
            );
        }
    }

    /// One read of whatever the terminal shows within `within`; false when
    /// it shows nothing or has no writer left.
    fn read_within(&mut self, within: Duration) -> bool {
        let timeout = Timespec { tv_sec: within.as_secs() as i64, tv_nsec: i64::from(within.subsec_nanos()) };
        let mut fds = [PollFd::new(&self.master, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(n) if n > 0 => {}
            _ => return false,
        }
        let mut buf = [0u8; 4096];
        match rustix::io::read(&self.master, &mut buf) {
            Ok(n) if n > 0 => {
                self.pending.extend_from_slice(&buf[..n]);
                true
            }
            _ => false,
        }
    }

    /// Runs `line` in the shell on the terminal until its output holds
    /// `wanted`, trying again while it does not (a resize travels apart
    /// from the keystrokes, so the first try may race it). `prompt` ends
    /// each try.
    fn until_output(&mut self, line: &str, wanted: &str, prompt: &str) {
        let deadline = Instant::now() + GUARD;
        loop {
            self.send(format!("{line}\r").as_bytes());
            let shown = self.expect(prompt);
            if shown.contains(wanted) {
                return;
            }
            assert!(Instant::now() < deadline, "`{line}` never printed {wanted:?}; last: {shown:?}");
        }
    }

    /// Waits for the command to end; its exit code.
    fn exit_code(&mut self) -> i32 {
        let deadline = Instant::now() + GUARD;
        loop {
            // Keep the terminal drained (a writer never blocks on it) while
            // polling for the end, a slice at a time.
            self.read_within(Duration::from_millis(50));
            if let Some(status) = self.child.as_mut().expect("started").try_wait().expect("wait") {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "the command on the terminal did not end");
        }
    }

    /// Bytes typed into the caller's terminal that nobody has read: what a
    /// TIOCSTI into it would leave.
    fn unread_input(&self) -> u64 {
        rustix::io::ioctl_fionread(&self.slave).expect("FIONREAD") as u64
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut()
            && child.try_wait().ok().flatten().is_none()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The modes that matter to a caller, compared field by field.
fn same_modes(a: &Termios, b: &Termios) -> bool {
    a.input_modes == b.input_modes
        && a.output_modes == b.output_modes
        && a.control_modes == b.control_modes
        && a.local_modes == b.local_modes
        // Every control character (VMIN and VTIME included), by their listing.
        && format!("{:?}", a.special_codes) == format!("{:?}", b.special_codes)
}

/// The whole session, on the box `id` of `cli`: see the file's opening.
fn interactive_session(cli: &Cli, id: &str) {
    let mut term = Term::new(31, 97);
    let before = term.modes();
    let mut cmd = cli.cmd(&["exec", "-it", id, "--", "sh"]);
    cmd.env("TERM", "dumb");
    term.start(&cmd);

    // A prompt appears: ours, which the echo of the line setting it cannot
    // show (the quotes split it).
    term.send(b"PS1='tb''-prompt> '\r");
    let prompt = "tb-prompt> ";
    term.expect(prompt);
    let during = term.modes();
    assert!(
        !during.local_modes.contains(LocalModes::ICANON) && !during.local_modes.contains(LocalModes::ECHO),
        "the caller's terminal is in raw mode while the command runs"
    );

    // Line editing is the box's terminal's: DEL erases the X.
    // (A shell may redraw its prompt meanwhile, busybox's after asking
    // the cursor position, so the output itself is what is waited for.)
    term.send(b"echo abX\x7fc\r");
    term.expect("abc\r\n");
    term.expect(prompt);

    // The size at start, then a resize: the terminal's new size and the
    // SIGWINCH a terminal emulator sends.
    term.until_output("stty size", "31 97", prompt);
    term.set_size(42, 120);
    rustix::process::kill_process(term.pid(), rustix::process::Signal::WINCH).expect("SIGWINCH");
    term.until_output("stty size", "42 120", prompt);

    // Ctrl-C reaches the foreground command, not the shell. The command
    // says it has started from inside the foreground job, so the byte
    // cannot arrive before the job exists.
    let started = Instant::now();
    term.send(b"sh -c 'echo sl''eeping; exec sleep 60'\r");
    term.expect("sleeping");
    term.send(b"\x03");
    term.expect(prompt);
    assert!(started.elapsed() < Duration::from_secs(60), "sleep was stopped, not waited out");
    term.send(b"echo al''ive\r");
    term.expect("alive");

    // The exit status is the command's.
    term.send(b"exit 7\r");
    let code = term.exit_code();
    assert_eq!(code, 7, "the terminal showed {:?}", String::from_utf8_lossy(&term.pending));
    assert!(same_modes(&before, &term.modes()), "the caller's terminal modes are restored");
}

fn namespace_missing(test: &str) -> bool {
    if !have("bwrap") {
        skip(test, "bwrap is not installed (apt-get install bubblewrap)");
        return true;
    }
    false
}

#[test]
fn passthrough_session() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    interactive_session(&cli, &id);
}

#[test]
fn namespace_session() {
    if namespace_missing("terminal::namespace_session") {
        return;
    }
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "namespace"]);
    interactive_session(&cli, &id);
}

/// Whether an egress namespace box can be made here; says why not.
fn egress_missing(test: &str) -> bool {
    for program in ["slirp4netns", "iptables"] {
        if !have(program) && !std::path::Path::new("/usr/sbin").join(program).exists() {
            skip(test, &format!("{program} is not installed (contrib/setup/install-deps)"));
            return true;
        }
    }
    false
}

/// An egress box's command runs behind netwrap.sh's fence, as a background
/// job of its shell: it still gets the terminal as stdin and Ctrl-C's SIGINT.
#[test]
fn namespace_egress_session() {
    let test = "terminal::namespace_egress_session";
    if namespace_missing(test) || egress_missing(test) {
        return;
    }
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "namespace", "--network", "egress"]);
    interactive_session(&cli, &id);
}

#[test]
fn docker_session() {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        skip("terminal::docker_session", &why);
        return;
    }
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "docker", "--image", tinybox_tests::docker::BASE_IMAGE]);
    interactive_session(&cli, &id);
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

/// A host named `far` reaching root on the test sshd.
fn add_ssh_host(cli: &Cli, sshd: &Sshd) {
    let args = sshd.host_add_args("far", "root");
    let (code, _, err) = cli.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "host add: {err}");
}

/// A namespace box on host `far`, the test sshd; `None` (said as a skip)
/// where bwrap or the sshd is missing. The sshd stops when its handle drops.
fn namespace_box_on_the_test_sshd(test: &str) -> Option<(Sshd, Cli, String)> {
    if namespace_missing(test) {
        return None;
    }
    let sshd = sshd_or_skip(test)?;
    let cli = Cli::new();
    add_ssh_host(&cli, &sshd);
    let id = cli.create(&["--host", "far", "--sandbox", "namespace"]);
    Some((sshd, cli, id))
}

/// The test sshd, or `None` after saying why the test is skipped.
fn sshd_or_skip(test: &str) -> Option<Sshd> {
    match Sshd::start() {
        Ok(s) => Some(s),
        Err(why) => {
            skip(test, &why);
            None
        }
    }
}

#[test]
fn ssh_host_session() {
    let Some(sshd) = sshd_or_skip("terminal::ssh_host_session") else {
        return;
    };
    let cli = Cli::new();
    add_ssh_host(&cli, &sshd);
    let id = cli.create(&["--host", "far", "--sandbox", "passthrough"]);
    interactive_session(&cli, &id);

    // docker over ssh: ssh -tt mirrors the terminal to the far side, where
    // docker exec -t mirrors it into the container; a resize travels both hops.
    match tinybox_tests::docker::unavailable() {
        Some(why) => skip("terminal::ssh_host_session (docker)", &why),
        None => {
            let boxed =
                cli.create(&["--host", "far", "--sandbox", "docker", "--image", tinybox_tests::docker::BASE_IMAGE]);
            interactive_session(&cli, &boxed);
            let (code, _, err) = cli.run(&["rm", &boxed]);
            assert_eq!(code, 0, "{err}");
        }
    }
}

/// A namespace box on an ssh host: sshd makes the far terminal for this
/// run and leads its session; the box stays in that session (bwrap without
/// `--new-session`, docs/adr/0025) and its shell's job control, the size
/// and its changes, and Ctrl-C work there as on this machine.
#[test]
fn namespace_on_an_ssh_host_session() {
    let test = "terminal::namespace_on_an_ssh_host_session";
    let Some((_sshd, cli, id)) = namespace_box_on_the_test_sshd(test) else {
        return;
    };
    interactive_session(&cli, &id);
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
    if egress_missing("terminal::namespace_on_an_ssh_host_session (egress)") {
        return;
    }
    let id = cli.create(&["--host", "far", "--sandbox", "namespace", "--network", "egress"]);
    interactive_session(&cli, &id);
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn without_a_terminal_t_is_refused_in_one_line() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let (code, out, err) = cli.run(&["exec", "-t", &id, "--", "true"]);
    assert_ne!(code, 0);
    assert!(out.is_empty());
    assert!(err.contains("stdin is not a terminal"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// A program that is not there ends a terminal run as it ends a plain one:
/// 127 and one tinybox line (setsid's own words and status 1 never show).
#[test]
fn a_missing_program_on_a_terminal_is_127_in_one_line() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let mut term = Term::new(24, 80);
    term.start(&cli.cmd(&["exec", "-t", &id, "--", "no-such-program-here"]));
    let shown = term.expect("\n");
    assert_eq!(term.exit_code(), 127);
    assert_eq!(shown, "tinybox: no program no-such-program-here in the box\r\n");
}

/// Tries TIOCSTI on every terminal the process can reach (its stdin,
/// stdout, stderr, /dev/tty, and the standard descriptors of every process
/// its /proc shows, reopened: on an ssh host, `script`'s are sshd's
/// terminal), then says `probed`. TIOCSTI is 0x5412; perl passes the
/// one-byte string by address.
const TIOCSTI_PROBE: &str = r#"open(my $t, "+<", "/dev/tty");
    my @fds = (\*STDIN, \*STDOUT, \*STDERR); push @fds, $t if $t;
    for my $p (glob("/proc/[0-9]*/fd/[012]")) { push @fds, $_ for grep { -t $_ } map { open(my $f, "+<", $p) ? $f : () } 1 }
    for my $fh (@fds) { for my $c (split //, "echo INJECTED\n") { ioctl($fh, 0x5412, $c) } }
    print "probed\n";"#;

/// Whether `test` can show an injection: perl is there, and the control,
/// the probe run on the caller's terminal itself, does inject (so the
/// probe would see one). Says why it is skipped when not.
fn tiocsti_works(test: &str) -> bool {
    if !std::path::Path::new("/usr/bin/perl").exists() {
        skip(test, "no /usr/bin/perl for the probe (perl-base is essential on Debian)");
        return false;
    }
    let mut control = Term::new(24, 80);
    let mut perl = Command::new("/usr/bin/perl");
    perl.args(["-e", TIOCSTI_PROBE]);
    control.start(&perl);
    assert_eq!(control.exit_code(), 0);
    if control.unread_input() == 0 {
        skip(test, "TIOCSTI is refused on this kernel even for a terminal's own session (dev.tty.legacy_tiocsti=0)");
        return false;
    }
    true
}

/// Runs the probe in box `id` on a terminal of the caller's: it pushes into
/// the terminal made for its run, which echoes it, and nothing lands in the
/// caller's input.
fn tiocsti_from_the_box(cli: &Cli, id: &str) {
    let mut term = Term::new(24, 80);
    // -t without -i: tinybox itself reads nothing from the caller's
    // terminal, so whatever landed there would still be unread.
    term.start(&cli.cmd(&["exec", "-t", id, "--", "/usr/bin/perl", "-e", TIOCSTI_PROBE]));
    let shown = term.expect("probed");
    assert!(shown.contains("echo INJECTED"), "the probe pushed into its own terminal, which echoed it: {shown:?}");
    assert_eq!(term.exit_code(), 0);
    assert_eq!(term.unread_input(), 0, "the box typed into the caller's terminal");
}

/// A process in a box tries TIOCSTI on every terminal it can reach; none
/// is the caller's, so nothing lands in the caller's input. The control
/// runs the same probe on the caller's terminal itself, to show the probe
/// would see an injection.
#[test]
fn tiocsti_in_a_box_cannot_type_into_the_callers_terminal() {
    let test = "terminal::tiocsti_in_a_box_cannot_type_into_the_callers_terminal";
    if namespace_missing(test) || !tiocsti_works(test) {
        return;
    }
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "namespace"]);
    tiocsti_from_the_box(&cli, &id);
}

/// The same on an ssh host, where the box stays in the session sshd made
/// for the run: its controlling terminal is sshd's terminal for this run,
/// whose input only the box reads; the caller's stays untouched.
#[test]
fn tiocsti_in_a_box_on_an_ssh_host_cannot_type_into_the_callers_terminal() {
    let test = "terminal::tiocsti_in_a_box_on_an_ssh_host_cannot_type_into_the_callers_terminal";
    if !tiocsti_works(test) {
        return;
    }
    let Some((_sshd, cli, id)) = namespace_box_on_the_test_sshd(test) else {
        return;
    };
    tiocsti_from_the_box(&cli, &id);
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

/// A microVM box under emulation: the guest agent makes the terminal in the
/// guest and takes each resize there. One session, kept short (TCG).
#[test]
fn microvm_session() {
    if let Some(why) = tinybox_tests::microvm::unavailable() {
        skip("terminal::microvm_session", &why);
        return;
    }
    let cli = Cli::new();
    let mut args = vec!["create"];
    args.extend_from_slice(tinybox_tests::microvm::TCG);
    let (code, out, err) = cli.run(&args);
    assert_eq!(code, 0, "{err}");
    let id = out.trim().to_owned();
    interactive_session(&cli, &id);
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

/// The module's streaming exec on a terminal, from a Python host through
/// ctypes: the box sees a terminal of the size given at `exec.start`, an
/// `exec.resize` reaches it as SIGWINCH with the new size, and the
/// refusals are invalid_argument. The box's command reports the size when
/// told of a change (its trap), so nothing here waits on time.
const MODULE_SESSION: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from host import Module
m = Module(sys.argv[2])
store, sandbox = sys.argv[3], sys.argv[4]
def out(tag, value): print("RESULT\t%s\t%s" % (tag, json.dumps(value)), flush=True)
box = m.call("create", store=store, sandbox=sandbox)["ok"]["id"]
script = 'trap "stty size; exit 3" WINCH; [ -t 0 ] && [ -t 1 ] && echo on-a-terminal; stty size; while :; do sleep 1; done'
start = m.call("exec.start", store=store, id=box, argv=["sh", "-c", script], tty={"rows": 24, "cols": 80}, timeout_secs=60)
handle = start["ok"]["exec"]
seen = ""
while "24 80" not in seen:
    r = m.call("exec.read", store=store, exec=handle, wait_ms=30000)["ok"]
    assert r["stdout"] or not r["done"], "ended before reporting its size: " + seen
    seen += r["stdout"]
out("first", seen)
out("resize", m.call("exec.resize", store=store, exec=handle, rows=50, cols=132))
out("zero", m.call("exec.resize", store=store, exec=handle, rows=0, cols=132))
out("wait", m.call("exec.wait", store=store, exec=handle)["ok"])
plain = m.call("exec.start", store=store, id=box, argv=["true"])["ok"]["exec"]
out("plain_resize", m.call("exec.resize", store=store, exec=plain, rows=10, cols=10))
m.call("exec.wait", store=store, exec=plain)
out("captured", m.call("exec", store=store, id=box, argv=["sh", "-c", "stty size"], tty={"rows": 7, "cols": 33})["ok"])
out("bad_tty", m.call("exec", store=store, id=box, argv=["true"], tty={"rows": 0, "cols": 33}))
m.call("rm", store=store, id=box)
"#;

fn module_terminal(test: &str, sandbox: &str) {
    let python = match Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        _ => {
            skip(test, "python3 is not on PATH");
            return;
        }
    };
    let dir = module_support::temp();
    let store = dir.path().join("store");
    let hosts = module_support::root().join("tests/hosts");
    let mut cmd = Command::new(python);
    cmd.args(["-c", MODULE_SESSION]).arg(&hosts).arg(module_support::library()).arg(&store).arg(sandbox);
    let out = module_support::host_env(&mut cmd, &store).output().expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the Python host failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let result = |tag: &str| -> serde_json::Value {
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("RESULT\t{tag}\t")))
            .unwrap_or_else(|| panic!("no {tag} in {stdout}"));
        serde_json::from_str(line).unwrap()
    };
    assert!(result("first").as_str().unwrap().contains("on-a-terminal"), "{stdout}");
    assert_eq!(result("resize")["ok"], serde_json::json!({"exec": "exec-0", "rows": 50, "cols": 132}));
    assert_eq!(result("zero")["error"]["code"], "invalid_argument");
    let waited = result("wait");
    assert!(waited["stdout"].as_str().unwrap().contains("50 132"), "the resize reached the box: {waited}");
    assert_eq!(waited["exit_code"], 3);
    assert_eq!(result("plain_resize")["error"]["code"], "invalid_argument");
    assert!(result("plain_resize")["error"]["message"].as_str().unwrap().contains("without a terminal"));
    assert_eq!(result("captured")["stdout"], "7 33\r\n");
    assert_eq!(result("bad_tty")["error"]["code"], "invalid_argument");
}

#[test]
fn module_streaming_exec_on_a_terminal_passthrough() {
    module_terminal("terminal::module_streaming_exec_on_a_terminal_passthrough", "passthrough");
}

#[test]
fn module_streaming_exec_on_a_terminal_namespace() {
    let test = "terminal::module_streaming_exec_on_a_terminal_namespace";
    if namespace_missing(test) {
        return;
    }
    module_terminal(test, "namespace");
}
