//! The proxy end to end on 127.0.0.1: real upstream HTTP and TLS servers,
//! clients through CONNECT and plain requests, and the decision log.

mod common;

use common::*;
use tinybox_egress::{Method, Verdict};

fn entries(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn an_allowed_name_over_plain_http_reaches_upstream_once_and_is_logged() {
    let mut upstream = HttpUpstream::start().await;
    let port = upstream.port;
    let mut proxy = proxy(&entries(&[&format!("web.test:{port}"), &format!("127.0.0.1:{port}")])).await;
    let request = format!(
        "GET http://Web.Test:{port}/hello?x=1 HTTP/1.1\r\nHost: web.test:{port}\r\nProxy-Connection: keep-alive\r\nUser-Agent: t\r\n\r\n"
    );
    let answer = exchange(proxy.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("upstream saw GET /hello?x=1 HTTP/1.1 with 0 body bytes"), "{answer}");
    let seen = upstream.received().await;
    assert!(seen.starts_with("GET /hello?x=1 HTTP/1.1\r\n"), "{seen}");
    assert!(seen.contains("\r\nConnection: close\r\n"), "{seen}");
    assert!(seen.contains("\r\nUser-Agent: t\r\n"), "{seen}");
    assert!(!seen.to_ascii_lowercase().contains("proxy-connection"), "{seen}");
    let d = proxy.decision().await;
    assert_eq!(d.decision, Verdict::Allowed, "{d:?}");
    assert_eq!(d.method, Method::Http);
    assert_eq!(d.name.as_deref(), Some("web.test"));
    assert_eq!(d.port, Some(port));
    assert_eq!(d.address, Some(std::net::SocketAddr::new(LOCALHOST, port)));
    assert_eq!(d.reason, format!("allowed by web.test:{port}"));
    assert_eq!(d.bytes_up, seen.len() as u64);
    assert_eq!(d.bytes_down, answer.len() as u64);
}

#[tokio::test]
async fn an_allowed_name_over_https_tunnels_with_the_right_sni_and_is_logged() {
    let upstream = TlsUpstream::start().await;
    let port = upstream.port;
    let mut proxy = proxy(&entries(&[&format!("web.test:{port}"), &format!("127.0.0.1:{port}")])).await;
    let (tunnel, head) = connect(proxy.addr, &format!("web.test:{port}")).await;
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    let tunneled = tls_hello(tunnel, "web.test", &upstream.cert).await.unwrap();
    assert_eq!(tunneled.answer, "sni=web.test line=hello\n");
    let d = proxy.decision().await;
    assert_eq!(d.decision, Verdict::Allowed, "{d:?}");
    assert_eq!(d.method, Method::Connect);
    assert_eq!((d.name.as_deref(), d.port), (Some("web.test"), Some(port)));
    assert_eq!(d.address, Some(std::net::SocketAddr::new(LOCALHOST, port)));
    assert_eq!(d.reason, format!("allowed by web.test:{port}"));
    // Every tunnel byte each way, the buffered ClientHello included.
    assert_eq!((d.bytes_up, d.bytes_down), (tunneled.sent, tunneled.received), "{d:?}");
}

#[tokio::test]
async fn an_unlisted_name_is_refused_with_403_and_its_reason() {
    let upstream = TlsUpstream::start().await;
    let port = upstream.port;
    let mut proxy = proxy(&entries(&[&format!("web.test:{port}"), &format!("127.0.0.1:{port}")])).await;
    let (_, answer) = connect(proxy.addr, &format!("other.test:{port}")).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(answer.ends_with(&format!("\r\n\r\nname other.test port {port} is not on the allowlist\n")), "{answer}");
    let d = proxy.decision().await;
    assert_eq!((d.decision, d.method, d.address), (Verdict::Refused, Method::Connect, None));
    assert_eq!(d.reason, format!("name other.test port {port} is not on the allowlist"));

    // The listed name on an unlisted port, and a plain request, likewise.
    let (_, answer) = connect(proxy.addr, "web.test:443").await;
    assert!(answer.contains("name web.test port 443 is not on the allowlist"), "{answer}");
    let plain = format!("GET http://other.test:{port}/ HTTP/1.1\r\nHost: other.test:{port}\r\n\r\n");
    let answer = exchange(proxy.addr, plain.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert_eq!(proxy.decision().await.decision, Verdict::Refused);
    let d = proxy.decision().await;
    assert_eq!((d.decision, d.method), (Verdict::Refused, Method::Http));
}

#[tokio::test]
async fn an_address_literal_is_refused_unless_an_address_entry_lists_it() {
    let upstream = TlsUpstream::start().await;
    let port = upstream.port;
    let mut refusing = proxy(&entries(&[&format!("web.test:{port}")])).await;
    let (_, answer) = connect(refusing.addr, &format!("127.0.0.1:{port}")).await;
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(answer.contains(&format!("address 127.0.0.1 port {port} is not on the allowlist")), "{answer}");
    assert_eq!(refusing.decision().await.decision, Verdict::Refused);

    let mut allowing = proxy(&entries(&[&format!("127.0.0.1:{port}")])).await;
    let (tunnel, head) = connect(allowing.addr, &format!("127.0.0.1:{port}")).await;
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    // A client connecting to an address sends no SNI.
    let answer = tls_hello(tunnel, "127.0.0.1", &upstream.cert).await.unwrap().answer;
    assert_eq!(answer, "sni=none line=hello\n");
    let d = allowing.decision().await;
    assert_eq!((d.decision, d.name.as_deref()), (Verdict::Allowed, Some("127.0.0.1")));
    assert_eq!(d.reason, format!("allowed by 127.0.0.1:{port}"));
}

#[tokio::test]
async fn a_listed_name_resolving_to_a_local_address_is_refused() {
    let upstream = TlsUpstream::start().await;
    let port = upstream.port;
    // Rebinding: the name is listed, its addresses are not.
    let resolver = test_resolver().with("rebind.test", &["10.0.0.7".parse().unwrap(), LOCALHOST]);
    let (config, rx) = config(&entries(&[&format!("web.test:{port}"), &format!("rebind.test:{port}")]), resolver);
    let mut proxy = start(config, rx).await;
    let (_, answer) = connect(proxy.addr, &format!("web.test:{port}")).await;
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    assert!(answer.contains("every address of web.test is refused: address 127.0.0.1 is"), "{answer}");
    let d = proxy.decision().await;
    assert_eq!((d.decision, d.address), (Verdict::Refused, None));
    let (_, answer) = connect(proxy.addr, &format!("rebind.test:{port}")).await;
    assert!(
        answer.contains("every address of rebind.test is refused: address 10.0.0.7 is private (RFC 1918)"),
        "{answer}"
    );
    assert_eq!(proxy.decision().await.decision, Verdict::Refused);
    let (_, answer) = connect(proxy.addr, &format!("nowhere.test:{port}")).await;
    assert!(answer.contains("is not on the allowlist"), "{answer}");
}

#[tokio::test]
async fn a_tunnel_whose_sni_is_not_the_connect_name_is_cut() {
    let upstream = TlsUpstream::start().await;
    let port = upstream.port;
    let mut proxy = proxy(&entries(&[&format!("web.test:{port}"), &format!("127.0.0.1:{port}")])).await;
    let (tunnel, head) = connect(proxy.addr, &format!("web.test:{port}")).await;
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    let result = tls_hello(tunnel, "other.test", &upstream.cert).await;
    assert!(result.is_err(), "{result:?}");
    let d = proxy.decision().await;
    assert_eq!(d.decision, Verdict::Refused, "{d:?}");
    assert_eq!(d.reason, r#"sni "other.test" does not match the CONNECT name "web.test""#);
    assert_eq!((d.bytes_up, d.bytes_down), (0, 0), "nothing was forwarded");

    // Bytes that are not TLS at all are cut the same way.
    let (mut tunnel, _) = connect(proxy.addr, &format!("web.test:{port}")).await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tunnel.write_all(b"GET / HTTP/1.1\r\nHost: web.test\r\n\r\n").await.unwrap();
    let mut rest = Vec::new();
    let _ = tunnel.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "{rest:?}");
    let d = proxy.decision().await;
    assert!(d.reason.starts_with("sni: the tunnel did not start with a TLS ClientHello"), "{d:?}");
}

#[tokio::test]
async fn with_the_sni_check_off_a_mismatch_goes_through_the_negative_control() {
    let upstream = TlsUpstream::start().await;
    let port = upstream.port;
    let (mut config, rx) =
        config(&entries(&[&format!("web.test:{port}"), &format!("127.0.0.1:{port}")]), test_resolver());
    config.check_sni = false;
    let mut proxy = start(config, rx).await;
    let (tunnel, _) = connect(proxy.addr, &format!("web.test:{port}")).await;
    let answer = tls_hello(tunnel, "other.test", &upstream.cert).await.unwrap().answer;
    assert_eq!(answer, "sni=other.test line=hello\n");
    assert_eq!(proxy.decision().await.decision, Verdict::Allowed);
}

#[tokio::test]
async fn a_chunked_request_body_is_refused_before_any_upstream_connection() {
    let upstream = HttpUpstream::start().await;
    let port = upstream.port;
    let mut proxy = proxy(&entries(&[&format!("web.test:{port}"), &format!("127.0.0.1:{port}")])).await;
    let request = format!(
        "POST http://web.test:{port}/up HTTP/1.1\r\nHost: web.test:{port}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );
    let answer = exchange(proxy.addr, request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 411 Length Required\r\n"), "{answer}");
    assert!(answer.contains("chunked"), "{answer}");
    let d = proxy.decision().await;
    assert_eq!((d.decision, d.address), (Verdict::Refused, None));
}

#[tokio::test]
async fn a_second_request_smuggled_on_the_same_connection_never_reaches_upstream() {
    let mut upstream = HttpUpstream::start().await;
    let port = upstream.port;
    let mut proxy = proxy(&entries(&[&format!("web.test:{port}"), &format!("127.0.0.1:{port}")])).await;
    let second = format!("GET http://web.test:{port}/smuggled HTTP/1.1\r\nHost: web.test:{port}\r\n\r\n");
    let request = format!(
        "POST http://web.test:{port}/first HTTP/1.1\r\nHost: web.test:{port}\r\nContent-Length: 5\r\n\r\nhello{second}GET /origin-form-smuggled HTTP/1.1\r\nHost: web.test\r\n\r\n"
    );
    let answer = exchange(proxy.addr, request.as_bytes()).await;
    assert!(answer.ends_with("upstream saw POST /first HTTP/1.1 with 5 body bytes"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 200").count(), 1, "{answer}");
    let seen = upstream.received().await;
    assert!(seen.ends_with("\r\n\r\nhello"), "{seen}");
    assert!(!seen.contains("smuggled"), "{seen}");
    let d = proxy.decision().await;
    assert_eq!(d.decision, Verdict::Allowed);
    assert_eq!(d.bytes_up, seen.len() as u64);
}

#[tokio::test]
async fn requests_that_are_not_proxy_requests_are_refused_with_a_reason() {
    let mut proxy = proxy(&entries(&["web.test"])).await;
    let table: &[(String, &str, &str)] = &[
        ("GET /x HTTP/1.1\r\nHost: web.test\r\n\r\n".into(), "400", "not a proxy request"),
        ("TRACE http://web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n".into(), "405", "method \"TRACE\" is refused"),
        ("GET https://web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n".into(), "400", "use CONNECT"),
        ("GET http://web.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n".into(), "400", "does not match"),
        ("GET http://web.test/ HTTP/1.1\r\n\r\n".into(), "400", "no Host header"),
        (
            "GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\nHost: web.test\r\n\r\n".into(),
            "400",
            "more than one Host",
        ),
        ("CONNECT web.test HTTP/1.1\r\n\r\n".into(), "400", "CONNECT needs host:port"),
        ("CONNECT bücher.test:443 HTTP/1.1\r\n\r\n".into(), "400", "non-ASCII"),
        ("\x16\x03\x01\x00\x05hello\r\n\r\n".into(), "400", "not an HTTP/1 request"),
        (format!("GET http://web.test/ HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000)), "431", "over 16384 bytes"),
    ];
    for (request, status, reason) in table {
        let answer = exchange(proxy.addr, request.as_bytes()).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{request:.60}: {answer}");
        assert!(answer.contains(reason), "{request:.60}: {answer}");
        assert!(answer.contains("\r\nConnection: close\r\n"), "{answer}");
        let d = proxy.decision().await;
        assert_eq!(d.decision, Verdict::Refused, "{d:?}");
        assert!(d.reason.contains(reason), "{d:?}");
    }
}

#[tokio::test]
async fn a_head_that_never_ends_gets_408_and_any_stream_type_is_served() {
    // An in-memory stream: `handle_connection` needs only AsyncRead + AsyncWrite.
    let (mut config, mut decisions) = config(&entries(&["web.test"]), test_resolver());
    config.timeouts.head = std::time::Duration::from_millis(20);
    let (mut client, server) = tokio::io::duplex(4096);
    let proxy_side = tokio::spawn(async move { tinybox_egress::handle_connection(server, &config).await });
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    client.write_all(b"GET http://web.test/ HTTP/1.1\r\nHost: web").await.unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    drop(client);
    proxy_side.await.unwrap();
    let line = decisions.recv().await.unwrap();
    let d = tinybox_egress::read_decisions(&line[..]).unwrap().remove(0);
    assert_eq!(d.decision, Verdict::Refused);
    assert_eq!(d.reason, "no whole request head within the time allowed");
}
