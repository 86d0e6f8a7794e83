//! The first bytes of a tunnel: a TLS ClientHello, parsed by rustls's
//! `server::Acceptor` from a copy of the bytes, for its SNI.

use rustls::server::Acceptor;

/// What the bytes so far say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hello {
    /// Not a whole ClientHello yet: read more.
    Incomplete,
    /// A whole ClientHello, with its SNI if it has one.
    Complete(Option<String>),
    /// Not a TLS ClientHello; the reason.
    NotTls(String),
}

/// Parses `bytes`, everything the client has sent in the tunnel so far.
/// The bytes themselves are left untouched for forwarding.
pub(crate) fn client_hello(bytes: &[u8]) -> Hello {
    let mut acceptor = Acceptor::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Hello::NotTls(e.to_string()),
        }
        match acceptor.accept() {
            Ok(None) => {}
            Ok(Some(accepted)) => {
                let sni = accepted.client_hello().server_name().map(str::to_owned);
                return Hello::Complete(sni);
            }
            Err((e, _alert)) => return Hello::NotTls(e.to_string()),
        }
    }
    Hello::Incomplete
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_bytes_are_not_tls_and_a_prefix_is_incomplete() {
        assert!(matches!(client_hello(b"GET / HTTP/1.1\r\n\r\n"), Hello::NotTls(_)));
        assert_eq!(client_hello(b""), Hello::Incomplete);
        // A handshake record header announcing 512 bytes, and only 3 of them.
        assert_eq!(client_hello(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01]), Hello::Incomplete);
    }
}
