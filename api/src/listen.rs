//! Where the server listens and who is at the other end of a connection:
//! a loopback port (cleartext), a port anywhere with TLS (rustls), and a
//! UNIX socket whose peer's uid the kernel tells (`SO_PEERCRED`). Each
//! connection carries its [`Peer`] into the request, where `auth::check`
//! lets a socket caller in by its uid and a port caller by the token
//! (ADR 0045).

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;

/// Who a connection is from, as the listener saw it.
#[derive(Debug, Clone)]
pub enum Peer {
    /// A port, cleartext or TLS: the token is the caller's credential.
    Port(SocketAddr),
    /// The UNIX socket: the peer's uid (`None` when the kernel told none).
    Socket { uid: Option<u32> },
}

impl Connected<IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Peer {
        Peer::Port(*stream.remote_addr())
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Peer {
        Peer::Port(*stream.remote_addr())
    }
}

impl Connected<IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Peer {
        Peer::Socket { uid: stream.io().peer_cred().ok().map(|c| c.uid()) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("--tls-cert {path}: {why}: give a PEM file of the server's certificate chain, leaf first")]
    Cert { path: PathBuf, why: String },
    #[error("--tls-key {path}: {why}: give a PEM file of the certificate's private key (PKCS#8, PKCS#1 or SEC1)")]
    Key { path: PathBuf, why: String },
    #[error(
        "--tls-cert and --tls-key do not make a TLS identity ({why}): give the key that belongs to the certificate"
    )]
    Pair { why: String },
    #[error(
        "--socket {path}: its directory {dir} {why}: the socket must be in a directory only this user ({uid}) owns and can write, like the store"
    )]
    SocketDir { path: PathBuf, dir: PathBuf, uid: u32, why: String },
    #[error("--socket {path}: {why}")]
    Socket { path: PathBuf, why: String },
}

/// The TLS identity a `--listen` beyond loopback is served with.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, ListenError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert_err = |why: String| ListenError::Cert { path: cert.to_owned(), why };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| cert_err(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_err("no CERTIFICATE in it".into()));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| ListenError::Key { path: key.to_owned(), why: e.to_string() })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ListenError::Pair { why: e.to_string() })?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| ListenError::Pair { why: e.to_string() })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// A port whose connections are TLS: handshakes run beside the accept
/// loop, so a slow or silent client holds up no one else, and one that
/// fails its handshake is dropped without reaching the router.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let (stream, addr) = match tcp.accept().await {
                    Ok(a) => a,
                    // Out of descriptors or the like: axum's own listener waits too.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        let _ = tx.send((tls, addr)).await;
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop only ends once this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Binds the UNIX socket `path`, mode 0600, in a directory this user owns
/// and nobody else can write (so no one can swap the socket for another).
/// It is bound under a temporary name and renamed into place once it is
/// 0600, so `path` is never a socket of looser mode. A stale socket there
/// (nothing answers on it) is replaced; a live one, or anything not a
/// socket, is refused.
pub fn bind_socket(path: &Path) -> Result<UnixListener, ListenError> {
    let uid = rustix::process::geteuid().as_raw();
    let refuse = |why: String| ListenError::Socket { path: path.to_owned(), why };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(refuse("is not a file path".into()));
    };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let dir_refusal = |why: String| ListenError::SocketDir { path: path.to_owned(), dir: dir.to_owned(), uid, why };
    let meta = std::fs::metadata(dir).map_err(|e| dir_refusal(format!("cannot be read ({e})")))?;
    if !meta.is_dir() {
        return Err(dir_refusal("is not a directory".into()));
    }
    if meta.uid() != uid {
        return Err(dir_refusal(format!("is owned by uid {}", meta.uid())));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(dir_refusal(format!("is writable by others (mode {mode:o})")));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(refuse("is there and is not a socket: remove it or name another path".into()));
        }
        Ok(_) if std::os::unix::net::UnixStream::connect(path).is_ok() => {
            return Err(refuse("a server already listens on it: stop it or name another path".into()));
        }
        Ok(_) => std::fs::remove_file(path).map_err(|e| refuse(format!("cannot remove the stale socket ({e})")))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(refuse(format!("cannot be read ({e})"))),
    }
    let temporary = dir.join(format!(".{}.{}.binding", name.to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let bound = (|| {
        let listener = std::os::unix::net::UnixListener::bind(&temporary)?;
        std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&temporary, path)?;
        listener.set_nonblocking(true)?;
        UnixListener::from_std(listener)
    })();
    bound.map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        refuse(format!("cannot bind it ({e})"))
    })
}

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
