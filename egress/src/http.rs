//! The request head: read within a bound, parsed with httparse, and the
//! pieces of it the proxy checks (the target's host and port, the Host
//! header, the body's framing).

use std::net::IpAddr;

use tokio::io::{AsyncRead, AsyncReadExt};

/// At most this many header lines.
const MAX_HEADERS: usize = 100;

/// A parsed request head.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    /// Every value of the header `name` (case-insensitive).
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }
}

/// Why no head was read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// Over the bound (bytes or header lines).
    TooLarge,
    /// Not HTTP/1.x.
    Malformed(String),
    /// The client closed before a whole head.
    Closed,
    Io(std::io::Error),
}

/// Reads until a whole head is parsed. Returns the head and the bytes that
/// followed it in the same reads.
pub(crate) async fn read_head<S: AsyncRead + Unpin>(stream: &mut S, max: usize) -> Result<(Head, Vec<u8>), HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let room = (max + 1).saturating_sub(buf.len()).min(chunk.len());
        let n = stream.read(&mut chunk[..room]).await.map_err(HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                if len > max {
                    return Err(HeadError::TooLarge);
                }
                let head = Head {
                    method: req.method.unwrap_or_default().to_owned(),
                    target: req.path.unwrap_or_default().to_owned(),
                    version: req.version.unwrap_or(1),
                    headers: req.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect(),
                };
                return Ok((head, buf[len..].to_vec()));
            }
            Ok(httparse::Status::Partial) if buf.len() > max => return Err(HeadError::TooLarge),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(e) => return Err(HeadError::Malformed(e.to_string())),
        }
    }
}

/// A host as a request names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Host {
    /// A normalized DNS name.
    Name(String),
    /// An address literal.
    Ip(IpAddr),
}

impl Host {
    /// As written in a log line and compared with SNI.
    pub fn text(&self) -> String {
        match self {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        }
    }
}

/// Parses `host[:port]`, `[v6][:port]`; `default_port` when there is none
/// (`None`: a port is required). The error is the rule broken.
pub(crate) fn parse_authority(text: &str, default_port: Option<u16>) -> Result<(Host, u16), String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or_else(|| format!("{text:?}: unclosed '['"))?;
        let ip: std::net::Ipv6Addr =
            inside.parse().map_err(|_| format!("{text:?}: not an IPv6 address in brackets"))?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(|| format!("{text:?}: junk after ']'"))?),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        };
        let host = if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
            Host::Ip(IpAddr::V4(ip))
        } else {
            Host::Name(crate::policy::normalize_name(host).map_err(|rule| format!("{host:?}: {rule}"))?)
        };
        (host, port)
    };
    let port = match (port, default_port) {
        (Some(p), _) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("{text:?}: the port must be a number from 1 to 65535")),
        },
        (None, Some(d)) => d,
        (None, None) => return Err(format!("{text:?}: CONNECT needs host:port")),
    };
    Ok((host, port))
}

