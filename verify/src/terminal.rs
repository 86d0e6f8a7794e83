//! The terminal item of the kernel checklist (docs/specs/isolation-levels.md):
//! a box handed a descriptor of the caller's terminal cannot type into it.
//!
//! The kit makes the caller's terminal itself: a pseudo-terminal that is,
//! like a real caller's, the controlling terminal of a session (a holder
//! process under `setsid -c`). Its slave goes straight to the engine's exec
//! as the probe's stdin, stdout and stderr — no CLI pump between, so a
//! driver that hands descriptors through gives the box the terminal itself.
//! In the box, python3 or perl tries TIOCSTI on every descriptor that is a
//! terminal, and tries to take the terminal as its own controlling terminal
//! in a session of its own (TIOCSCTTY), which is how a box without
//! privilege would get to inject. The verdict is the host's: the bytes
//! waiting in the terminal's input queue afterwards (FIONREAD), the
//! box's controlling terminal and session compared with the kit's own.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::termios::{OptionalActions, QueueSelector};
use tinybox_core::model::{BoxId, ExecRequest};
use tinybox_core::{Error, Result, Target};
use tinybox_sdk::model::TtySize;
use tinybox_sdk::pty::Pty;
use tinybox_sdk::stdio::StdioFds;

use super::levels::{field, host_boot_id, nonce, own_kernel};
use super::{GUARD, Kit, Status};

type Verdict = (Status, String);

/// How long the kit waits for a line on its terminal: the holder's
/// readiness, the probe's last line once its command has ended.
const LINE_WAIT: Duration = Duration::from_secs(10);

/// Tries TIOCSTI on each of the box's descriptors 0-2 that is a terminal,
/// then, in a child leading a session of its own, TIOCSCTTY (with 1: steal
/// it, which CAP_SYS_ADMIN allows) and TIOCSTI again. argv[1] is the text.
const PYTHON: &str = r#"import os, sys, fcntl, termios
text = sys.argv[1].encode()
def sti(fd):
    try:
        for b in text:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([b]))
        return "ok"
    except OSError as e:
        return "refused:" + (e.strerror or str(e.errno))
for fd in (0, 1, 2):
    if os.isatty(fd):
        print("sti%d=%s" % (fd, sti(fd)), flush=True)
if os.isatty(0):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 1)
            res = "ok:" + sti(0)
        except OSError as e:
            res = "refused:" + (e.strerror or str(e.errno))
        os.write(w, res.encode())
        os._exit(0)
    os.close(w)
    res = os.read(r, 256).decode()
    os.waitpid(pid, 0)
    print("adopt=" + res, flush=True)
"#;

