//! The descriptors a command gets, and the pumps behind them. A box is
//! given bytes, never a handle it could reopen: /proc/self/fd/N on a file,
//! a terminal or a device opens the caller's own file again, with the
//! box's permissions and none of the caller's intentions (truncate an
//! append-only log, read what it held, write a stdin file, read keystrokes).
//! So the caller's descriptor is handed over as it is only when it is a
//! pipe or a socket (reopening one reaches the same stream, nothing more)
//! or /dev/null; anything else is replaced by a pipe, and a thread here
//! moves the bytes between that pipe and the caller's descriptor, with
//! splice (through a relay pipe, see [`Mover`]) where both ends allow it.
//! A terminal's input is forwarded only with `-i`; without it a terminal
//! stdin becomes /dev/null.

use std::io::{self, IsTerminal, PipeReader, PipeWriter};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::FileType;
use rustix::io::Errno;
use rustix::pipe::SpliceFlags;
use tinybox_sdk::stdio::StdioFds;

/// How long output pumps wait for the end of their stream once the command
/// has ended: a process the command left behind may hold it open forever.
/// What the command itself wrote is in the pipe by then and always arrives.
pub const LINGER: Duration = Duration::from_secs(5);

/// The capacity our pipes ask for, and so the most one move carries: a
/// bigger pipe means fewer wake-ups and calls per byte (1 MiB is the most
/// an unprivileged process may ask for by default).
const PIPE_CAPACITY: usize = 1024 * 1024;

/// What a pipe holds when it could not be made bigger.
const DEFAULT_CAPACITY: usize = 64 * 1024;

/// The command's streams and the pumps that serve the ones replaced by
/// pipes.
pub fn command_stdio(interactive: bool) -> io::Result<(StdioFds, Pumps)> {
    let mut pumps = Pumps::new()?;
    let stdin = io::stdin();
    let stdin_fd: OwnedFd = if stdin.is_terminal() && !interactive {
        std::fs::File::open("/dev/null")?.into()
    } else if stdin.is_terminal() || !reopens_harmlessly(stdin.as_fd())? {
        pumps.input(stdin.as_fd().try_clone_to_owned()?)?
    } else {
        stdin.as_fd().try_clone_to_owned()?
    };

    let (stdout, stderr) = (io::stdout(), io::stderr());
    let stdout_fd = handed_over(stdout.as_fd(), "stdout", &mut pumps)?;
    let stderr_fd = if same_file(stdout.as_fd(), stderr.as_fd())? && !reopens_harmlessly(stderr.as_fd())? {
        // `> log 2>&1`: one pipe for both keeps the order they were written in.
        stdout_fd.try_clone()?
    } else {
        handed_over(stderr.as_fd(), "stderr", &mut pumps)?
    };
    Ok((StdioFds { stdin: stdin_fd, stdout: stdout_fd, stderr: stderr_fd }, pumps))
}

/// An output descriptor as the box gets it.
fn handed_over(fd: BorrowedFd<'_>, name: &'static str, pumps: &mut Pumps) -> io::Result<OwnedFd> {
    if reopens_harmlessly(fd)? { fd.try_clone_to_owned() } else { pumps.output(fd.try_clone_to_owned()?, name) }
}

/// Whether the box may hold `fd` itself: reopening a pipe or a socket
/// reaches the same stream and no file, and /dev/null holds nothing (every
/// box has its own).
fn reopens_harmlessly(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let stat = rustix::fs::fstat(fd)?;
    Ok(match FileType::from_raw_mode(stat.st_mode) {
        FileType::Fifo | FileType::Socket => true,
        FileType::CharacterDevice => rustix::fs::major(stat.st_rdev) == 1 && rustix::fs::minor(stat.st_rdev) == 3,
        _ => false,
    })
}

fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<bool> {
    let (a, b) = (rustix::fs::fstat(a)?, rustix::fs::fstat(b)?);
    Ok(a.st_dev == b.st_dev && a.st_ino == b.st_ino)
}

/// The threads moving bytes for streams replaced by pipes.
pub struct Pumps {
    /// Closed when the command has ended: output pumps then stop waiting
    /// for the end of their stream after [`LINGER`].
    ended_writer: Option<PipeWriter>,
    ended_reader: PipeReader,
    outputs: Vec<(JoinHandle<io::Result<()>>, &'static str)>,
}

impl Pumps {
    fn new() -> io::Result<Pumps> {
        let (ended_reader, ended_writer) = io::pipe()?;
        Ok(Pumps { ended_writer: Some(ended_writer), ended_reader, outputs: Vec::new() })
    }

