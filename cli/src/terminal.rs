//! The caller's terminal during `exec -t`: raw mode while the command
//! runs, restored however tinybox leaves (the guard's drop runs on return,
//! on error and on unwinding; SIGINT, SIGTERM and SIGHUP cancel the command
//! and so reach that drop), and the window size, read at start and on
//! every SIGWINCH. The box never gets this terminal: it gets a terminal made
//! for it where it runs, and the bytes typed here travel to it through the
//! same pipes as any input.

use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, BorrowedFd};

use rustix::termios::{OptionalActions, Termios};
use tinybox_core::model::TtySize;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// The size to use when a terminal reports none (0 rows or columns, as a
/// freshly made pty does).
const FALLBACK: TtySize = TtySize { rows: 24, cols: 80 };

/// The caller's terminal: stdin, which `-t` requires to be one.
pub struct Terminal {
    stdin: io::Stdin,
}

impl Terminal {
    /// The terminal on stdin; one line saying what to do when there is none.
    pub fn on_stdin() -> io::Result<Terminal> {
        let stdin = io::stdin();
        if !stdin.is_terminal() {
            return Err(io::Error::other(
                "stdin is not a terminal; run `tinybox exec -t` from a terminal, or without -t to pipe input",
            ));
        }
        Ok(Terminal { stdin })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.stdin.as_fd()
    }

    /// The window size now.
    pub fn size(&self) -> TtySize {
        size_of(self.fd())
    }

    /// Puts the terminal in raw mode until the guard is dropped: every byte
    /// typed (Ctrl-C, Ctrl-Z included) goes to the box's terminal, whose own
    /// line discipline gives them their meaning there.
    pub fn raw(&self) -> io::Result<RawMode<'_>> {
        let saved = rustix::termios::tcgetattr(self.fd())?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(self.fd(), OptionalActions::Now, &raw)?;
        Ok(RawMode { fd: self.fd(), saved })
    }

    /// Every new window size, from SIGWINCH, until the receiver is dropped.
    pub fn resizes(&self) -> io::Result<UnboundedReceiver<TtySize>> {
        let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
        let (tx, rx) = unbounded_channel();
        // Borrowed, never a copy: closing a copy of a terminal blocks while
        // another thread reads it (the input pump does until tinybox exits).
        tokio::spawn(async move {
            while winch.recv().await.is_some() {
                if tx.send(size_of(io::stdin().as_fd())).is_err() {
                    break;
                }
            }
        });
        Ok(rx)
    }
}

fn size_of(fd: BorrowedFd<'_>) -> TtySize {
    match rustix::termios::tcgetwinsize(fd) {
        Ok(ws) if ws.ws_row > 0 && ws.ws_col > 0 => TtySize { rows: ws.ws_row, cols: ws.ws_col },
        _ => FALLBACK,
    }
}

/// The terminal's modes before raw mode, put back on drop.
pub struct RawMode<'a> {
    fd: BorrowedFd<'a>,
    saved: Termios,
}

impl Drop for RawMode<'_> {
    fn drop(&mut self) {
        // TCSADRAIN: what the command printed is shown before the modes change back.
        let _ = rustix::termios::tcsetattr(self.fd, OptionalActions::Drain, &self.saved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
        use rustix::pty::OpenptFlags;
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = rustix::pty::openpt(flags).unwrap();
        rustix::pty::grantpt(&master).unwrap();
        rustix::pty::unlockpt(&master).unwrap();
        let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags).unwrap();
        (master, slave)
    }

    #[test]
    fn raw_mode_is_undone_on_drop() {
        let (_master, slave) = pty();
        let before = rustix::termios::tcgetattr(&slave).unwrap();
        {
            let guard = RawMode { fd: slave.as_fd(), saved: before.clone() };
            let mut raw = before.clone();
            raw.make_raw();
            rustix::termios::tcsetattr(&slave, OptionalActions::Now, &raw).unwrap();
            let during = rustix::termios::tcgetattr(&slave).unwrap();
            assert!(!during.local_modes.contains(rustix::termios::LocalModes::ICANON));
            drop(guard);
        }
        let after = rustix::termios::tcgetattr(&slave).unwrap();
        assert_eq!(after.local_modes, before.local_modes);
        assert_eq!(after.input_modes, before.input_modes);
        assert_eq!(after.output_modes, before.output_modes);
    }

    #[test]
    fn a_terminal_without_a_size_gets_the_fallback() {
        let (_master, slave) = pty();
        assert_eq!(size_of(slave.as_fd()), FALLBACK);
        let ws = rustix::termios::Winsize { ws_row: 50, ws_col: 132, ws_xpixel: 0, ws_ypixel: 0 };
        rustix::termios::tcsetwinsize(&slave, ws).unwrap();
        assert_eq!(size_of(slave.as_fd()), TtySize { rows: 50, cols: 132 });
    }
}
