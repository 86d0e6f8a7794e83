//! `tinybox serve --listen ADDR` beyond loopback, live: refused in one line
//! without `--tls-cert`/`--tls-key` (nothing bound, nothing made in the
//! store); with them, the server speaks TLS on every address, so a client
//! holding the CA the test made gets its answers and one without that CA
//! (or speaking cleartext HTTP) gets none.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tinybox_tests::tls_world::TlsWorld;
use tinybox_tests::{Cli, KillOnDrop};

#[test]
fn beyond_loopback_without_tls_is_refused_and_changes_nothing() {
    let cli = Cli::new();
    let before = tinybox_tests::tree_contents(cli.home.path());
    for args in [&["serve", "--listen", "0.0.0.0:0"][..], &["serve", "--listen", "[::]:0"][..]] {
        let out = cli.cmd(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(args[2]) && err.contains("--tls-cert"), "{err}");
    }
    // A certificate that is not one is refused the same way, before anything.
    let world = TlsWorld::new(&["localhost"]);
    let out = cli
        .cmd(&["serve", "--listen", "0.0.0.0:0", "--tls-cert"])
        .arg(&world.key)
        .arg("--tls-key")
        .arg(&world.key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().count() == 1 && err.contains("--tls-cert"), "{err}");
    assert_eq!(tinybox_tests::tree_contents(cli.home.path()), before, "a refused serve changed the store");
}

/// A TLS client trusting `roots`.
fn client(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// `GET /v1/boxes` over TLS: the answer's (status, JSON), or the TLS error.
fn get_boxes(config: Arc<rustls::ClientConfig>, port: u16, token: &str) -> Result<(u16, Value), String> {
    let conn = rustls::ClientConnection::new(config, ServerName::try_from("localhost").unwrap().to_owned())
        .map_err(|e| e.to_string())?;
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let head = format!(
        "GET /v1/boxes HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // The server may close without close_notify once it has answered.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP answer: {raw:?}"))?;
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("no status")?;
    Ok((status, serde_json::from_str(body).map_err(|e| e.to_string())?))
}

#[test]
fn beyond_loopback_with_tls_answers_a_client_with_the_ca_and_no_one_else() {
    let world = TlsWorld::new(&["localhost", "127.0.0.1"]);
    let cli = Cli::new();
    let mut child = cli
        .cmd(&["serve", "--listen", "0.0.0.0:0", "--tls-cert"])
        .arg(&world.cert)
        .arg("--tls-key")
        .arg(&world.key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let _server = KillOnDrop(child);
    let port: u16 = first
        .trim()
        .strip_prefix("https://0.0.0.0:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not an https address: {first:?}"));
    let token = std::fs::read_to_string(cli.home.path().join("api-token")).unwrap();

    let mut ours = rustls::RootCertStore::empty();
    ours.add(rustls::pki_types::CertificateDer::from_pem_file(&world.ca).unwrap()).unwrap();
    assert_eq!(get_boxes(client(ours), port, token.trim()), Ok((200, json!([]))));

    // Another CA (the machine's would do as well): the handshake fails.
    let other = TlsWorld::new(&["localhost"]);
    let mut theirs = rustls::RootCertStore::empty();
    theirs.add(rustls::pki_types::CertificateDer::from_pem_file(&other.ca).unwrap()).unwrap();
    let refused = get_boxes(client(theirs), port, token.trim()).unwrap_err();
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");

    // Cleartext HTTP on the TLS port is not answered as HTTP.
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = plain.write_all(b"GET /v1/boxes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut raw = Vec::new();
    let _ = plain.read_to_end(&mut raw);
    assert!(!raw.starts_with(b"HTTP/"), "a cleartext request was answered: {:?}", String::from_utf8_lossy(&raw));
}
