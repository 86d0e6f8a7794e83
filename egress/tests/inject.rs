//! The injecting proxy in process (ADR 0032): a box's request to a bound
//! host carries the real value upstream, verified TLS both ways; the
//! placeholder in a URL, a body, over plain HTTP, to an unbound host or
//! with another Host is never replaced, and refused where the proxy sees it.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{HttpUpstream, LOCALHOST, config, connect, find, start, test_resolver};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tinybox_egress::inject::Injector;
use tinybox_egress::secrets::{InjectRules, SecretRule};
use tinybox_egress::{Decision, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

const VALUE: &str = "the-real-value-7f3a";
const PLACEHOLDER: &str = "tinybox-placeholder-0123456789abcdef0123456789abcdef";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// An HTTPS server for `web.test` and `other.test` with a certificate of
/// its own CA (written to `ca_file`): each request's head goes to the
/// channel, and the answer is `ok` (never an echo).
struct HttpsUpstream {
    port: u16,
    cert: CertificateDer<'static>,
    heads: UnboundedReceiver<String>,
    _ca_file: tempfile::NamedTempFile,
    ca_path: std::path::PathBuf,
}

async fn https_upstream() -> HttpsUpstream {
    let names = vec!["web.test".to_owned(), "other.test".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names).unwrap();
    let cert = certified.cert.der().clone();
    let ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca_file.path(), certified.cert.pem()).unwrap();
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
    let (tx, heads) = unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else { return };
                let mut got = Vec::new();
                let mut chunk = [0u8; 4096];
                while find(&got, b"\r\n\r\n").is_none() {
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&got).into_owned();
                let _ = tx.send(head.clone());
                if head.starts_with("GET /echo ") {
                    // What an httpbin-like host does: the request, headers and all, in its answer.
                    let seen =
                        head.lines().find(|l| l.to_ascii_lowercase().starts_with("authorization:")).unwrap_or("");
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nX-Seen: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{head}",
                        seen.trim(),
                        head.len()
                    );
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                    return;
                }
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await;
                let _ = tls.shutdown().await;
            });
        }
    });
    let ca_path = ca_file.path().to_owned();
    HttpsUpstream { port, cert, heads, _ca_file: ca_file, ca_path }
}

fn rules() -> InjectRules {
    InjectRules {
        box_id: "box-1".into(),
        secrets: vec![SecretRule { name: "T".into(), placeholder: PLACEHOLDER.into(), hosts: vec!["web.test".into()] }],
        headers: BTreeMap::from([("web.test".to_owned(), vec!["X-Api-Key: key={T}".to_owned()])]),
    }
}

fn injector(extra_roots: Option<&std::path::Path>) -> Injector {
    let values = BTreeMap::from([("T".to_owned(), VALUE.to_owned())]);
    Injector::new(rules(), values, extra_roots).unwrap()
}

/// A proxy for a box with secrets, allowing both names and 127.0.0.1 on `port`.
async fn proxy(port: u16, injector: Injector) -> common::Proxy {
    let entries = [format!("web.test:{port}"), format!("other.test:{port}"), format!("127.0.0.1:{port}")];
    let (mut config, rx) = config(&entries, test_resolver());
    config.injector = Some(Arc::new(injector));
    start(config, rx).await
}

