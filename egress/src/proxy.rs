//! The proxy: one request per client connection, checked, then a CONNECT
//! tunnel (after its ClientHello's SNI is checked) or one plain HTTP
//! exchange, and one decision line when the connection ends.

use std::collections::HashSet;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::time::timeout;

use crate::count::Counted;
use crate::http::{self, Head, HeadError, Host};
use crate::log::{Decision, DecisionLog, Method, Verdict, now_ms};
use crate::policy::Policy;
use crate::policy::check_address;
use crate::resolve::Resolve;
use crate::tls::{Hello, client_hello};

/// The most a ClientHello may take before its SNI is known.
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// The buffer of each direction of a copy. tokio's default (8 KiB) made a
/// download through the relay and the proxy about half as fast as plain
/// egress (contrib/bench/egress): every 8 KiB costs a read and a write on
/// each hop. 256 KiB ways are copied in a few calls per socket buffer.
pub(crate) const COPY_BUFFER: usize = 256 * 1024;

/// Methods a plain (absolute-form) request may use.
const PLAIN_METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"];

/// Bounds on the steps before a connection is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Reading the request head, and the tunnel's ClientHello.
    pub head: Duration,
    /// Resolving the name.
    pub resolve: Duration,
    /// Connecting to the upstream (each address tried).
    pub connect: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { head: Duration::from_secs(10), resolve: Duration::from_secs(5), connect: Duration::from_secs(10) }
    }
}

/// Everything one proxy needs. Shared by its connections.
#[derive(Clone)]
pub struct Config {
    /// What may be reached.
    pub policy: Policy,
    /// This host's own addresses, refused unless an entry covers them
    /// (see [`crate::host_addresses`]).
    pub host_addresses: HashSet<IpAddr>,
    /// How names become addresses.
    pub resolver: Arc<dyn Resolve>,
    /// Where decisions go.
    pub log: DecisionLog,
    /// Bounds on each step.
    pub timeouts: Timeouts,
    /// The largest request head accepted; a larger one gets 431.
    pub max_head: usize,
    /// Whether a tunnel's ClientHello must name the CONNECT name (default
    /// true). **Only tests set it false**: it exists as the conformance
    /// kit's negative control, proving the kit notices a proxy that does not
    /// check SNI.
    pub check_sni: bool,
    /// A box with secrets (ADR 0032): the tunnels to the hosts its rules
    /// name are intercepted and their requests rewritten; `None` for every
    /// other box, whose tunnels are all left untouched.
    pub injector: Option<Arc<crate::inject::Injector>>,
}

impl Config {
    /// A configuration with the default bounds (16 KiB heads) and SNI checked.
    pub fn new(policy: Policy, host_addresses: HashSet<IpAddr>, resolver: Arc<dyn Resolve>, log: DecisionLog) -> Self {
        Self {
            policy,
            host_addresses,
            resolver,
            log,
            timeouts: Timeouts::default(),
            max_head: 16 * 1024,
            check_sni: true,
            injector: None,
        }
    }
}