    /// A pipe the box reads, fed from `source` until it ends. Nobody waits
    /// for this pump: a command need not read all its input, and the pump
    /// ends when the box's end closes.
    fn input(&mut self, source: OwnedFd) -> io::Result<OwnedFd> {
        let (reader, writer) = io::pipe()?;
        let _ = rustix::pipe::fcntl_setpipe_size(&writer, PIPE_CAPACITY);
        let capacity = rustix::pipe::fcntl_getpipe_size(&writer).unwrap_or(DEFAULT_CAPACITY);
        // Never splice from a terminal: splice holds the pipe's lock while it
        // waits for a keystroke, so the box's end of the pipe could not even
        // be closed until someone typed (tinybox hung after the command ended).
        let from_terminal = rustix::termios::isatty(&source);
        let mut mover = Mover::new(SpliceFlags::empty())?;
        mover.splice = !from_terminal;
        std::thread::spawn(move || {
            while let Ok(n) = mover.step(source.as_fd(), writer.as_fd(), capacity) {
                if n == 0 {
                    break;
                }
            }
            // Dropping `writer` is the command's end of file.
        });
        Ok(reader.into())
    }

    /// A pipe the box writes, drained into `dest`.
    fn output(&mut self, dest: OwnedFd, name: &'static str) -> io::Result<OwnedFd> {
        let (reader, writer) = io::pipe()?;
        let _ = rustix::pipe::fcntl_setpipe_size(&reader, PIPE_CAPACITY);
        rustix::io::ioctl_fionbio(&reader, true)?;
        let ended = self.ended_reader.try_clone()?;
        let pump = std::thread::spawn(move || drain(&reader, dest.as_fd(), &ended, LINGER));
        self.outputs.push((pump, name));
        Ok(writer.into())
    }

