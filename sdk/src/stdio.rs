//! The bulk data path. JSON carries control only: a command's stdin, stdout
//! and stderr are handed to the driver as file descriptors over a local
//! socket the call names (`StdioRef`). The driver gives them straight to the
//! process it starts, so output streams with no copy through tinybox at all.
//!
//! interprocess makes and names the socket; it no longer carries ancillary
//! data, so the descriptors themselves travel with rustix's safe `sendmsg`
//! (SCM_RIGHTS) on the connected stream.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use interprocess::local_socket::tokio::prelude::*;
use interprocess::local_socket::traits::Stream as _;
use interprocess::local_socket::{GenericFilePath, ListenerOptions, ToFsName};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use tokio::task::JoinHandle;

use crate::protocol::StdioRef;

/// A command's three standard streams.
#[derive(Debug)]
pub struct StdioFds {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Serves a set of descriptors to every connection on a private socket,
/// for as long as it lives. Dropping it removes the socket.
pub struct StdioServer {
    path: PathBuf,
    task: JoinHandle<()>,
}

impl StdioServer {
    /// Listens at `path` (inside a directory only this user can enter).
    pub fn start(path: PathBuf, fds: StdioFds) -> io::Result<StdioServer> {
        let name = path.as_path().to_fs_name::<GenericFilePath>()?;
        let listener = ListenerOptions::new().name(name).reclaim_name(true).create_tokio()?;
        let task = tokio::spawn(async move {
            while let Ok(conn) = listener.accept().await {
                let interprocess::local_socket::tokio::Stream::UdSocket(conn) = conn;
                let fds = [fds.stdin.as_fd(), fds.stdout.as_fd(), fds.stderr.as_fd()];
                let sock = conn.inner();
                // One byte of payload carries the three descriptors.
                loop {
                    if sock.writable().await.is_err() {
                        break;
                    }
                    match sock.try_io(tokio::io::Interest::WRITABLE, || send_fds(sock, &fds)) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        _ => break,
                    }
                }
            }
        });
        Ok(StdioServer { path, task })
    }

    /// The reference to put in a call.
    pub fn stdio_ref(&self) -> StdioRef {
        StdioRef { socket: self.path.clone() }
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn send_fds(sock: impl AsFd, fds: &[BorrowedFd<'_>; 3]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("control buffer too small for three descriptors"));
    }
    rustix::net::sendmsg(sock, &[IoSlice::new(b"S")], &mut control, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Connects to the socket a call named and receives stdin, stdout, stderr.
pub async fn receive(stdio: &StdioRef) -> io::Result<StdioFds> {
    let path = stdio.socket.clone();
    tokio::task::spawn_blocking(move || receive_blocking(&path))
        .await
        .map_err(|e| io::Error::other(format!("stdio receiver failed: {e}")))?
}

/// The blocking form of [`receive`].
pub fn receive_blocking(path: &Path) -> io::Result<StdioFds> {
    let name = path.to_fs_name::<GenericFilePath>()?;
    let conn = interprocess::local_socket::Stream::connect(name)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot reach stdio socket {}: {e}", path.display())))?;
    let interprocess::local_socket::Stream::UdSocket(conn) = conn;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let msg =
        rustix::net::recvmsg(conn.inner(), &mut [IoSliceMut::new(&mut byte)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    if msg.bytes == 0 {
        return Err(io::Error::other("stdio socket closed without sending descriptors"));
    }
    let mut got: Vec<OwnedFd> = Vec::with_capacity(3);
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            got.extend(fds);
        }
    }
    let mut it = got.into_iter();
    match (it.next(), it.next(), it.next()) {
        (Some(stdin), Some(stdout), Some(stderr)) => Ok(StdioFds { stdin, stdout, stderr }),
        _ => Err(io::Error::other("stdio socket sent fewer than three descriptors")),
    }
}
