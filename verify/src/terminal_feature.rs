//! `feature.terminal`: a sandbox declaring the terminal feature runs a
//! command asked for with `tty` on a terminal it makes, the way
//! `tinybox exec -t` asks. The kit hands the engine's exec plain pipes and
//! a window size, as the CLI does, and judges from outside what the command
//! prints: descriptors 0, 1 and 2 are terminals, `stty size` is the size
//! asked for, a resize sent through the engine (`exec.resize`) reaches the
//! command, the exit status is the command's own, and the terminal is not
//! one the kit itself holds.

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use tinybox_core::model::{BoxId, ExecRequest};
use tinybox_core::{Error, Result, Target};
use tinybox_sdk::model::TtySize;
use tinybox_sdk::stdio::StdioFds;

use super::levels::{field, host_boot_id, own_kernel};
use super::{GUARD, Kit, Status};

type Verdict = (Status, String);

/// The size the command starts at, and the one the kit resizes it to.
const FIRST: TtySize = TtySize { rows: 31, cols: 97 };
const SECOND: TtySize = TtySize { rows: 43, cols: 121 };

/// The status the command ends with, which the exec must report.
const EXIT: i32 = 7;

/// How long the kit waits for each thing the command is to print.
const LINE_WAIT: Duration = Duration::from_secs(20);

/// Prints what the verdict needs, then `size=` for every line read until
/// `end`, then leaves with [`EXIT`].
const SCRIPT: &str = r#"for n in 0 1 2; do if [ -t $n ]; then echo "tty$n=yes"; else echo "tty$n=no"; fi; done
echo "stat=$(cat /proc/$$/stat 2>/dev/null)"
echo "boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
echo "dev=$(stat -L -c '%d %t %T' /proc/self/fd/0 2>/dev/null)"
echo ready
while read -r line; do
  [ "$line" = end ] && break
  echo "size=$(stty size 2>&1)"
done
exit 7"#;

fn io(what: &str) -> impl FnOnce(io::Error) -> Error + '_ {
    move |e| Error::io(format!("cannot {what} for the terminal feature probe"), e)
}

/// A terminal the kit holds: the filesystem it lives on and its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Device {
    dev: u64,
    rdev: u64,
}

/// The kit's own terminals: whichever of its descriptors 0-2 are ones.
fn kit_terminals() -> Vec<Device> {
    [io::stdin().as_fd(), io::stdout().as_fd(), io::stderr().as_fd()]
        .into_iter()
        .filter(|fd| rustix::termios::isatty(fd))
        .filter_map(|fd| rustix::fs::fstat(fd).ok())
        .map(|s| Device { dev: s.st_dev, rdev: s.st_rdev })
        .collect()
}

/// The `dev=` line: `stat -c '%d %t %T'` (device decimal, major and minor hex).
fn device_of(line: &str) -> Option<Device> {
    let mut w = line.split_whitespace();
    let dev = w.next()?.parse().ok()?;
    let major = u32::from_str_radix(w.next()?, 16).ok()?;
    let minor = u32::from_str_radix(w.next()?, 16).ok()?;
    Some(Device { dev, rdev: rustix::fs::makedev(major, minor) })
}

/// Reads `from` into `got` (carriage returns dropped) until `done(got)`,
/// the pipe ends, or `deadline`.
fn read_while(from: BorrowedFd<'_>, got: &mut String, deadline: Instant, done: impl Fn(&str) -> bool) {
    let before = std::mem::take(got);
    let text = |bytes: &[u8]| format!("{before}{}", String::from_utf8_lossy(bytes).replace('\r', ""));
    let mut bytes = Vec::new();
    super::terminal::read_into(from, &mut bytes, deadline, |b| done(&text(b)));
    *got = text(&bytes);
}

/// Whether some line of `text` starts with `want`, not followed by a digit
/// (a terminal's echo of the next input may share the line).
fn says(text: &str, want: &str) -> bool {
    text.lines()
        .any(|l| l.trim().strip_prefix(want).is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit())))
}

fn size_text(size: TtySize) -> String {
    format!("{} {}", size.rows, size.cols)
}

/// Sends lines until a `size=` answer says `want` or `deadline`.
fn ask_until(output: BorrowedFd<'_>, input: &mut std::io::PipeWriter, got: &mut String, want: &str, deadline: Instant) {
    let wanted = format!("size={want}");
    let mut asked = got.lines().filter(|l| l.starts_with("size=")).count();
    while !says(got, &wanted) && Instant::now() < deadline {
        if input.write_all(b"size?\n").is_err() {
            break;
        }
        asked += 1;
        // Each line sent is answered by one `size=` line.
        let answered = |t: &str| t.lines().filter(|l| l.starts_with("size=")).count() >= asked;
        read_while(output, got, deadline, |t| answered(t) || says(t, &wanted));
    }
}

