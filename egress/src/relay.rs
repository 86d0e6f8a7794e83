//! The box's end of the egress path: a listener on the box's loopback that
//! forwards each connection, byte for byte, to the proxy's UNIX socket,
//! for as long as the box's command runs.
//!
//! It runs inside the box, with the box's privileges, and decides nothing:
//! the box could reach the socket without it. It exists so that programs
//! honouring `http_proxy=http://127.0.0.1:PORT` find a TCP proxy. The
//! listener is bound before the command starts, so the command can never
//! connect before it exists, and the relay ends when the command ends,
//! with its status.

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use tokio::net::{TcpListener, UnixStream};

use crate::proxy::COPY_BUFFER;

/// What one relay does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// The address to listen on, in the box (`127.0.0.1:PORT`).
    pub listen: SocketAddr,
    /// The proxy's socket, as the box sees it.
    pub to: PathBuf,
    /// The command to run while listening: program and arguments.
    pub command: Vec<OsString>,
}

/// Why a relay could not start its command.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot listen on {listen}: {source}")]
    Listen { listen: SocketAddr, source: io::Error },
    #[error("no command to run")]
    NoCommand,
    #[error("cannot start {program:?}: {source}")]
    Spawn { program: OsString, source: io::Error },
    #[error("waiting for the command: {0}")]
    Wait(io::Error),
}

impl Relay {
    /// Binds, starts the command, forwards connections until it exits, and
    /// returns its status. Connections still open then are dropped.
    pub async fn run(&self) -> Result<ExitStatus, RelayError> {
        let (program, args) = self.command.split_first().ok_or(RelayError::NoCommand)?;
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(|source| RelayError::Listen { listen: self.listen, source })?;
        // Only now, with the listener up, does the command start.
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .spawn()
            .map_err(|source| RelayError::Spawn { program: program.clone(), source })?;
        loop {
            tokio::select! {
                status = child.wait() => return status.map_err(RelayError::Wait),
                accepted = listener.accept() => {
                    if let Ok((client, _)) = accepted {
                        let to = self.to.clone();
                        tokio::spawn(async move { forward(client, &to).await });
                    }
                }
            }
        }
    }
}

/// Copies both ways between a client and a fresh connection to `to`. A
/// proxy that cannot be reached is said on stderr (the box's own): the
/// client only sees its connection closed.
async fn forward(mut client: tokio::net::TcpStream, to: &Path) {
    let _ = client.set_nodelay(true);
    match UnixStream::connect(to).await {
        Ok(mut upstream) => {
            let _ =
                tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, COPY_BUFFER, COPY_BUFFER).await;
        }
        Err(e) => eprintln!("tinybox-egress relay: cannot reach the egress proxy at {}: {e}", to.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_listener_is_up_before_the_command_and_forwards_to_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("proxy.sock");
        let upstream = tokio::net::UnixListener::bind(&sock).unwrap();
        let echo = tokio::spawn(async move {
            let (mut s, _) = upstream.accept().await.unwrap();
            let mut got = vec![0u8; 5];
            s.read_exact(&mut got).await.unwrap();
            s.write_all(b"got ").await.unwrap();
            s.write_all(&got).await.unwrap();
        });
        // Pick a free port, then give it to the relay. Between the two,
        // another test (or process) may take it: then the relay says so
        // before it runs anything, and another port is picked.
        let out = dir.path().join("out");
        let mut tries = 0;
        let status = loop {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            // The command connects at once: with the listener bound first it
            // always finds it (bash's /dev/tcp, no retry).
            let script = format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port}; printf hello >&3; head -c 9 <&3 > '{}'; exit 7",
                out.display()
            );
            let relay = Relay {
                listen: SocketAddr::from(([127, 0, 0, 1], port)),
                to: sock.clone(),
                command: ["bash", "-c", &script].map(OsString::from).to_vec(),
            };
            match relay.run().await {
                Err(RelayError::Listen { source, .. }) if source.kind() == io::ErrorKind::AddrInUse && tries < 5 => {
                    tries += 1
                }
                other => break other.unwrap(),
            }
        };
        assert_eq!(status.code(), Some(7), "the command's own status");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "got hello");
        echo.await.unwrap();
    }

    #[tokio::test]
    async fn a_missing_command_and_a_taken_port_are_errors_naming_them() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listen = taken.local_addr().unwrap();
        let relay = Relay { listen, to: "/nonexistent".into(), command: vec!["true".into()] };
        let err = relay.run().await.unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot listen on {listen}")), "{err}");
        let free = SocketAddr::from(([127, 0, 0, 1], 0));
        let relay = Relay { listen: free, to: "/nonexistent".into(), command: vec!["/nonexistent/prog".into()] };
        let err = relay.run().await.unwrap_err().to_string();
        assert!(err.starts_with("cannot start \"/nonexistent/prog\""), "{err}");
        let relay = Relay { listen: free, to: "/nonexistent".into(), command: vec![] };
        assert_eq!(relay.run().await.unwrap_err().to_string(), "no command to run");
    }
}
