//! A pseudo-terminal made for one run (`RunParams::tty`), and the pump
//! between it and the descriptors core handed over. The command gets the
//! terminal's slave end and nothing else: never the caller's own terminal,
//! which the front end keeps and feeds through pipes, so nothing in a box
//! can reach the caller's terminal with an ioctl (TIOCSTI, say).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::thread::JoinHandle;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;

use crate::model::TtySize;

/// Where `setsid` (util-linux or busybox) is looked for: a run on a terminal
/// starts under `setsid -c`, which makes the command lead a new session
/// with the terminal (its stdin) as its controlling terminal. `pre_exec`
/// would do the same without a program, but it is `unsafe`, which this
/// workspace forbids.
const SETSID: [&str; 3] = ["/usr/bin/setsid", "/bin/setsid", "/usr/sbin/setsid"];

/// How long the output pump waits for more once the command has ended.
const LINGER: std::time::Duration = std::time::Duration::from_millis(200);

/// Both ends of a fresh pseudo-terminal.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

impl Pty {
    /// Opens a pseudo-terminal of window size `size`.
    pub fn open(size: TtySize) -> io::Result<Pty> {
        let master = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        let slave =
            rustix::pty::ioctl_tiocgptpeer(&master, OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
                .or_else(|_| {
                    let name = rustix::pty::ptsname(&master, Vec::new())?;
                    rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())
                })?;
        set_size(master.as_fd(), size)?;
        Ok(Pty { master, slave })
    }
}

/// Sets a terminal's window size; the kernel tells its foreground process
/// group (SIGWINCH) when the size changed.
pub fn set_size(master: BorrowedFd<'_>, size: TtySize) -> io::Result<()> {
    let winsize = Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 };
    Ok(rustix::termios::tcsetwinsize(master, winsize)?)
}

/// The `setsid` program to start a terminal run under.
pub fn setsid_program() -> io::Result<&'static str> {
    SETSID.into_iter().find(|p| Path::new(p).exists()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no setsid program on this host (looked in /usr/bin, /bin, /usr/sbin); install util-linux to run commands on a terminal",
        )
    })
}

/// The two threads moving bytes for one terminal run: the handed stdin to
/// the master, the master to the handed stdout.
pub struct Pump {
    /// Dropped when the command has ended: both threads then stop, the
    /// output one after delivering what the terminal still holds.
    ended: Option<OwnedFd>,
    output: JoinHandle<()>,
}

impl Pump {
    pub fn start(master: &OwnedFd, input: OwnedFd, output: OwnedFd) -> io::Result<Pump> {
        let (ended_reader, ended_writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (to_master, from_master) = (master.try_clone()?, master.try_clone()?);
        let ended_in = ended_reader.try_clone()?;
        std::thread::spawn(move || copy_until(input.as_fd(), to_master.as_fd(), ended_in.as_fd()));
        let output = std::thread::spawn(move || {
            copy_until(from_master.as_fd(), output.as_fd(), ended_reader.as_fd());
            // What the command wrote just before it ended may still be on its
            // way through the terminal: read until the terminal says it has
            // no writer left (EIO, hang-up) or goes quiet for LINGER (a
            // process the command left behind still holds it).
            while readable_within(from_master.as_fd(), LINGER) {
                if !copy_once(from_master.as_fd(), output.as_fd()) {
                    break;
                }
            }
        });
        Ok(Pump { ended: Some(ended_writer), output })
    }

    /// The command has ended: delivers its last output and stops both threads.
    pub async fn finish(mut self) {
        drop(self.ended.take());
        let output = self.output;
        let _ = tokio::task::spawn_blocking(move || output.join()).await;
    }
}

/// Copies `from` to `to` until `from` ends or fails, or `ended` becomes
/// readable or closed.
fn copy_until(from: BorrowedFd<'_>, to: BorrowedFd<'_>, ended: BorrowedFd<'_>) {
    loop {
        let mut fds = [PollFd::from_borrowed_fd(from, PollFlags::IN), PollFd::from_borrowed_fd(ended, PollFlags::IN)];
        match rustix::event::poll(&mut fds, None) {
            Err(Errno::INTR) => continue,
            Err(_) => return,
            Ok(_) => {}
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        if !fds[0].revents().is_empty() && !copy_once(from, to) {
            return;
        }
    }
}

/// Moves what one read returns; false at the end of `from` or on an error
/// (a master whose every slave is closed reads EIO).
fn copy_once(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> bool {
    let mut buffer = [0u8; 16 * 1024];
    let n = loop {
        match rustix::io::read(from, &mut buffer) {
            Err(Errno::INTR) => continue,
            Ok(0) | Err(_) => return false,
            Ok(n) => break n,
        }
    };
    let mut rest = &buffer[..n];
    while !rest.is_empty() {
        match rustix::io::write(to, rest) {
            Ok(0) => return false,
            Ok(w) => rest = &rest[w..],
            Err(Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Whether `fd` has bytes to read within `within`.
fn readable_within(fd: BorrowedFd<'_>, within: std::time::Duration) -> bool {
    let timeout = Timespec { tv_sec: within.as_secs() as i64, tv_nsec: i64::from(within.subsec_nanos()) };
    loop {
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Err(Errno::INTR) => continue,
            Ok(n) => return n > 0 && fds[0].revents().contains(PollFlags::IN),
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pty_has_the_size_asked_for_and_a_resize_changes_it() {
        let pty = Pty::open(TtySize { rows: 33, cols: 101 }).unwrap();
        let ws = rustix::termios::tcgetwinsize(&pty.slave).unwrap();
        assert_eq!((ws.ws_row, ws.ws_col), (33, 101));
        set_size(pty.master.as_fd(), TtySize { rows: 20, cols: 70 }).unwrap();
        let ws = rustix::termios::tcgetwinsize(&pty.slave).unwrap();
        assert_eq!((ws.ws_row, ws.ws_col), (20, 70));
        assert!(rustix::termios::isatty(&pty.slave));
    }
}
