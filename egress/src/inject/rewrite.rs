//! What happens to one intercepted request: refused when a placeholder is
//! anywhere but a header, or in a header of a request to a host its
//! secret is not bound to; otherwise each placeholder in a header (or in
//! a `Basic` credential's decoded `user:password`) becomes its value, and
//! each header rule for the host is set whole.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hyper::header::{HOST, HeaderName, HeaderValue};
use hyper::http::request::Parts;

use super::Injector;
use crate::secrets::{InjectRules, SecretRule, fill_template, split_header, template_names};

/// The text every placeholder starts with ([`InjectRules::new`]).
const PREFIX: &[u8] = b"tinybox-placeholder-";

/// A request not sent, and why (one line, for the box and the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub reason: String,
}

fn refused(status: u16, reason: String) -> Refused {
    Refused { status, reason }
}

/// One value put in: the secret and the header it went into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub secret: String,
    pub header: String,
    /// For a value put into a `Basic` credential: the credential's encoding
    /// as sent and as the box wrote it, so an answer echoing the one is
    /// scrubbed back to the other (the box could decode the value from it).
    pub encoded: Option<(String, String)>,
}

/// Every secret whose placeholder occurs in `bytes`.
pub fn placeholders_in<'a>(bytes: &[u8], rules: &'a InjectRules) -> Vec<&'a SecretRule> {
    let mut found: Vec<&SecretRule> = Vec::new();
    let mut at = 0;
    while let Some(i) = find(&bytes[at..], PREFIX) {
        let start = at + i;
        for rule in &rules.secrets {
            if bytes[start..].starts_with(rule.placeholder.as_bytes()) && !found.iter().any(|f| f.name == rule.name) {
                found.push(rule);
            }
        }
        at = start + PREFIX.len();
    }
    found
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Checks and rewrites a request head to `host` (canonical) on `port`,
/// returning what was put in.
pub fn rewrite_head(parts: &mut Parts, host: &str, port: u16, injector: &Injector) -> Result<Vec<Injected>, Refused> {
    let rules = &injector.rules;
    let target = parts.uri.to_string();
    if let Some(rule) = placeholders_in(target.as_bytes(), rules).first() {
        return Err(refused(
            403,
            format!("the placeholder of secret {} is in the URL; a secret goes in a request header only", rule.name),
        ));
    }
    check_host(parts, host, port)?;
    let mut injected = Vec::new();
    for (name, value) in parts.headers.iter_mut() {
        let raw = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let filled = if placeholders_in(raw.as_bytes(), rules).is_empty() {
            // `Authorization: Basic base64(user:placeholder)` is how git and
            // pip send a token given in a URL: the placeholder is inside the
            // encoding, so it is decoded, filled and encoded again.
            let Some(decoded) = basic_credentials(&raw) else { continue };
            if placeholders_in(decoded.as_bytes(), rules).is_empty() {
                continue;
            }
            let from = injected.len();
            let sent = BASE64.encode(fill(&decoded, host, name.as_str(), injector, &mut injected)?);
            let wrote = BASE64.encode(&decoded);
            for i in &mut injected[from..] {
                i.encoded = Some((sent.clone(), wrote.clone()));
            }
            format!("Basic {sent}")
        } else {
            fill(&raw, host, name.as_str(), injector, &mut injected)?
        };
        *value = HeaderValue::from_str(&filled)
            .map_err(|_| refused(400, format!("header {name} is not a valid header value once filled")))?;
    }
    for template in rules.headers.get(host).into_iter().flatten() {
        let Some((field, text)) = split_header(template) else { continue };
        let filled = fill_template(text, |n| injector.value(n).map(str::to_owned));
        let name = HeaderName::from_bytes(field.as_bytes())
            .map_err(|_| refused(500, format!("header rule {field:?} is not a header name")))?;
        let value = HeaderValue::from_str(&filled)
            .map_err(|_| refused(500, format!("header rule {field:?} does not make a valid header value")))?;
        parts.headers.insert(name.clone(), value);
        for secret in template_names(text) {
            injected.push(Injected { secret: secret.to_owned(), header: name.as_str().to_owned(), encoded: None });
        }
    }
    Ok(injected)
}

/// `text` with each placeholder in it replaced by its value, refused when
/// one's secret is not bound to `host`; what was put in is added to `injected`.
fn fill(
    text: &str,
    host: &str,
    header: &str,
    injector: &Injector,
    injected: &mut Vec<Injected>,
) -> Result<String, Refused> {
    let mut filled = text.to_owned();
    for rule in placeholders_in(text.as_bytes(), &injector.rules) {
        if !rule.hosts.iter().any(|h| h == host) {
            return Err(refused(
                403,
                format!(
                    "the placeholder of secret {} is sent to {host}, which it is not bound to (it is for {})",
                    rule.name,
                    if rule.hosts.is_empty() { "no host by placeholder".to_owned() } else { rule.hosts.join(", ") }
                ),
            ));
        }
        let real = injector.value(&rule.name).unwrap_or_default();
        filled = filled.replace(&rule.placeholder, real);
        injected.push(Injected { secret: rule.name.clone(), header: header.to_owned(), encoded: None });
    }
    Ok(filled)
}

/// The decoded `user:password` of a `Basic` credential (the scheme's name
/// is case-insensitive, RFC 7617), when it is one and decodes to text.
fn basic_credentials(value: &str) -> Option<String> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    String::from_utf8(BASE64.decode(encoded.trim()).ok()?).ok()
}

/// The request must be for the host the tunnel was opened (and its
/// upstream certificate verified) for: a `Host` naming another site behind
/// the same address (a CDN) would take the value there.
fn check_host(parts: &Parts, host: &str, port: u16) -> Result<(), Refused> {
    let mut hosts = parts.headers.get_all(HOST).iter();
    let given = match (hosts.next(), hosts.next()) {
        (Some(h), None) => String::from_utf8_lossy(h.as_bytes()).to_ascii_lowercase(),
        (None, _) => match parts.uri.authority() {
            Some(a) => a.as_str().to_ascii_lowercase(),
            None => return Err(refused(400, "the request has no Host header".into())),
        },
        (Some(_), Some(_)) => return Err(refused(400, "the request has more than one Host header".into())),
    };
    let given = given.trim().trim_end_matches('.');
    let matches = given == host || given == format!("{host}:{port}") || given == format!("{host}.:{port}");
    if !matches || parts.uri.authority().is_some_and(|a| !a.as_str().eq_ignore_ascii_case(given)) {
        return Err(refused(400, format!("the Host {given:?} is not {host}, the tunnel's host")));
    }
    Ok(())
}

/// A body must hold no placeholder: the value goes in headers only, and a
/// placeholder in a body is a secret on its way somewhere it is not meant.
pub fn check_body(body: &[u8], rules: &InjectRules) -> Result<(), Refused> {
    match placeholders_in(body, rules).first() {
        Some(rule) => Err(refused(
            403,
            format!(
                "the placeholder of secret {} is in the request body; a secret goes in a request header only",
                rule.name
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
#[path = "rewrite_tests.rs"]
mod tests;