/// The same in perl, with the asm-generic numbers (x86, arm, riscv, s390;
/// perl has no portable names without h2ph's headers).
const PERL: &str = r#"use POSIX (); my $text = shift; my ($STI, $SCTTY) = (0x5412, 0x540E);
sub sti { my $fh = shift; for my $c (split //, $text) { ioctl($fh, $STI, $c) or return "refused:$!" } return "ok" }
my @fh = (\*STDIN, \*STDOUT, \*STDERR);
for my $n (0 .. 2) { print "sti$n=", sti($fh[$n]), "\n" if -t $fh[$n] }
if (-t STDIN) {
  pipe(my $r, my $w); my $pid = fork();
  if ($pid == 0) { close $r; my $res;
    if (POSIX::setsid() < 0) { $res = "refused:$!" } elsif (!ioctl(STDIN, $SCTTY, 1)) { $res = "refused:$!" } else { $res = "ok:" . sti(\*STDIN) }
    syswrite($w, $res); POSIX::_exit(0) }
  close $w; my $res = <$r>; waitpid($pid, 0); print "adopt=$res\n" }
"#;

/// The shell half: what the box's descriptors and session are, then the
/// injection with whichever tool the box has. `$1` python, `$2` perl, `$3`
/// the text to inject.
const SCRIPT: &str = r#"for n in 0 1 2; do if [ -t $n ]; then echo "tty$n=yes"; else echo "tty$n=no"; fi
echo "fd$n=$(readlink /proc/$$/fd/$n 2>/dev/null)"; done
if (exec 3<>/dev/tty) 2>/dev/null; then echo devtty=opened; else echo devtty=none; fi
echo "stat=$(cat /proc/$$/stat 2>/dev/null)"
echo "pidns=$(readlink /proc/self/ns/pid 2>/dev/null)"
echo "boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
if command -v python3 >/dev/null 2>&1; then echo tool=python3; python3 -c "$1" "$3"
elif command -v perl >/dev/null 2>&1; then echo tool=perl; perl -e "$2" "$3"
else echo tool=none; fi
echo done"#;

fn io(what: &str) -> impl FnOnce(io::Error) -> Error + '_ {
    move |e| Error::io(format!("cannot {what} for the terminal probe"), e)
}

/// A session id and a controlling terminal (the kernel's encoding, 0 for
/// none), from the fields of a `/proc/<pid>/stat` line.
pub(super) fn session_of(stat: &str) -> Option<(u64, u64)> {
    // The command name, in parentheses, may hold spaces: count after it.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.get(3)?.parse().ok()?, f.get(4)?.parse().ok()?))
}

/// A device number as `/proc/<pid>/stat` shows a controlling terminal.
pub(super) fn tty_nr(rdev: u64) -> u64 {
    let (major, minor) = (u64::from(rustix::fs::major(rdev)), u64::from(rustix::fs::minor(rdev)));
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// The caller's terminal, as the kit makes it: a pseudo-terminal in raw
/// mode (every byte queued counts, none is echoed), the controlling
/// terminal of a holder's session. The holder is killed on drop.
struct CallerTerminal {
    pty: Pty,
    holder: std::process::Child,
}

impl CallerTerminal {
    fn open() -> std::result::Result<CallerTerminal, String> {
        let setsid = tinybox_sdk::pty::setsid_program().map_err(|e| e.to_string())?;
        let pty =
            Pty::open(TtySize { rows: 24, cols: 80 }).map_err(|e| format!("cannot open a pseudo-terminal: {e}"))?;
        let mut modes = rustix::termios::tcgetattr(&pty.slave).map_err(|e| format!("cannot read its modes: {e}"))?;
        modes.make_raw();
        rustix::termios::tcsetattr(&pty.slave, OptionalActions::Now, &modes)
            .map_err(|e| format!("cannot make it raw: {e}"))?;
        let clone = || pty.slave.try_clone().map_err(|e| format!("cannot share it: {e}"));
        let holder = std::process::Command::new(setsid)
            .args(["-c", "sh", "-c", "echo tinybox-kit-ready; exec sleep 600"])
            .stdin(clone()?)
            .stdout(clone()?)
            .stderr(clone()?)
            .spawn()
            .map_err(|e| format!("cannot start {setsid} to hold it: {e}"))?;
        let term = CallerTerminal { pty, holder };
        let said = read_until(term.pty.master.as_fd(), "tinybox-kit-ready", Instant::now() + LINE_WAIT);
        if !String::from_utf8_lossy(&said).lines().any(|l| l.trim() == "tinybox-kit-ready") {
            return Err(format!("{setsid} -c did not start on it: {:?}", String::from_utf8_lossy(&said)));
        }
        Ok(term)
    }

    /// Bytes waiting in the terminal's input queue, and what they are.
    fn unread_input(&self) -> io::Result<Vec<u8>> {
        let n = rustix::io::ioctl_fionread(&self.pty.slave)?;
        let mut buf = vec![0u8; usize::try_from(n).unwrap_or(usize::MAX).min(4096)];
        if buf.is_empty() {
            return Ok(buf);
        }
        let got = rustix::io::read(&self.pty.slave, &mut buf[..])?;
        buf.truncate(got);
        let _ = rustix::termios::tcflush(&self.pty.slave, QueueSelector::IFlush);
        Ok(buf)
    }
}

impl Drop for CallerTerminal {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// Reads `from` until a line `last` has arrived, it fails, or `deadline`.
fn read_until(from: BorrowedFd<'_>, last: &str, deadline: Instant) -> Vec<u8> {
    let mut got = Vec::new();
    read_into(from, &mut got, deadline, |g| String::from_utf8_lossy(g).lines().any(|l| l.trim() == last));
    got
}

/// Appends what `from` gives to `got` until `done(got)`, the other end
/// closes or fails, or `deadline`: the one poll-and-read loop of the kit's
/// terminal claims.
pub(crate) fn read_into(from: BorrowedFd<'_>, got: &mut Vec<u8>, deadline: Instant, done: impl Fn(&[u8]) -> bool) {
    let mut buf = [0u8; 4096];
    while !done(got) {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
        let timeout = Timespec::try_from(left).ok();
        let mut fds = [PollFd::from_borrowed_fd(from, PollFlags::IN)];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
        match rustix::io::read(from, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// What the kit knows of itself and its terminal, to compare the box with.
#[derive(Debug, Clone, Default)]
struct Host {
    boot: String,
    pid_ns: String,
    /// The kit's own session and controlling terminal (0: none).
    session: Option<(u64, u64)>,
    /// The kit's terminal as a controlling terminal is numbered.
    terminal: u64,
}

impl Host {
    fn now(term: &CallerTerminal) -> Host {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let rdev = rustix::fs::fstat(&term.pty.slave).map(|s| s.st_rdev).unwrap_or_default();
        Host {
            boot: host_boot_id(),
            pid_ns: std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default(),
            session: session_of(&stat),
            terminal: tty_nr(rdev),
        }
    }
}

/// Kernel: a box handed a descriptor of the caller's terminal cannot push
/// input into it (see the module's opening).
pub(super) async fn no_terminal_injection(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let term = match CallerTerminal::open() {
        Ok(t) => t,
        Err(why) => return Ok((Status::Skipped, format!("the kit cannot make a caller's terminal: {why}"))),
    };
    let host = Host::now(&term);
    let text = format!("tinybox-kit-{}\n", nonce());
    let clone = || term.pty.slave.try_clone().map_err(io("share the terminal"));
    let fds = StdioFds { stdin: clone()?, stdout: clone()?, stderr: clone()? };
    let argv = ["sh", "-c", SCRIPT, "sh", PYTHON, PERL, text.trim_end()];
    let request = ExecRequest::new(argv);
    let ran = kit.tb.exec(id, request, fds, Target::Workspace, tokio::time::sleep(GUARD)).await;
    let injected = term.unread_input().map_err(io("read the terminal's input queue"))?;
    let master = term.pty.master.try_clone().map_err(io("read the terminal"))?;
    let said = tokio::task::spawn_blocking(move || read_until(master.as_fd(), "done", Instant::now() + LINE_WAIT))
        .await
        .unwrap_or_default();
    drop(term);
    let ran = ran?;
    let said = String::from_utf8_lossy(&said).replace('\r', "");
    let mut verdict = terminal_verdict(&said, &injected, &host);
    if ran.cancelled {
        verdict.1 += &format!(" (the kit stopped the probe after {} s)", GUARD.as_secs());
    }
    Ok(verdict)
}

/// The verdict from what the box printed on the terminal, the bytes left in
/// the terminal's input queue, and the host's own facts.
fn terminal_verdict(said: &str, injected: &[u8], host: &Host) -> Verdict {
    if !injected.is_empty() {
        return (
            Status::Fail,
            format!(
                "{} byte(s) the box pushed with TIOCSTI wait in the caller's terminal's input ({:?}): the caller would read them as typed",
                injected.len(),
                String::from_utf8_lossy(injected)
            ),
        );
    }
    if !said.lines().any(|l| l.trim() == "done") {
        let shown: Vec<&str> = said.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        return (Status::Fail, format!("the probe did not finish: {}", shown.join(" | ")));
    }
    let held: Vec<String> =
        (0..3).filter(|n| field(said, &format!("tty{n}")) == Some("yes")).map(|n| n.to_string()).collect();
    let box_session = field(said, "stat").and_then(session_of);
    let same_kernel = !own_kernel(said, &host.boot);
    if same_kernel {
        if let Some((sid, ctty)) = box_session {
            if ctty != 0 && ctty == host.terminal {
                return (Status::Fail, "the box took the caller's terminal as its controlling terminal".into());
            }
            if let Some((kit_sid, kit_ctty)) = host.session {
                if kit_ctty != 0 && ctty == kit_ctty {
                    return (
                        Status::Fail,
                        format!("the box's controlling terminal is the caller's own (device {kit_ctty}): its /dev/tty"),
                    );
                }
                let same_ns = field(said, "pidns").is_some_and(|ns| !ns.is_empty() && ns == host.pid_ns);
                if same_ns && sid == kit_sid {
                    return (
                        Status::Fail,
                        format!(
                            "the box runs in the caller's own session ({sid}): a terminal the caller's session controls is its /dev/tty, where TIOCSTI needs no privilege"
                        ),
                    );
                }
            }
        }
        if let Some(adopt) = field(said, "adopt").filter(|a| a.starts_with("ok")) {
            return (
                Status::Fail,
                format!("the box took the caller's terminal from the caller's session as its own ({adopt})"),
            );
        }
    }
    let tried: Vec<String> = said
        .lines()
        .filter_map(|l| l.strip_prefix("sti").and_then(|r| r.split_once('=')))
        .map(|(fd, r)| format!("fd {fd}: {}", r.trim()))
        .collect();
    if let Some(ok) = tried.iter().find(|t| t.ends_with(": ok")) {
        return (
            Status::Fail,
            format!("TIOCSTI on the caller's terminal succeeded in the box ({ok}), though nothing was left to read"),
        );
    }
    let fds: Vec<String> = (0..3)
        .map(|n| format!("{n} {}", field(said, &format!("fd{n}")).filter(|f| !f.is_empty()).unwrap_or("?")))
        .collect();
    let devtty = field(said, "devtty") == Some("opened");
    if held.is_empty() {
        let tty_note =
            if devtty { "; its /dev/tty opens, a terminal of its own" } else { ", and /dev/tty does not open" };
        return (
            Status::Pass,
            format!(
                "the box never holds a terminal descriptor: its stdin, stdout and stderr ({}) are not terminals{tty_note}",
                fds.join(", ")
            ),
        );
    }
    if !same_kernel {
        return (
            Status::Pass,
            format!(
                "descriptors {} in the box are terminals of its own kernel's, not the caller's; nothing reached the caller's terminal",
                held.join(", ")
            ),
        );
    }
    let tool = field(said, "tool").unwrap_or("none");
    if tool == "none" {
        return (
            Status::Skipped,
            format!(
                "the box holds the caller's terminal (descriptors {}) but has neither python3 nor perl to try TIOCSTI with",
                held.join(", ")
            ),
        );
    }
    if tried.len() < held.len() {
        return (
            Status::Skipped,
            format!(
                "the box holds the caller's terminal (descriptors {}) but its {tool} probe did not report: {}",
                held.join(", "),
                said.lines().filter(|l| !l.contains('=')).collect::<Vec<_>>().join(" | ")
            ),
        );
    }
    let adopt = field(said, "adopt").unwrap_or("not tried");
    (
        Status::Pass,
        format!(
            "the box holds the caller's terminal (descriptors {}), yet TIOCSTI from {tool} was refused ({}) and so was taking it as its controlling terminal ({adopt}); nothing reached its input",
            held.join(", "),
            tried.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host { boot: "h".into(), pid_ns: "pid:[1]".into(), session: Some((100, 0)), terminal: 34816 }
    }

    const PIPES: &str = "tty0=no\nfd0=pipe:[5]\ntty1=no\nfd1=pipe:[6]\ntty2=no\nfd2=pipe:[7]\ndevtty=none\n";

    #[test]
    fn the_kernels_stat_line_gives_session_and_terminal() {
        assert_eq!(session_of("42 (a b) c) S 1 42 42 34816 42 4194560"), Some((42, 34816)));
        assert_eq!(session_of("garbage"), None);
        // /dev/pts/0 is major 136.
        assert_eq!(tty_nr(rustix::fs::makedev(136, 0)), 34816);
        assert_eq!(tty_nr(rustix::fs::makedev(136, 300)), (300 & 0xff) | (136 << 8) | ((300 & !0xff) << 12));
    }

    #[test]
    fn bytes_in_the_input_queue_fail_whatever_the_box_said() {
        let said = format!("{PIPES}stat=9 (sh) S 1 9 9 0\nboot=g\ntool=none\ndone\n");
        let (s, d) = terminal_verdict(&said, b"x", &host());
        assert_eq!(s, Status::Fail, "{d}");
        assert_eq!(terminal_verdict(&said, b"", &host()).0, Status::Pass);
        assert_eq!(terminal_verdict("tty0=yes\n", b"", &host()).0, Status::Fail, "an unfinished probe");
    }

    #[test]
    fn a_box_without_a_terminal_passes_without_a_tool() {
        let said = format!("{PIPES}stat=9 (sh) S 1 9 9 0\npidns=pid:[2]\nboot=h\ntool=none\ndone\n");
        let (s, d) = terminal_verdict(&said, b"", &host());
        assert_eq!(s, Status::Pass, "{d}");
        assert!(d.contains("never holds a terminal") && d.contains("pipe:[5]"), "{d}");
    }

    #[test]
    fn a_box_holding_the_terminal_needs_a_tool_and_every_refusal() {
        let held = "tty0=yes\nfd0=/dev/pts/0\ntty1=yes\ntty2=no\nstat=9 (sh) S 1 9 9 0\npidns=pid:[2]\nboot=h\n";
        let s = |rest: &str| terminal_verdict(&format!("{held}{rest}done\n"), b"", &host()).0;
        assert_eq!(s("tool=none\n"), Status::Skipped);
        assert_eq!(s("tool=perl\nsti0=refused:EPERM\n"), Status::Skipped, "fd 1 unreported");
        assert_eq!(s("tool=perl\nsti0=refused:x\nsti1=refused:x\nadopt=refused:x\n"), Status::Pass);
        assert_eq!(s("tool=perl\nsti0=ok\nsti1=refused:x\nadopt=refused:x\n"), Status::Fail);
        assert_eq!(s("tool=perl\nsti0=refused:x\nsti1=refused:x\nadopt=ok:refused:x\n"), Status::Fail);
    }

    #[test]
    fn the_callers_session_or_terminal_fails_on_the_hosts_kernel_only() {
        let v = |stat: &str, ns: &str, boot: &str| {
            let said = format!("{PIPES}stat={stat}\npidns={ns}\nboot={boot}\ntool=none\ndone\n");
            terminal_verdict(&said, b"", &host()).0
        };
        assert_eq!(v("9 (sh) S 1 9 100 0", "pid:[1]", "h"), Status::Fail, "the caller's session");
        assert_eq!(v("9 (sh) S 1 9 100 0", "pid:[2]", "h"), Status::Pass, "another pid namespace's numbers");
        assert_eq!(v("9 (sh) S 1 9 9 34816", "pid:[2]", "h"), Status::Fail, "the kit's terminal as its own");
        assert_eq!(v("9 (sh) S 1 9 9 34816", "pid:[2]", "g"), Status::Pass, "a guest's own terminal");
        let mut with_ctty = host();
        with_ctty.session = Some((100, 1025));
        let said = format!("{PIPES}stat=9 (sh) S 1 9 9 1025\npidns=pid:[2]\nboot=h\ntool=none\ndone\n");
        assert_eq!(terminal_verdict(&said, b"", &with_ctty).0, Status::Fail, "the caller's own terminal");
    }
}
