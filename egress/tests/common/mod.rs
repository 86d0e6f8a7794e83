//! The proxy suites' helpers: a proxy on 127.0.0.1:0 whose log lines arrive
//! on a channel, upstream HTTP and TLS servers on 127.0.0.1, and clients
//! that talk through the proxy.
#![allow(dead_code)]

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use tinybox_egress::{Config, Decision, DecisionLog, Policy, StaticResolver};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

pub const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// A `Write` whose every write is one log line, sent to a channel.
struct LineTap(UnboundedSender<Vec<u8>>);

impl Write for LineTap {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.send(buf.to_vec());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A running proxy and its decisions, in the order they are written.
pub struct Proxy {
    pub addr: SocketAddr,
    decisions: UnboundedReceiver<Vec<u8>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Proxy {
    /// The next decision line, parsed back with the crate's reader.
    pub async fn decision(&mut self) -> Decision {
        let line = self.decisions.recv().await.expect("the proxy is running");
        let mut parsed = tinybox_egress::read_decisions(&line[..]).expect("a decision line");
        assert_eq!(parsed.len(), 1, "one line per write: {}", String::from_utf8_lossy(&line));
        parsed.remove(0)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The resolver every test uses: `web.test` and `other.test` are 127.0.0.1.
pub fn test_resolver() -> StaticResolver {
    StaticResolver::new().with("web.test", &[LOCALHOST]).with("other.test", &[LOCALHOST])
}

/// A config over `entries` and `resolver`, logging to a channel.
pub fn config(entries: &[String], resolver: StaticResolver) -> (Config, UnboundedReceiver<Vec<u8>>) {
    let (tx, rx) = unbounded_channel();
    let policy = Policy::parse(entries).expect("test policy");
    let own = tinybox_egress::host_addresses().expect("this host's addresses");
    let config = Config::new(policy, own, Arc::new(resolver), DecisionLog::to_writer(LineTap(tx)));
    (config, rx)
}

/// Starts a proxy on 127.0.0.1:0 with `config`.
pub async fn start(config: Config, decisions: UnboundedReceiver<Vec<u8>>) -> Proxy {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(tinybox_egress::serve(listener, Arc::new(config)));
    Proxy { addr, decisions, task }
}

/// A proxy allowing `entries`, resolving with [`test_resolver`].
pub async fn proxy(entries: &[String]) -> Proxy {
    let (config, rx) = config(entries, test_resolver());
    start(config, rx).await
}

/// An upstream HTTP server. Each connection: one request read (head and
/// Content-Length body), one answer naming what it saw, then it keeps
/// reading until the proxy hangs up, and reports every byte it received.
pub struct HttpUpstream {
    pub port: u16,
    received: UnboundedReceiver<Vec<u8>>,
    task: JoinHandle<()>,
}

impl HttpUpstream {
    pub async fn start() -> Self {
        let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, received) = unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let tx = tx.clone();
                tokio::spawn(async move { serve_http_once(stream, tx).await });
            }
        });
        Self { port, received, task }
    }

    /// Every byte one connection received, once the proxy hung up.
    pub async fn received(&mut self) -> String {
        String::from_utf8(self.received.recv().await.expect("upstream running")).unwrap()
    }
}

impl Drop for HttpUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_http_once(mut stream: TcpStream, tx: UnboundedSender<Vec<u8>>) {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&got, b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let _ = tx.send(got);
                return;
            }
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    while got.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
    let request_line = head.lines().next().unwrap_or("").to_owned();
    let body = format!("upstream saw {request_line} with {length} body bytes");
    let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
    // Keep reading: anything more the proxy forwards is recorded.
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
    let _ = tx.send(got);
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// An upstream TLS server with a self-signed certificate for `web.test`,
/// `other.test` and 127.0.0.1. Each connection: one line read, then
/// `sni=<the SNI it saw> line=<the line>` written back and closed.
pub struct TlsUpstream {
    pub port: u16,
    pub cert: CertificateDer<'static>,
    task: JoinHandle<()>,
}

impl TlsUpstream {
    pub async fn start() -> Self {
        let names = vec!["web.test".to_owned(), "other.test".to_owned(), "127.0.0.1".to_owned()];
        let certified = rcgen::generate_simple_self_signed(names).unwrap();
        let cert = certified.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else { return };
                    let sni = tls.get_ref().1.server_name().unwrap_or("none").to_owned();
                    let mut line = Vec::new();
                    let mut byte = [0u8; 1];
                    while tls.read_exact(&mut byte).await.is_ok() && byte[0] != b'\n' {
                        line.push(byte[0]);
                    }
                    let reply = format!("sni={sni} line={}\n", String::from_utf8_lossy(&line));
                    let _ = tls.write_all(reply.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Self { port, cert, task }
    }
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends `CONNECT target` and reads the proxy's answer head (and, for a
/// refusal, the body to the end). Returns the stream and what was read.
pub async fn connect(proxy: SocketAddr, target: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while find(&head, b"\r\n\r\n").is_none() {
        if stream.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        stream.read_to_end(&mut head).await.unwrap();
    }
    (stream, String::from_utf8(head).unwrap())
}

/// What a TLS exchange through a tunnel gave: the server's answer and the
/// bytes the client sent and received on the tunnel (after CONNECT's head).
#[derive(Debug)]
pub struct Tunneled {
    pub answer: String,
    pub sent: u64,
    pub received: u64,
}

/// TLS over an open tunnel with `sni` (a name, or an address for none),
/// trusting `cert`: sends `hello\n` and reads the server's answer to the end.
pub async fn tls_hello(tunnel: TcpStream, sni: &str, cert: &CertificateDer<'static>) -> std::io::Result<Tunneled> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    let (sent, received) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let metered = Metered { inner: tunnel, sent: sent.clone(), received: received.clone() };
    let mut tls = connector.connect(name, metered).await?;
    tls.write_all(b"hello\n").await?;
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await?;
    drop(tls);
    Ok(Tunneled { answer, sent: sent.load(Ordering::SeqCst), received: received.load(Ordering::SeqCst) })
}

/// A stream counting what passes through it each way.
struct Metered {
    inner: TcpStream,
    sent: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
}

impl AsyncRead for Metered {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.received.fetch_add((buf.filled().len() - before) as u64, Ordering::SeqCst);
        polled
    }
}

impl AsyncWrite for Metered {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.sent.fetch_add(n as u64, Ordering::SeqCst);
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Sends `raw` to the proxy as it is and reads everything until it closes.
pub async fn exchange(proxy: SocketAddr, raw: &[u8]) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}
