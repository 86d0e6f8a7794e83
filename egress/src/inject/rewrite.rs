//! What happens to one intercepted request: refused when a placeholder is
//! anywhere but a header, or in a header of a request to a host its
//! secret is not bound to; otherwise each placeholder in a header becomes
//! its value, and each header rule for the host is set whole.

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
        let found = placeholders_in(value.as_bytes(), rules);
        if found.is_empty() {
            continue;
        }
        let mut text = String::from_utf8_lossy(value.as_bytes()).into_owned();
        for rule in found {
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
            text = text.replace(&rule.placeholder, real);
            injected.push(Injected { secret: rule.name.clone(), header: name.as_str().to_owned() });
        }
        *value = HeaderValue::from_str(&text)
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
            injected.push(Injected { secret: secret.to_owned(), header: name.as_str().to_owned() });
        }
    }
    Ok(injected)
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
