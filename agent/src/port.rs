//! One end of the agent's wire, over a non-blocking descriptor (a
//! virtio-serial port, or a connection to the agent's socket), and the
//! pumps that carry a command's streams onto it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
use tinybox_agent::wire::{self, Kind};

pub fn log(msg: std::fmt::Arguments<'_>) {
    eprintln!("tinybox-agent: {msg}");
}

pub fn set_nonblocking(file: &File, on: bool) -> io::Result<()> {
    let flags = fcntl_getfl(file)?;
    fcntl_setfl(file, if on { flags | OFlags::NONBLOCK } else { flags - OFlags::NONBLOCK })?;
    Ok(())
}

/// Waits until `file` is ready for `events`; whether the host has gone.
pub fn wait_for(file: &File, events: PollFlags) -> io::Result<bool> {
    loop {
        let mut fds = [PollFd::new(file, events)];
        match poll(&mut fds, None) {
            Ok(_) => {
                let r = fds[0].revents();
                return Ok(r.contains(PollFlags::HUP) && !r.intersects(events));
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// One port's end of a session, over a non-blocking descriptor: reads
/// wait for data and end (0) when the host disconnects; writes wait for
/// room and fail when the host has gone.
#[derive(Clone)]
pub struct Port {
    pub file: Arc<File>,
    /// One frame at a time from the command's two output streams.
    pub writing: Arc<Mutex<()>>,
}

impl Read for &Port {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match (&*self.file).read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_for(&self.file, PollFlags::IN)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

impl Port {
    pub fn send(&self, kind: Kind, payload: &[u8]) -> io::Result<()> {
        self.send_raw(&wire::encode(kind, payload))
    }

    /// Writes one whole frame, none other interleaved.
    pub fn send_raw(&self, frame: &[u8]) -> io::Result<()> {
        let _one = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let mut rest = frame;
        while !rest.is_empty() {
            match (&*self.file).write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if wait_for(&self.file, PollFlags::OUT)? {
                        return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the host went away"));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// What becomes of the processes a command leaves behind when it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftovers {
    /// Killed with the command (a microVM's: its box is the VM's life).
    Kill,
    /// Left running (a namespace image box: a background server started by
    /// one exec is there for the next). What the command itself wrote is
    /// all sent; what they write later is read and dropped.
    Keep,
}

/// Sends what `r` yields as `kind` frames until its end; with `exited`
/// (the command's exit, as a pipe that closes), only until it is empty
/// once the command has exited, then it is drained and dropped in the
/// background, so a leftover writing to it never blocks nor gets SIGPIPE.
pub fn pump_stream(r: File, kind: Kind, port: &Port, exited: Option<&std::os::fd::OwnedFd>) {
    let mut buf = vec![0u8; wire::CHUNK];
    let mut host_here = true;
    if exited.is_some() && set_nonblocking(&r, true).is_err() {
        log(format_args!("cannot make a command's stream non-blocking"));
    }
    loop {
        if let Some(exited) = exited {
            let mut fds = [PollFd::new(&r, PollFlags::IN), PollFd::new(exited, PollFlags::IN)];
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
            let ready = fds[0].revents().intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR);
            if !ready && fds[1].revents().intersects(PollFlags::IN | PollFlags::HUP) {
                // Exited, and nothing of it is left to read.
                std::thread::spawn(move || drain(r));
                return;
            }
        }
        match (&r).read(&mut buf) {
            Ok(0) => break,
            // Once the host is gone, keep draining so the command never blocks on a full pipe.
            Ok(n) if host_here => host_here = port.send(kind, &buf[..n]).is_ok(),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
}

/// Reads `r` to its end and drops every byte.
fn drain(r: File) {
    let _ = set_nonblocking(&r, false);
    let _ = io::copy(&mut &r, &mut io::sink());
}