/// Through the proxy to `host`, TLS trusting `roots`: sends `request` and
/// reads the answer to the end (`Err` when TLS or the exchange fails).
async fn exchange(
    proxy: std::net::SocketAddr,
    host: &str,
    port: u16,
    roots: &[CertificateDer<'static>],
    request: &str,
) -> std::io::Result<String> {
    let (tunnel, head) = connect(proxy, &format!("{host}:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r.clone()).unwrap();
    }
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(ServerName::try_from(host.to_owned()).unwrap(), tunnel)
        .await?;
    tls.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

fn box_ca(injector: &Injector) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(injector.ca.pem().as_bytes()).unwrap()
}

async fn next_decision_where(proxy: &mut common::Proxy, pred: impl Fn(&Decision) -> bool) -> Decision {
    loop {
        let d = proxy.decision().await;
        if pred(&d) {
            return d;
        }
    }
}

#[tokio::test]
async fn a_bound_host_gets_the_real_value_in_headers_and_the_audit_names_the_secret() {
    let mut up = https_upstream().await;
    let inj = injector(Some(&up.ca_path));
    let ca = box_ca(&inj);
    let bundle = inj.bundle();
    assert!(bundle.ends_with(inj.ca.pem()), "the box's bundle ends with its CA");
    let mut p = proxy(up.port, inj).await;
    let request = format!(
        "GET /v1 HTTP/1.1\r\nHost: web.test:{}\r\nAuthorization: Bearer {PLACEHOLDER}\r\nConnection: close\r\n\r\n",
        up.port
    );
    let answer = exchange(p.addr, "web.test", up.port, &[ca], &request).await.unwrap();
    // Chunked: a scrubbed body's length is not known ahead.
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\r\nok\r\n"), "{answer}");
    let seen = up.heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(seen.contains(&format!("authorization: bearer {VALUE}")), "{seen}");
    assert!(seen.contains(&format!("x-api-key: key={VALUE}")), "the header rule: {seen}");
    assert!(!seen.contains(PLACEHOLDER), "{seen}");
    let audit = next_decision_where(&mut p, |d| d.secret.is_some()).await;
    assert_eq!((audit.secret.as_deref(), audit.name.as_deref()), (Some("T"), Some("web.test")));
    assert_eq!(audit.decision, Verdict::Allowed);
    assert!(audit.reason.contains("box box-1: secret T put in header authorization"), "{}", audit.reason);
    assert!(!serde_json::to_string(&audit).unwrap().contains(VALUE));
}

#[tokio::test]
async fn a_placeholder_in_the_url_or_the_body_or_with_another_host_is_refused_and_nothing_reaches_upstream() {
    let mut up = https_upstream().await;
    let inj = injector(Some(&up.ca_path));
    let ca = box_ca(&inj);
    let mut p = proxy(up.port, inj).await;
    let port = up.port;
    let cases = [
        (
            format!("GET /?key={PLACEHOLDER} HTTP/1.1\r\nHost: web.test:{port}\r\nConnection: close\r\n\r\n"),
            "403",
            "in the URL",
        ),
        (
            format!(
                "POST / HTTP/1.1\r\nHost: web.test:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\nk={PLACEHOLDER}",
                PLACEHOLDER.len() + 2
            ),
            "403",
            "in the request body",
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: elsewhere.test\r\nAuthorization: {PLACEHOLDER}\r\nConnection: close\r\n\r\n"
            ),
            "400",
            "is not web.test",
        ),
    ];
    for (request, status, why) in cases {
        let answer = exchange(p.addr, "web.test", port, std::slice::from_ref(&ca), &request).await.unwrap();
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{why}: {answer}");
        assert!(answer.contains(why), "{answer}");
        let refused = next_decision_where(&mut p, |d| d.decision == Verdict::Refused).await;
        assert!(refused.reason.contains(why), "{refused:?}");
    }
    assert!(up.heads.try_recv().is_err(), "nothing reached the upstream");
}

#[tokio::test]
async fn an_unbound_host_is_passed_through_untouched_with_the_placeholder_as_is() {
    let mut up = https_upstream().await;
    let inj = injector(Some(&up.ca_path));
    let ca = box_ca(&inj);
    let p = proxy(up.port, inj).await;
    let request =
        format!("GET / HTTP/1.1\r\nHost: other.test\r\nAuthorization: {PLACEHOLDER}\r\nConnection: close\r\n\r\n");
    // The upstream's own certificate: nothing was intercepted ...
    let answer = exchange(p.addr, "other.test", up.port, &[up.cert.clone()], &request).await.unwrap();
    assert!(answer.ends_with("ok"), "{answer}");
    let seen = up.heads.recv().await.unwrap();
    assert!(seen.contains(PLACEHOLDER) && !seen.contains(VALUE), "{seen}");
    // ... so the box's CA is no use there.
    assert!(exchange(p.addr, "other.test", up.port, &[ca], &request).await.is_err());
}

#[tokio::test]
async fn an_upstream_the_proxy_cannot_verify_gets_nothing() {
    let mut up = https_upstream().await;
    // No TINYBOX_EGRESS_CA: the upstream's certificate is of a CA nobody trusts.
    let inj = injector(None);
    let ca = box_ca(&inj);
    let mut p = proxy(up.port, inj).await;
    let request =
        format!("GET / HTTP/1.1\r\nHost: web.test\r\nAuthorization: {PLACEHOLDER}\r\nConnection: close\r\n\r\n");
    let answer = exchange(p.addr, "web.test", up.port, &[ca], &request).await;
    assert!(answer.as_deref().map_or(true, str::is_empty), "{answer:?}");
    let line = next_decision_where(&mut p, |d| d.name.as_deref() == Some("web.test")).await;
    assert_eq!(line.decision, Verdict::Refused, "{line:?}");
    assert!(line.reason.contains("the upstream's TLS failed"), "{line:?}");
    assert!(up.heads.try_recv().is_err());
}

#[tokio::test]
async fn a_placeholder_over_plain_http_is_refused_before_anything_is_sent() {
    let mut up = HttpUpstream::start().await;
    let inj = injector(None);
    let mut p = proxy(up.port, inj).await;
    let mut stream = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let port = up.port;
    let request = format!(
        "GET http://web.test:{port}/ HTTP/1.1\r\nHost: web.test:{port}\r\nAuthorization: Bearer {PLACEHOLDER}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("over plain http"), "{answer}");
    let d = p.decision().await;
    assert_eq!(d.decision, Verdict::Refused);
    assert!(d.address.is_none(), "no upstream connection was made: {d:?}");
    drop(p);
    let _ = &mut up;
}

#[tokio::test]
async fn a_host_that_echoes_the_request_hands_back_the_placeholder_never_the_value() {
    let mut up = https_upstream().await;
    let inj = injector(Some(&up.ca_path));
    let ca = box_ca(&inj);
    let p = proxy(up.port, inj).await;
    let request = format!(
        "GET /echo HTTP/1.1\r\nHost: web.test\r\nAuthorization: Bearer {PLACEHOLDER}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    );
    let answer = exchange(p.addr, "web.test", up.port, &[ca], &request).await.unwrap();
    let seen = up.heads.recv().await.unwrap();
    assert!(seen.contains(VALUE), "the upstream got the value: {seen}");
    assert!(!seen.to_ascii_lowercase().contains("accept-encoding"), "asked for an answer it can read: {seen}");
    assert!(!answer.contains(VALUE), "the echo reached the box with the value: {answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains(&format!("x-seen: authorization: bearer {PLACEHOLDER}")), "{answer}");
    let echoed = format!("authorization: bearer {PLACEHOLDER}\r\nx-api-key: key={PLACEHOLDER}\r\n");
    assert!(lower.contains(&echoed), "the echoed body, scrubbed: {answer}");
}
