//! The proxy on a UNIX socket, and its resolvers: a DNS server of the
//! caller's choosing (a small one run here) and the system's.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tinybox_egress::{Resolve, ResolverChoice, SystemResolver, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UdpSocket, UnixListener, UnixStream};

#[tokio::test]
async fn the_proxy_serves_a_unix_socket_the_same_way() {
    let mut upstream = HttpUpstream::start().await;
    let port = upstream.port;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("egress.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (config, mut decisions) = config(&[format!("web.test:{port}"), format!("127.0.0.1:{port}")], test_resolver());
    let task = tokio::spawn(tinybox_egress::serve(listener, Arc::new(config)));

    let mut client = UnixStream::connect(&path).await.unwrap();
    let request = format!("GET http://web.test:{port}/over-unix HTTP/1.1\r\nHost: web.test:{port}\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    assert!(answer.ends_with("upstream saw GET /over-unix HTTP/1.1 with 0 body bytes"), "{answer}");
    assert!(upstream.received().await.starts_with("GET /over-unix HTTP/1.1\r\n"));
    let line = decisions.recv().await.unwrap();
    let d = tinybox_egress::read_decisions(&line[..]).unwrap().remove(0);
    assert_eq!(d.decision, Verdict::Allowed);
    task.abort();
}

/// A DNS server on 127.0.0.1 answering A queries for `names`; every other
/// name is NXDOMAIN, and AAAA queries for known names have no answer.
async fn dns_server(names: &'static [(&'static str, Ipv4Addr)]) -> SocketAddr {
    let socket = UdpSocket::bind((LOCALHOST, 0)).await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((n, peer)) = socket.recv_from(&mut buf).await else { return };
            if let Some(reply) = dns_answer(&buf[..n], names) {
                let _ = socket.send_to(&reply, peer).await;
            }
        }
    });
    addr
}

fn dns_answer(query: &[u8], names: &[(&str, Ipv4Addr)]) -> Option<Vec<u8>> {
    // Header (12 bytes), then one question: labels, type, class.
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = *query.get(at)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(at..at + len)?).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    let question = &query[12..at + 4];
    let name = labels.join(".");
    let found = names.iter().find(|(n, _)| *n == name).map(|(_, ip)| *ip);
    let mut out = query[..2].to_vec();
    let rcode = if found.is_some() { 0 } else { 3 };
    out.extend_from_slice(&[0x81, 0x80 | rcode]);
    let answers = u16::from(found.is_some() && qtype == 1);
    out.extend_from_slice(&[0, 1, 0, answers as u8, 0, 0, 0, 0]);
    out.extend_from_slice(question);
    if let (Some(ip), 1) = (found, answers) {
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        out.extend_from_slice(&ip.octets());
    }
    Some(out)
}

#[tokio::test]
async fn the_dns_resolver_asks_the_configured_nameserver_only() {
    static NAMES: [(&str, Ipv4Addr); 2] =
        [("web.test", Ipv4Addr::new(127, 0, 0, 1)), ("far.test", Ipv4Addr::new(93, 184, 216, 34))];
    let server = dns_server(&NAMES).await;
    let resolver = ResolverChoice::Dns { server }.build(Duration::from_secs(5)).unwrap();
    assert_eq!(resolver.resolve("web.test").await.unwrap(), vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    assert_eq!(resolver.resolve("far.test").await.unwrap(), vec![IpAddr::V4(NAMES[1].1)]);
    assert!(resolver.resolve("missing.test").await.unwrap().is_empty());
    // (hickory answers `localhost` itself, RFC 6761; the address rule
    // refuses what it gives unless an address entry lists it.)
}

#[tokio::test]
async fn a_proxy_with_the_dns_resolver_tunnels_to_a_name_that_server_gives() {
    static NAMES: [(&str, Ipv4Addr); 1] = [("web.test", Ipv4Addr::new(127, 0, 0, 1))];
    let server = dns_server(&NAMES).await;
    let upstream = TlsUpstream::start().await;
    let port = upstream.port;
    let (mut config, rx) = config(&[format!("web.test:{port}"), format!("127.0.0.1:{port}")], test_resolver());
    config.resolver = ResolverChoice::Dns { server }.build(Duration::from_secs(5)).unwrap();
    let mut proxy = start(config, rx).await;
    let (tunnel, head) = connect(proxy.addr, &format!("web.test:{port}")).await;
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    assert_eq!(tls_hello(tunnel, "web.test", &upstream.cert).await.unwrap().answer, "sni=web.test line=hello\n");
    assert_eq!(proxy.decision().await.decision, Verdict::Allowed);
}

#[tokio::test]
async fn the_system_resolver_reads_the_hosts_file() {
    let found = SystemResolver.resolve("localhost").await.unwrap();
    assert!(found.iter().all(|ip| ip.is_loopback()) && !found.is_empty(), "{found:?}");
    let choice: ResolverChoice = serde_json::from_str(r#"{"kind":"dns","server":"127.0.0.1:5353"}"#).unwrap();
    assert_eq!(choice, ResolverChoice::Dns { server: "127.0.0.1:5353".parse().unwrap() });
    assert_eq!(serde_json::to_string(&ResolverChoice::System).unwrap(), r#"{"kind":"system"}"#);
}