/// The command's side of the dialogue: wait for `ready`; send lines until
/// the size asked for shows (docker's client sets it just after the
/// command starts); ask for the resize and send lines until the new size
/// shows (the resize and the line travel separately, so one line may
/// overtake it); then `end`.
fn converse(
    output: OwnedFd,
    mut input: std::io::PipeWriter,
    resize: tokio::sync::mpsc::UnboundedSender<TtySize>,
) -> String {
    let mut got = String::new();
    let deadline = Instant::now() + LINE_WAIT;
    let ready = |text: &str| text.lines().any(|l| l.trim() == "ready");
    read_while(output.as_fd(), &mut got, deadline, ready);
    if !ready(&got) {
        return got;
    }
    ask_until(output.as_fd(), &mut input, &mut got, &size_text(FIRST), deadline);
    if says(&got, &format!("size={}", size_text(FIRST))) {
        let _ = resize.send(SECOND);
        ask_until(output.as_fd(), &mut input, &mut got, &size_text(SECOND), Instant::now() + LINE_WAIT);
    }
    let _ = input.write_all(b"end\n");
    drop(input);
    read_while(output.as_fd(), &mut got, Instant::now() + LINE_WAIT, |_| false);
    got
}

pub(super) async fn terminal(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let (stdin, input) = std::io::pipe().map_err(io("make a pipe"))?;
    let (output, stdout) = std::io::pipe().map_err(io("make a pipe"))?;
    let stdout = OwnedFd::from(stdout);
    let stderr = stdout.try_clone().map_err(io("share a pipe"))?;
    let fds = StdioFds { stdin: OwnedFd::from(stdin), stdout, stderr };
    let mut request = ExecRequest::new(["sh", "-c", SCRIPT]);
    request.tty = Some(FIRST);
    let (resize, resizes) = tokio::sync::mpsc::unbounded_channel();
    let dialogue = tokio::task::spawn_blocking(move || converse(OwnedFd::from(output), input, resize));
    let guard = tokio::time::sleep(GUARD);
    let ran = kit.tb.exec_resizable(id, request, fds, Target::Workspace, guard, Some(resizes)).await;
    let said = dialogue.await.unwrap_or_default();
    let ran = ran?;
    let mut verdict = terminal_verdict(&said, ran.status.code, &kit_terminals(), &host_boot_id());
    if ran.cancelled {
        verdict.1 += &format!(" (the kit stopped the probe after {} s)", GUARD.as_secs());
    }
    Ok(verdict)
}