    /// Waits, once the command has ended, until every output pump has
    /// delivered what the command wrote; says so when one could not.
    pub async fn finish(mut self) {
        drop(self.ended_writer.take());
        for (pump, name) in self.outputs {
            let result = tokio::task::spawn_blocking(move || pump.join()).await;
            if let Ok(Ok(Err(e))) = result {
                use std::io::Write as _;
                let _ = writeln!(
                    io::stderr(),
                    "tinybox: cannot write the command's {name} where it was redirected: {e}; \
                     the rest of it was dropped (check that destination and run the command again)"
                );
            }
        }
    }
}

/// Moves bytes from `pipe` (non-blocking) to `dest` until the stream ends,
/// or, once `ended` is readable or closed, until `linger` has passed and
/// what the pipe held then has been delivered.
fn drain(pipe: &PipeReader, dest: BorrowedFd<'_>, ended: &PipeReader, linger: Duration) -> io::Result<()> {
    let mut mover = Mover::new(SpliceFlags::NONBLOCK)?;
    let capacity = rustix::pipe::fcntl_getpipe_size(pipe).unwrap_or(DEFAULT_CAPACITY);
    let mut deadline: Option<Instant> = None;
    // After the deadline: at most what a full pipe holds, so a writer that
    // never stops cannot keep us here.
    let mut budget: Option<usize> = None;
    loop {
        let max = budget.map_or(capacity, |b| b.min(capacity));
        if max == 0 {
            return Ok(());
        }
        match mover.step(pipe.as_fd(), dest, max) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                budget = budget.map(|b| b - n);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if readable_now(pipe.as_fd())? {
                    // The pipe has bytes, so it is `dest` that is not ready.
                    wait_for(dest, PollFlags::OUT, None)?;
                    continue;
                }
                if budget.is_some() {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
        let now = Instant::now();
        if let Some(at) = deadline
            && now >= at
        {
            budget = Some(capacity);
            continue;
        }
        let mut fds = vec![PollFd::new(pipe, PollFlags::IN)];
        if deadline.is_none() {
            fds.push(PollFd::new(ended, PollFlags::IN));
        }
        let timeout = deadline.map(|at| at.saturating_duration_since(now));
        poll(&mut fds, timeout)?;
        if deadline.is_none() && !fds[1].revents().is_empty() {
            deadline = Some(Instant::now() + linger);
        }
    }
}

/// Moves bytes with splice while both ends allow it, else through a
/// buffer. splice refuses some ends (an append-mode file, some devices)
/// with EINVAL before moving anything.
///
/// A splice between a pipe and a file holds the pipe's lock for the whole
/// file read or write, so the box could not use its pipe meanwhile: a box
/// writing into a file ran at 0.70x of `cat > file`, slower even than a
/// read and a write. So the bytes go through a relay pipe of our own: a
/// splice between two pipes only moves page references, holding the box's
/// pipe for an instant, and the file is read or written against the relay
/// while the box goes on (one copy, in the kernel).
struct Mover {
    flags: SpliceFlags,
    splice: bool,
    relay: Relay,
    buffer: Vec<u8>,
}

/// The pipe between the box's pipe and the caller's file, and how many
/// bytes it holds that have not reached their destination yet.
struct Relay {
    reader: PipeReader,
    writer: PipeWriter,
    capacity: usize,
    held: usize,
}

impl Mover {
    fn new(flags: SpliceFlags) -> io::Result<Mover> {
        let (reader, writer) = io::pipe()?;
        let _ = rustix::pipe::fcntl_setpipe_size(&writer, PIPE_CAPACITY);
        let capacity = rustix::pipe::fcntl_getpipe_size(&writer).unwrap_or(DEFAULT_CAPACITY);
        let relay = Relay { reader, writer, capacity, held: 0 };
        Ok(Mover { flags, splice: true, relay, buffer: Vec::new() })
    }

    /// Moves up to `max` bytes; 0 at the end of `from`, WouldBlock when a
    /// non-blocking `from` is empty. What it returns has reached `to`.
    fn step(&mut self, from: BorrowedFd<'_>, to: BorrowedFd<'_>, max: usize) -> io::Result<usize> {
        if self.splice {
            let max = max.min(self.relay.capacity);
            let n = loop {
                match rustix::pipe::splice(from, None, self.relay.writer.as_fd(), None, max, self.flags) {
                    Err(Errno::INTR) => continue,
                    Err(Errno::INVAL) => break None,
                    other => break Some(other?),
                }
            };
            if let Some(n) = n {
                self.relay.held += n;
                self.deliver(to)?;
                return Ok(n);
            }
            self.splice = false;
        }
        self.buffer.resize(max, 0);
        let n = loop {
            match rustix::io::read(from, &mut self.buffer[..max]) {
                Err(Errno::INTR) => continue,
                other => break other?,
            }
        };
        write_all(to, &self.buffer[..n])?;
        Ok(n)
    }

    /// Empties the relay into `to`: by splice, or, when `to` refuses it,
    /// through the buffer (the bytes are already out of the box's pipe).
    fn deliver(&mut self, to: BorrowedFd<'_>) -> io::Result<()> {
        let mut spliced = true;
        while self.relay.held > 0 {
            let held = self.relay.held;
            let moved = if spliced {
                match rustix::pipe::splice(self.relay.reader.as_fd(), None, to, None, held, SpliceFlags::empty()) {
                    Err(Errno::INVAL) => {
                        spliced = false;
                        continue;
                    }
                    Err(Errno::INTR) => continue,
                    Err(Errno::AGAIN) => {
                        wait_for(to, PollFlags::OUT, None)?;
                        continue;
                    }
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    other => other?,
                }
            } else {
                self.buffer.resize(held, 0);
                let n = match rustix::io::read(self.relay.reader.as_fd(), &mut self.buffer[..held]) {
                    Err(Errno::INTR) => continue,
                    other => other?,
                };
                write_all(to, &self.buffer[..n])?;
                n
            };
            self.relay.held -= moved;
        }
        if !spliced {
            // Every later step goes through the buffer: `to` refuses splice.
            self.splice = false;
        }
        Ok(())
    }
}

/// Writes all of `bytes` to `to`, waiting when a non-blocking `to` is full.
fn write_all(to: BorrowedFd<'_>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::write(to, bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(w) => bytes = &bytes[w..],
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => wait_for(to, PollFlags::OUT, None)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn readable_now(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    poll(&mut fds, Some(Duration::ZERO))?;
    Ok(!fds[0].revents().is_empty())
}

fn wait_for(fd: BorrowedFd<'_>, events: PollFlags, timeout: Option<Duration>) -> io::Result<()> {
    poll(&mut [PollFd::from_borrowed_fd(fd, events)], timeout)
}

fn poll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> io::Result<()> {
    let timeout = timeout.map(|d| Timespec { tv_sec: d.as_secs() as i64, tv_nsec: i64::from(d.subsec_nanos()) });
    loop {
        match rustix::event::poll(fds, timeout.as_ref()) {
            Err(Errno::INTR) => continue,
            other => return other.map(drop).map_err(Into::into),
        }
    }
}

#[cfg(test)]
mod tests;