/// Splits `http://authority/path?query` into the authority and the origin-form
/// target (`/` when the path is empty). The error is the rule broken.
pub(crate) fn split_absolute(target: &str) -> Result<(&str, String), String> {
    let scheme_end = target.find("://").ok_or_else(|| "not an absolute URI".to_owned())?;
    let scheme = &target[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(if scheme.eq_ignore_ascii_case("https") {
            "an https:// URI is refused in a plain request: use CONNECT".to_owned()
        } else {
            format!("scheme {scheme:?} is refused: only http:// (and CONNECT)")
        });
    }
    let rest = &target[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err("credentials in the URI are refused".to_owned());
    }
    if authority.is_empty() {
        return Err("the URI has no host".to_owned());
    }
    let path = match path.split('#').next().unwrap_or("") {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    Ok((authority, path))
}

/// Headers that describe one hop, never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The head to send upstream: origin form, the client's headers without the
/// hop-by-hop ones (and those `Connection` names), then `Connection: close`.
pub(crate) fn origin_head(head: &Head, path: &str) -> Vec<u8> {
    let named: Vec<String> = head
        .values("connection")
        .flat_map(|v| String::from_utf8_lossy(v).split(',').map(|s| s.trim().to_ascii_lowercase()).collect::<Vec<_>>())
        .collect();
    let mut out = format!("{} {} HTTP/1.{}\r\n", head.method, path, head.version).into_bytes();
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || named.contains(&lower) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// The request body's length: the one value of every `Content-Length`
/// (none is 0). A `Transfer-Encoding` is an error (status, reason).
pub(crate) fn body_length(head: &Head) -> Result<u64, (u16, String)> {
    if head.values("transfer-encoding").next().is_some() {
        return Err((411, "transfer-encoded (chunked) request bodies are refused: send Content-Length".to_owned()));
    }
    let mut length = None;
    for value in head.values("content-length") {
        let text = std::str::from_utf8(value).unwrap_or("").trim();
        let n =
            if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) { text.parse::<u64>().ok() } else { None };
        let Some(n) = n else {
            return Err((400, format!("Content-Length {text:?} is not a number")));
        };
        if length.is_some_and(|l| l != n) {
            return Err((400, "conflicting Content-Length headers".to_owned()));
        }
        length = Some(n);
    }
    Ok(length.unwrap_or(0))
}

/// A short response that ends the connection.
pub(crate) fn response(status: u16, reason: &str) -> Vec<u8> {
    let phrase = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("{reason}\n");
    format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_parse_by_table() {
        let ok: &[(&str, Option<u16>, Host, u16)] = &[
            ("Web.Test:443", None, Host::Name("web.test".into()), 443),
            ("web.test.:8080", None, Host::Name("web.test".into()), 8080),
            ("web.test", Some(80), Host::Name("web.test".into()), 80),
            ("1.2.3.4:443", None, Host::Ip("1.2.3.4".parse().unwrap()), 443),
            ("[2001:db8::1]:443", None, Host::Ip("2001:db8::1".parse().unwrap()), 443),
            ("[::1]", Some(80), Host::Ip("::1".parse().unwrap()), 80),
        ];
        for (text, default, host, port) in ok {
            assert_eq!(parse_authority(text, *default), Ok((host.clone(), *port)), "{text}");
        }
        let bad: &[(&str, Option<u16>, &str)] = &[
            ("web.test", None, "CONNECT needs host:port"),
            ("web.test:0", None, "the port must be"),
            ("web.test:+80", None, "the port must be"),
            ("web.test:99999", None, "the port must be"),
            ("[::1:443", None, "unclosed"),
            ("[web.test]:443", None, "not an IPv6 address"),
            ("bücher.test:443", None, "non-ASCII"),
            ("127.1:443", None, "all digits"),
            ("a b:443", None, "may hold only"),
        ];
        for (text, default, rule) in bad {
            let err = parse_authority(text, *default).unwrap_err();
            assert!(err.contains(rule), "{text}: {err}");
        }
    }

    #[test]
    fn absolute_uris_split_by_table() {
        assert_eq!(split_absolute("http://a.test/x?y").unwrap(), ("a.test", "/x?y".to_owned()));
        assert_eq!(split_absolute("HTTP://a.test:81").unwrap(), ("a.test:81", "/".to_owned()));
        assert_eq!(split_absolute("http://a.test?q").unwrap(), ("a.test", "/?q".to_owned()));
        assert_eq!(split_absolute("http://[::1]:8/p#f").unwrap(), ("[::1]:8", "/p".to_owned()));
        for (bad, rule) in [
            ("/x", "not an absolute URI"),
            ("https://a.test/", "use CONNECT"),
            ("ftp://a.test/", "only http://"),
            ("http://u:p@a.test/", "credentials"),
            ("http:///x", "no host"),
        ] {
            let err = split_absolute(bad).unwrap_err();
            assert!(err.contains(rule), "{bad}: {err}");
        }
    }

    fn head(headers: &[(&str, &str)]) -> Head {
        Head {
            method: "POST".into(),
            target: "http://a.test/".into(),
            version: 1,
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
        }
    }

    #[test]
    fn body_framing_by_table() {
        assert_eq!(body_length(&head(&[])), Ok(0));
        assert_eq!(body_length(&head(&[("Content-Length", "12")])), Ok(12));
        assert_eq!(body_length(&head(&[("content-length", "3"), ("Content-Length", "3")])), Ok(3));
        assert_eq!(body_length(&head(&[("Transfer-Encoding", "chunked")])).unwrap_err().0, 411);
        assert_eq!(
            body_length(&head(&[("Content-Length", "3"), ("Transfer-Encoding", "chunked")])).unwrap_err().0,
            411
        );
        assert_eq!(body_length(&head(&[("Content-Length", "3"), ("Content-Length", "4")])).unwrap_err().0, 400);
        assert_eq!(body_length(&head(&[("Content-Length", "-1")])).unwrap_err().0, 400);
    }

    #[test]
    fn the_upstream_head_drops_hop_by_hop_headers_and_closes() {
        let h = head(&[
            ("Host", "a.test"),
            ("Proxy-Authorization", "secret"),
            ("Connection", "keep-alive, X-Drop"),
            ("X-Drop", "1"),
            ("Upgrade", "websocket"),
            ("X-Keep", "2"),
        ]);
        let out = String::from_utf8(origin_head(&h, "/p")).unwrap();
        assert_eq!(out, "POST /p HTTP/1.1\r\nHost: a.test\r\nX-Keep: 2\r\nConnection: close\r\n\r\n");
    }
}
