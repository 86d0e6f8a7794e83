//! A TLS 1.3 ClientHello with a chosen SNI, as bytes the kit sends through a
//! proxy's CONNECT tunnel with `nc`, so the allowlist probes need no TLS
//! client in the box. It is a real hello — x25519 key share (RFC 7748's
//! test public key), the TLS 1.3 suites and ECDHE ones for 1.2, ECDSA and
//! RSA signatures — so a TLS server answers it with a ServerHello; the kit
//! never finishes the handshake, it only looks for that answer.

/// RFC 7748 section 6.1, Alice's public key: a valid x25519 point.
const KEY_SHARE: [u8; 32] = [
    0x85, 0x20, 0xf0, 0x09, 0x89, 0x30, 0xa7, 0x54, 0x74, 0x8b, 0x7d, 0xdc, 0xb4, 0x3e, 0xf7, 0x5a, 0x0d, 0xbf, 0x3a,
    0x0d, 0x26, 0x38, 0x1a, 0xf4, 0xeb, 0xa4, 0xa9, 0x8e, 0xaa, 0x9b, 0x4e, 0x6a,
];

fn u16_be(n: usize) -> [u8; 2] {
    u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes()
}

/// `body` behind its two-byte length.
fn with_len(body: &[u8]) -> Vec<u8> {
    let mut out = u16_be(body.len()).to_vec();
    out.extend_from_slice(body);
    out
}

fn extension(kind: u16, body: &[u8]) -> Vec<u8> {
    let mut out = kind.to_be_bytes().to_vec();
    out.extend(with_len(body));
    out
}

/// The whole TLS record holding a ClientHello that names `sni`.
pub fn client_hello(sni: &str) -> Vec<u8> {
    let mut name = vec![0u8];
    name.extend(with_len(sni.as_bytes()));
    let mut extensions = extension(0x0000, &with_len(&name));
    extensions.extend(extension(0x000a, &with_len(&[0x00, 0x1d, 0x00, 0x17])));
    extensions.extend(extension(0x000b, &[0x01, 0x00]));
    let signatures = [0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05, 0x03, 0x08, 0x05, 0x05, 0x01, 0x08, 0x06, 0x06, 0x01];
    extensions.extend(extension(0x000d, &with_len(&signatures)));
    extensions.extend(extension(0x002b, &[0x04, 0x03, 0x04, 0x03, 0x03]));
    let mut share = vec![0x00, 0x1d];
    share.extend(with_len(&KEY_SHARE));
    extensions.extend(extension(0x0033, &with_len(&share)));

    let mut hello = vec![0x03, 0x03];
    hello.extend((0u8..32).map(|i| i.wrapping_mul(7).wrapping_add(1)));
    hello.push(32);
    hello.extend((0u8..32).map(|i| i.wrapping_mul(13).wrapping_add(5)));
    let suites = [0x13, 0x01, 0x13, 0x02, 0x13, 0x03, 0xc0, 0x2b, 0xc0, 0x2f, 0xc0, 0x2c, 0xc0, 0x30];
    hello.extend(with_len(&suites));
    hello.extend([0x01, 0x00]);
    hello.extend(with_len(&extensions));

    let len = u32::try_from(hello.len()).unwrap_or(u32::MAX).to_be_bytes();
    let mut handshake = vec![0x01, len[1], len[2], len[3]];
    handshake.extend(hello);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend(with_len(&handshake));
    record
}

/// `bytes` as a `printf` format of octal escapes, which every `printf`
/// (POSIX, busybox, dash) writes back byte for byte.
pub fn printf_octal(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

/// Whether `reply` (what came back through a tunnel) starts with a TLS
/// handshake record holding a ServerHello.
pub fn is_server_hello(reply: &[u8]) -> bool {
    reply.len() > 5 && reply[0] == 0x16 && reply[1] == 0x03 && reply[5] == 0x02
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hello_is_one_record_whose_lengths_add_up_and_names_the_sni() {
        let r = client_hello("allowed.test");
        assert_eq!(&r[..3], [0x16, 0x03, 0x01]);
        assert_eq!(usize::from(u16::from_be_bytes([r[3], r[4]])), r.len() - 5);
        assert_eq!(r[5], 0x01, "a ClientHello");
        let body = u32::from_be_bytes([0, r[6], r[7], r[8]]) as usize;
        assert_eq!(body, r.len() - 9);
        let at = r.windows(12).position(|w| w == b"allowed.test").expect("the name is in it");
        // server_name: list length, type host_name, name length, name.
        assert_eq!(&r[at - 5..at], [0x00, 0x0f, 0x00, 0x00, 0x0c]);
        assert!(client_hello("b.test").len() < r.len());
    }

    #[test]
    fn octal_escapes_and_server_hellos() {
        assert_eq!(printf_octal(&[0x16, 0x03, 0xff, b'a']), "\\026\\003\\377\\141");
        assert!(is_server_hello(&[0x16, 0x03, 0x03, 0x00, 0x7a, 0x02, 0x00]));
        assert!(!is_server_hello(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]), "an alert");
        assert!(!is_server_hello(b""));
    }
}