/// Something that accepts client connections: a TCP or a UNIX listener.
pub trait Listener: Send + 'static {
    /// One client connection.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Waits for the next client.
    fn accept_client(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

impl Listener for TcpListener {
    type Stream = TcpStream;
    async fn accept_client(&self) -> io::Result<TcpStream> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Listener for UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_client(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// Serves `listener` until the future is dropped or accepting fails for a
/// reason other than one aborted client. Each connection runs in a task of
/// its own.
pub async fn serve<L: Listener>(listener: L, config: Arc<Config>) -> io::Result<()> {
    loop {
        match listener.accept_client().await {
            Ok(stream) => {
                let config = config.clone();
                tokio::spawn(async move { handle_connection(stream, &config).await });
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
    }
}

/// What is known about a connection, for its log line.
struct Record {
    method: Method,
    name: Option<String>,
    port: Option<u16>,
    address: Option<SocketAddr>,
    bytes_up: u64,
    bytes_down: u64,
}

/// A refusal: the status sent (none once a tunnel is open) and the reason.
struct Refusal {
    status: Option<u16>,
    reason: String,
}

fn refuse(status: u16, reason: impl Into<String>) -> Refusal {
    Refusal { status: Some(status), reason: reason.into() }
}

/// Handles one client connection to its end and logs the decision.
pub async fn handle_connection<S>(mut client: S, config: &Config)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut record = Record { method: Method::Http, name: None, port: None, address: None, bytes_up: 0, bytes_down: 0 };
    let outcome = run(&mut client, config, &mut record).await;
    let mut answered = true;
    let (decision, reason) = match outcome {
        Ok(reason) => (Verdict::Allowed, reason),
        Err(refusal) => {
            match refusal.status {
                Some(status) => {
                    let reply = http::response(status, &refusal.reason);
                    // The client may be gone; the decision is logged all the same.
                    let _ = timeout(config.timeouts.head, async {
                        client.write_all(&reply).await?;
                        client.shutdown().await
                    })
                    .await;
                }
                None => answered = false,
            }
            (Verdict::Refused, refusal.reason)
        }
    };
    config.log.record(&Decision {
        time_ms: now_ms(),
        method: record.method,
        name: record.name,
        port: record.port,
        address: record.address,
        decision,
        reason,
        bytes_up: record.bytes_up,
        bytes_down: record.bytes_down,
        secret: None,
    });
    if answered {
        linger(&mut client, config.timeouts.head).await;
    }
}

/// Reads and discards what the client still sends (a bounded amount, for a
/// bounded time) before the connection is dropped, so that unread bytes do
/// not turn the close into a reset that destroys the answer the client has
/// not read yet. Nothing read here goes anywhere.
async fn linger<S: AsyncRead + Unpin>(client: &mut S, within: Duration) {
    let _ = timeout(within, async {
        let mut sink = [0u8; 4096];
        let mut total = 0;
        while total < MAX_CLIENT_HELLO {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
}

async fn run<S>(client: &mut S, config: &Config, record: &mut Record) -> Result<String, Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (head, rest) = match timeout(config.timeouts.head, http::read_head(client, config.max_head)).await {
        Err(_) => return Err(refuse(408, "no whole request head within the time allowed")),
        Ok(Err(HeadError::TooLarge)) => {
            return Err(refuse(431, format!("the request head is over {} bytes", config.max_head)));
        }
        Ok(Err(HeadError::Malformed(e))) => return Err(refuse(400, format!("not an HTTP/1 request: {e}"))),
        Ok(Err(HeadError::Closed)) => {
            return Err(Refusal { status: None, reason: "the client closed before a whole request head".into() });
        }
        Ok(Err(HeadError::Io(e))) => {
            return Err(Refusal { status: None, reason: format!("reading the request head: {e}") });
        }
        Ok(Ok(read)) => read,
    };
    if head.method == "CONNECT" {
        record.method = Method::Connect;
        connect(client, config, record, &head, rest).await
    } else {
        plain(client, config, record, &head, rest).await
    }
}

/// Checks `host:port` against the policy and the address rule, and connects
/// to the first address that passes and answers.
async fn open_upstream(config: &Config, host: &Host, port: u16) -> Result<(TcpStream, SocketAddr, String), Refusal> {
    let (addresses, allowed_by) = match host {
        Host::Ip(ip) => match config.policy.covers_address(*ip, port) {
            Some(entry) => (vec![*ip], entry.to_string()),
            None => {
                return Err(refuse(403, format!("address {ip} port {port} is not on the allowlist")));
            }
        },
        Host::Name(name) => {
            let Some(entry) = config.policy.allows_name(name, port) else {
                return Err(refuse(403, format!("name {name} port {port} is not on the allowlist")));
            };
            let found = match timeout(config.timeouts.resolve, config.resolver.resolve(name)).await {
                Err(_) => return Err(refuse(504, format!("resolving {name} took too long"))),
                Ok(Err(e)) => return Err(refuse(502, format!("cannot resolve {name}: {e}"))),
                Ok(Ok(found)) => found,
            };
            if found.is_empty() {
                return Err(refuse(502, format!("{name} has no address")));
            }
            let mut passed = Vec::new();
            let mut first_refusal = None;
            for ip in found {
                match check_address(ip, port, &config.policy, &config.host_addresses) {
                    Ok(()) => passed.push(ip),
                    Err(why) => {
                        first_refusal.get_or_insert(why);
                    }
                }
            }
            if passed.is_empty() {
                let why = first_refusal.unwrap_or_default();
                return Err(refuse(403, format!("every address of {name} is refused: {why}")));
            }
            (passed, entry.to_string())
        }
    };
    let mut last_error = String::new();
    for ip in addresses {
        let target = SocketAddr::new(ip, port);
        match timeout(config.timeouts.connect, TcpStream::connect(target)).await {
            Ok(Ok(stream)) => {
                // A request head or a TLS record sent in pieces is not held back.
                let _ = stream.set_nodelay(true);
                return Ok((stream, target, format!("allowed by {allowed_by}")));
            }
            Ok(Err(e)) => last_error = format!("connecting to {target}: {e}"),
            Err(_) => last_error = format!("connecting to {target} took too long"),
        }
    }
    Err(refuse(502, last_error))
}

async fn connect<S>(
    client: &mut S,
    config: &Config,
    record: &mut Record,
    head: &Head,
    rest: Vec<u8>,
) -> Result<String, Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (host, port) = http::parse_authority(&head.target, None).map_err(|e| refuse(400, e))?;
    record.name = Some(host.text());
    record.port = Some(port);
    let (mut upstream, address, allowed) = open_upstream(config, &host, port).await?;
    record.address = Some(address);
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .map_err(|e| Refusal { status: None, reason: format!("answering CONNECT: {e}") })?;
    let mut first = rest;
    if config.check_sni {
        first = match timeout(config.timeouts.head, read_client_hello(client, first)).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(reason)) => return Err(Refusal { status: None, reason }),
            Err(_) => {
                return Err(Refusal { status: None, reason: "sni: no ClientHello within the time allowed".into() });
            }
        };
        let sni = match client_hello(&first) {
            Hello::Complete(sni) => sni,
            _ => None,
        };
        let expected = match &host {
            Host::Name(n) => Some(n.as_str()),
            Host::Ip(_) => None,
        };
        let got = sni.as_deref().map(|s| s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase());
        let mismatch = match (got.as_deref(), expected) {
            (Some(g), Some(e)) if g == e => None,
            (None, None) => None,
            (Some(g), Some(e)) => Some(format!("sni {g:?} does not match the CONNECT name {e:?}")),
            (None, Some(e)) => Some(format!("sni missing, the CONNECT name is {e:?}")),
            (Some(g), None) => Some(format!("sni {g:?} sent to an address literal")),
        };
        if let Some(reason) = mismatch {
            return Err(Refusal { status: None, reason });
        }
    }
    if let (Some(injector), Host::Name(name)) = (&config.injector, &host)
        && injector.rules.intercepts(name)
    {
        let counts = crate::inject::exchange::Counts::default();
        let done = crate::inject::exchange::intercept(
            client,
            first,
            upstream,
            name,
            port,
            address,
            injector.clone(),
            config.log.clone(),
            &counts,
        )
        .await;
        record.bytes_up = counts.up.load(std::sync::atomic::Ordering::Relaxed);
        record.bytes_down = counts.down.load(std::sync::atomic::Ordering::Relaxed);
        return match done {
            Ok(()) => Ok(format!("{allowed}; intercepted for its secrets")),
            Err(reason) => Err(Refusal { status: None, reason }),
        };
    }
    let io_err = |e: io::Error| Refusal { status: None, reason: format!("tunnel: {e}") };
    upstream.write_all(&first).await.map_err(io_err)?;
    record.bytes_up = first.len() as u64;
    let mut counted = Counted::new(&mut *client);
    let mut upstream_counted = Counted::new(&mut upstream);
    let result =
        tokio::io::copy_bidirectional_with_sizes(&mut counted, &mut upstream_counted, COPY_BUFFER, COPY_BUFFER).await;
    record.bytes_up += counted.read_bytes();
    record.bytes_down = upstream_counted.read_bytes();
    match result {
        Ok(_) => Ok(allowed),
        // The tunnel was allowed; how it ended is noted with the reason.
        Err(e) => Ok(format!("{allowed}; the tunnel ended with: {e}")),
    }
}

/// Reads until `bytes` hold a whole ClientHello (or prove they are not one).
async fn read_client_hello<S: AsyncRead + Unpin>(client: &mut S, mut bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut chunk = [0u8; 4096];
    loop {
        match client_hello(&bytes) {
            Hello::Complete(_) => return Ok(bytes),
            Hello::NotTls(e) => return Err(format!("sni: the tunnel did not start with a TLS ClientHello: {e}")),
            Hello::Incomplete if bytes.len() >= MAX_CLIENT_HELLO => {
                return Err(format!("sni: no whole ClientHello within {MAX_CLIENT_HELLO} bytes"));
            }
            Hello::Incomplete => {}
        }
        let n = client.read(&mut chunk).await.map_err(|e| format!("sni: reading the ClientHello: {e}"))?;
        if n == 0 {
            return Err("sni: the client closed before a whole ClientHello".into());
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

async fn plain<S>(
    client: &mut S,
    config: &Config,
    record: &mut Record,
    head: &Head,
    rest: Vec<u8>,
) -> Result<String, Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    if head.target.starts_with('/') || head.target == "*" {
        return Err(refuse(
            400,
            format!("{} {}: not a proxy request; send an absolute http:// URI or CONNECT", head.method, head.target),
        ));
    }
    if !PLAIN_METHODS.contains(&head.method.as_str()) {
        return Err(refuse(405, format!("method {:?} is refused", head.method)));
    }
    let (authority, path) = http::split_absolute(&head.target).map_err(|e| refuse(400, e))?;
    let (host, port) = http::parse_authority(authority, Some(80)).map_err(|e| refuse(400, e))?;
    record.name = Some(host.text());
    record.port = Some(port);
    let mut hosts = head.values("host");
    let host_header = match (hosts.next(), hosts.next()) {
        (Some(h), None) => String::from_utf8_lossy(h).into_owned(),
        (None, _) => return Err(refuse(400, "the request has no Host header")),
        (Some(_), Some(_)) => return Err(refuse(400, "the request has more than one Host header")),
    };
    match http::parse_authority(host_header.trim(), Some(80)) {
        Ok((h, p)) if h == host && p == port => {}
        _ => {
            return Err(refuse(400, format!("the Host header {host_header:?} does not match the URI's {authority:?}")));
        }
    }
    let length = http::body_length(head).map_err(|(status, reason)| refuse(status, reason))?;
    let upstream_head = http::origin_head(head, &path);
    if let Some(injector) = &config.injector {
        // Never in clear: a secret's placeholder over plain HTTP is refused,
        // whichever host it is for (ADR 0032).
        let early = &rest[..rest.len().min(usize::try_from(length).unwrap_or(usize::MAX))];
        let found = crate::inject::rewrite::placeholders_in(&upstream_head, &injector.rules)
            .into_iter()
            .chain(crate::inject::rewrite::placeholders_in(early, &injector.rules))
            .next();
        if let Some(rule) = found {
            return Err(refuse(
                403,
                format!(
                    "the placeholder of secret {} is sent over plain http; a secret goes over https only",
                    rule.name
                ),
            ));
        }
    }
    let (upstream, address, allowed) = open_upstream(config, &host, port).await?;
    record.address = Some(address);
    let (up_read, mut up_write) = upstream.into_split();
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut up_read = Counted::new(up_read);
    let mut client_read = Counted::new(client_read);
    // Bytes after the body, here or still unread, are never forwarded: a
    // second request on this connection goes nowhere.
    let early = rest.len().min(usize::try_from(length).unwrap_or(usize::MAX));
    let ended = {
        let up = async {
            up_write.write_all(&upstream_head).await?;
            up_write.write_all(&rest[..early]).await?;
            let remaining = length - early as u64;
            tokio::io::copy(&mut (&mut client_read).take(remaining), &mut up_write).await?;
            io::Result::Ok(())
        };
        let down = async {
            let mut answer = tokio::io::BufReader::with_capacity(COPY_BUFFER, &mut up_read);
            tokio::io::copy_buf(&mut answer, &mut client_write).await?;
            client_write.shutdown().await
        };
        tokio::pin!(up, down);
        let mut up_done = false;
        loop {
            tokio::select! {
                r = &mut up, if !up_done => {
                    up_done = true;
                    if let Err(e) = r {
                        break Err(e);
                    }
                }
                r = &mut down => break r,
            }
        }
    };
    // Counted from what was read, so a request cut short still counts.
    record.bytes_up = (upstream_head.len() + early) as u64 + client_read.read_bytes();
    record.bytes_down = up_read.read_bytes();
    match ended {
        Ok(()) => Ok(allowed),
        Err(e) => Ok(format!("{allowed}; the exchange ended with: {e}")),
    }
}
