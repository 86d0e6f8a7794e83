//! A namespace image box's egress by allowlist (ADRs 0020, 0029): the
//! agent, the box's init, listens on the box's `127.0.0.1:PORT`, where the
//! proxy variables point, and carries each connection byte for byte to the
//! box's egress proxy, whose UNIX socket the holder bound into the box
//! read-only. The box has no network of its own: this is its only way out,
//! and it decides nothing (the proxy does; the box could reach the socket
//! without it). It does what `tinybox-egress relay` does for a box made
//! without an image, for the box's whole life rather than one command's,
//! and in the agent because an image's userland cannot be relied on to run
//! a program linked against the host's libraries.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::log;

/// Binds the box's end before the agent answers anyone, so no command can
/// look for the proxy before it is there.
pub fn bind(port: u16) -> io::Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", port))
}

/// Accepts for as long as the box lives, each connection on threads of its own.
pub fn serve(listener: TcpListener, socket: PathBuf) {
    for conn in listener.incoming() {
        let client = match conn {
            Ok(c) => c,
            Err(e) => {
                log(format_args!("egress relay: accepting: {e}"));
                continue;
            }
        };
        let socket = socket.clone();
        std::thread::spawn(move || {
            if let Err(e) = carry(client, &socket) {
                log(format_args!("egress relay: to {}: {e}", socket.display()));
            }
        });
    }
}

/// Both directions until each side has said all it will; a side's end is
/// passed on as a half-close, as the proxy's own relay does.
fn carry(client: TcpStream, socket: &Path) -> io::Result<()> {
    let proxy = UnixStream::connect(socket)?;
    let (mut from_client, mut to_proxy) = (client.try_clone()?, proxy.try_clone()?);
    let up = std::thread::spawn(move || {
        let _ = io::copy(&mut from_client, &mut to_proxy);
        let _ = to_proxy.shutdown(Shutdown::Write);
    });
    let (mut from_proxy, mut to_client) = (proxy, client);
    let _ = io::copy(&mut from_proxy, &mut to_client);
    let _ = to_client.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}
