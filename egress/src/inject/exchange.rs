//! One intercepted tunnel: the box's TLS ended here with the box CA's leaf
//! for the host, the proxy's own TLS to the upstream (verified), and the
//! HTTP/1.1 requests between them parsed and written by hyper, each
//! checked and rewritten ([`super::rewrite`]) and audited in the decision log.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::Injector;
use super::prefixed::Prefixed;
use super::rewrite::{Refused, check_body, rewrite_head};
use super::scrub::{Pairs, Scrubbed};
use crate::log::{Decision, DecisionLog, Method, Verdict, now_ms};

/// The largest request body an intercepted request may carry: it is read
/// whole, to be searched for placeholders, before it is sent.
pub const MAX_BODY: usize = 16 * 1024 * 1024;

/// What the exchange needs of its connection.
struct Ctx {
    host: String,
    port: u16,
    address: SocketAddr,
    injector: Arc<Injector>,
    log: DecisionLog,
    upstream: Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
}

type Answer = Response<Either<Scrubbed, Full<Bytes>>>;

/// Bytes each way, counted at the client's side of the tunnel.
#[derive(Default)]
pub(crate) struct Counts {
    pub up: AtomicU64,
    pub down: AtomicU64,
}

/// Carries the tunnel of `client` (whose first bytes, the ClientHello,
/// are `first`) to `upstream`, intercepted. Ends when the client is done;
/// `Err` is why it could not start or broke.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn intercept<S>(
    client: &mut S,
    first: Vec<u8>,
    upstream: TcpStream,
    host: &str,
    port: u16,
    address: SocketAddr,
    injector: Arc<Injector>,
    log: DecisionLog,
    counts: &Counts,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let server = injector.ca.server_config(host).map_err(|e| e.to_string())?;
    let stream = Counting { inner: Prefixed::new(first, client), counts };
    let client_tls = tokio_rustls::TlsAcceptor::from(server)
        .accept(stream)
        .await
        .map_err(|e| format!("intercepting {host}: the box's TLS handshake failed: {e}"))?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| format!("{host}: {e}"))?;
    let upstream_tls = tokio_rustls::TlsConnector::from(injector.upstream())
        .connect(name, upstream)
        .await
        .map_err(|e| format!("intercepting {host}: the upstream's TLS failed (its certificate is checked): {e}"))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(upstream_tls))
        .await
        .map_err(|e| format!("intercepting {host}: {e}"))?;
    // Owned and 'static: it runs until the upstream closes or the sender goes.
    tokio::spawn(connection);
    let ctx = Arc::new(Ctx { host: host.to_owned(), port, address, injector, log, upstream: Mutex::new(sender) });
    let service = hyper::service::service_fn(move |request| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(exchange(request, &ctx).await) }
    });
    hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(client_tls), service)
        .await
        .map_err(|e| format!("intercepted {host}: {e}"))
}

async fn exchange(request: Request<Incoming>, ctx: &Ctx) -> Answer {
    match forward(request, ctx).await {
        Ok(answer) => answer.map(Either::Left),
        Err(refusal) => {
            line(ctx, Verdict::Refused, format!("box {}: {}", ctx.injector.rules.box_id, refusal.reason), None);
            let mut answer = Response::new(Either::Right(Full::new(Bytes::from(format!("{}\n", refusal.reason)))));
            *answer.status_mut() = hyper::StatusCode::from_u16(refusal.status).unwrap_or(hyper::StatusCode::FORBIDDEN);
            answer
        }
    }
}

async fn forward(request: Request<Incoming>, ctx: &Ctx) -> Result<Response<Scrubbed>, Refused> {
    let (mut parts, body) = request.into_parts();
    let injected = rewrite_head(&mut parts, &ctx.host, ctx.port, &ctx.injector)?;
    // An answer the proxy can read, to scrub: a compressed echo would hide the value.
    parts.headers.remove(hyper::header::ACCEPT_ENCODING);
    let head = parts.method == hyper::Method::HEAD;
    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| Refused {
            status: 413,
            reason: format!("the request body could not be read whole (at most {MAX_BODY} bytes): {e}"),
        })?
        .to_bytes();
    check_body(&body, &ctx.injector.rules)?;
    let outgoing = Request::from_parts(parts, Full::new(body));
    let sent = {
        let mut upstream = ctx.upstream.lock().await;
        upstream
            .ready()
            .await
            .map_err(|e| Refused { status: 502, reason: format!("the upstream {} closed: {e}", ctx.host) })?;
        upstream.send_request(outgoing)
    };
    // Audited once the request is on its way, one line per value put in.
    for i in &injected {
        let reason = format!("box {}: secret {} put in header {}", ctx.injector.rules.box_id, i.secret, i.header);
        line(ctx, Verdict::Allowed, reason, Some(i.secret.clone()));
    }
    let answer =
        sent.await.map_err(|e| Refused { status: 502, reason: format!("the upstream {} failed: {e}", ctx.host) })?;
    let encoded = injected.iter().filter_map(|i| i.encoded.clone());
    Ok(scrubbed(answer, &ctx.injector.pairs().with(encoded), head))
}

/// The answer with every value put back as its placeholder: in its
/// headers now, in its body as it streams (whose length may change, so it
/// loses its `Content-Length` unless it has no body).
fn scrubbed(answer: Response<Incoming>, pairs: &Pairs, head: bool) -> Response<Scrubbed> {
    let (mut parts, body) = answer.into_parts();
    for value in parts.headers.values_mut() {
        if pairs.holds_any(value.as_bytes()) {
            *value = pairs.header(value);
        }
    }
    let bodiless =
        head || parts.status == hyper::StatusCode::NO_CONTENT || parts.status == hyper::StatusCode::NOT_MODIFIED;
    if !bodiless {
        parts.headers.remove(hyper::header::CONTENT_LENGTH);
    }
    Response::from_parts(parts, Scrubbed::new(body, pairs.clone()))
}

fn line(ctx: &Ctx, decision: Verdict, reason: String, secret: Option<String>) {
    ctx.log.record(&Decision {
        time_ms: now_ms(),
        method: Method::Connect,
        name: Some(ctx.host.clone()),
        port: Some(ctx.port),
        address: Some(ctx.address),
        decision,
        reason,
        bytes_up: 0,
        bytes_down: 0,
        secret,
    });
}

/// The client's stream, counting each way.
struct Counting<'a, S> {
    inner: S,
    counts: &'a Counts,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counting<'_, S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = polled {
            self.counts.up.fetch_add((buf.filled().len() - before) as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counting<'_, S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = polled {
            self.counts.down.fetch_add(n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