/// The verdict from what the command printed, its exit code, the kit's own
/// terminals and the host's boot id.
fn terminal_verdict(said: &str, code: Option<i32>, kit: &[Device], boot: &str) -> Verdict {
    let shown = || said.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
    let not_tty: Vec<String> =
        (0..3).filter(|n| field(said, &format!("tty{n}")) != Some("yes")).map(|n| n.to_string()).collect();
    if field(said, "tty0").is_none() {
        return (Status::Fail, format!("the command did not report its descriptors: {}", shown()));
    }
    if !not_tty.is_empty() {
        return (
            Status::Fail,
            format!(
                "asked for a terminal, the command's descriptors {} are not terminals: the driver ran it without one",
                not_tty.join(", ")
            ),
        );
    }
    let first = size_text(FIRST);
    let second = size_text(SECOND);
    let sizes: Vec<&str> = said.lines().filter_map(|l| l.trim().strip_prefix("size=")).collect();
    let Some(at_first) = sizes.iter().position(|s| says(s, &first)) else {
        return (Status::Fail, format!("`stty size` in the box said {sizes:?}, never the {first} asked for"));
    };
    if !sizes[at_first..].iter().any(|s| says(s, &second)) {
        return (
            Status::Fail,
            format!(
                "after exec.resize to {second}, `stty size` in the box said {:?}: the resize never reached it",
                &sizes[at_first..]
            ),
        );
    }
    let settled = match at_first {
        0 => String::new(),
        _ => format!(" (first {:?}, until the size was set)", sizes[0]),
    };
    if code != Some(EXIT) {
        return (Status::Fail, format!("the command left with {EXIT}, the exec reported {code:?}"));
    }
    let same_kernel = !own_kernel(said, boot);
    let device = field(said, "dev").and_then(device_of);
    let ctty = field(said, "stat").and_then(super::terminal::session_of).map(|(_, t)| t).unwrap_or(0);
    if same_kernel {
        if let Some(d) = device.filter(|d| kit.contains(d)) {
            return (
                Status::Fail,
                format!("the box's terminal is the kit's own (device {}, filesystem {})", d.rdev, d.dev),
            );
        }
        if ctty != 0 && kit.iter().any(|d| super::terminal::tty_nr(d.rdev) == ctty) {
            return (Status::Fail, format!("the box's controlling terminal is the kit's own (device {ctty})"));
        }
    }
    let whose = match (same_kernel, device, kit.is_empty()) {
        (false, _, _) => "a terminal of the box's own kernel".to_owned(),
        (true, Some(d), true) => format!("device {}:{}, and the kit holds no terminal", d.dev, d.rdev),
        (true, Some(d), false) => format!("device {}:{}, none of the kit's terminals", d.dev, d.rdev),
        (true, None, _) => {
            "a terminal the box could not name (no `stat -c`), and its controlling terminal is not the kit's".into()
        }
    };
    (
        Status::Pass,
        format!(
            "descriptors 0, 1 and 2 are a terminal ({whose}); `stty size` said {first}{settled}, then {second} after exec.resize; the exec reported the command's status {EXIT}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "tty0=yes\ntty1=yes\ntty2=yes\nstat=9 (sh) S 1 9 9 34817\nboot=h\ndev=23 88 2\nready\nsize?\nsize=31 97\nsize?\nsize=43 121\nend\n";

    fn kit_pts0() -> Vec<Device> {
        vec![Device { dev: 23, rdev: rustix::fs::makedev(136, 0) }]
    }

    #[test]
    fn a_real_terminal_with_the_sizes_and_status_passes() {
        let (s, d) = terminal_verdict(GOOD, Some(EXIT), &kit_pts0(), "h");
        assert_eq!(s, Status::Pass, "{d}");
        assert!(d.contains("43 121"), "{d}");
        assert_eq!(device_of("23 88 2"), Some(Device { dev: 23, rdev: rustix::fs::makedev(0x88, 2) }));
        assert_eq!(device_of(""), None);
        let glued = GOOD.replace("size=43 121\nend", "size=43 121end");
        assert_eq!(terminal_verdict(&glued, Some(EXIT), &[], "h").0, Status::Pass, "an echo on the same line");
        let more = GOOD.replace("size=43 121", "size=43 1210");
        assert_eq!(terminal_verdict(&more, Some(EXIT), &[], "h").0, Status::Fail, "another size");
        let late = GOOD.replace("ready\n", "ready\nsize?\nsize=0 0\n");
        let (s, d) = terminal_verdict(&late, Some(EXIT), &[], "h");
        assert_eq!(s, Status::Pass, "{d}");
        assert!(d.contains("until the size was set"), "{d}");
        let before = GOOD.replace("size=31 97\nsize?\nsize=43 121", "size=43 121\nsize?\nsize=31 97");
        assert_eq!(terminal_verdict(&before, Some(EXIT), &[], "h").0, Status::Fail, "the new size only before");
    }

    #[test]
    fn pipes_a_wrong_size_a_lost_resize_or_status_fail() {
        let v = |said: &str, code| terminal_verdict(said, code, &[], "h").0;
        assert_eq!(v(&GOOD.replace("tty1=yes", "tty1=no"), Some(EXIT)), Status::Fail, "stdout not a terminal");
        assert_eq!(v(&GOOD.replace("size=31 97", "size=24 80"), Some(EXIT)), Status::Fail, "the size asked for");
        assert_eq!(v(&GOOD.replace("size=43 121", "size=31 97"), Some(EXIT)), Status::Fail, "the resize");
        assert_eq!(v(GOOD, Some(0)), Status::Fail, "the command's status");
        assert_eq!(v("", Some(EXIT)), Status::Fail, "nothing said");
    }

    #[test]
    fn the_kits_own_terminal_fails_on_the_same_kernel_only() {
        let mine = GOOD.replace("dev=23 88 2", "dev=23 88 0");
        assert_eq!(terminal_verdict(&mine, Some(EXIT), &kit_pts0(), "h").0, Status::Fail);
        assert_eq!(terminal_verdict(&mine, Some(EXIT), &kit_pts0(), "g").0, Status::Pass, "a guest's own");
        let other_fs = GOOD.replace("dev=23 88 2", "dev=24 88 0");
        assert_eq!(terminal_verdict(&other_fs, Some(EXIT), &kit_pts0(), "h").0, Status::Pass, "another devpts");
        let ctty = GOOD.replace("dev=23 88 2", "dev=").replace("34817", "34816");
        assert_eq!(terminal_verdict(&ctty, Some(EXIT), &kit_pts0(), "h").0, Status::Fail, "the kit's as its ctty");
    }
}
