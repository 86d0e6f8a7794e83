//! The allowlist: `--allow-host` entries parsed, checked and matched.
//!
//! An entry is one of
//!
//! - `NAME` or `NAME:PORT`: exactly that DNS name (`example.com`);
//! - `*.NAME` or `*.NAME:PORT`: any name *below* `NAME` (`a.example.com`,
//!   `a.b.example.com`), never `NAME` itself: list the apex separately;
//! - an address, `1.2.3.4`, `1.2.3.4:PORT`, `2001:db8::1` or `[2001:db8::1]:PORT`;
//! - a CIDR, `10.0.0.0/8`, `10.0.0.0/8:PORT`, `fd00::/8` or `[fd00::/8]:PORT`.
//!
//! An entry without a port allows ports 80 and 443 only. Names are compared
//! case-insensitively and one trailing dot is ignored. Non-ASCII names are
//! refused: write the punycode (`xn--`) form, so that what is listed is
//! exactly what is resolved and what a TLS client sends as SNI.
//!
//! Address and CIDR entries are the only way to reach an address the address
//! rule ([`crate::addr`]) refuses, and the only way to `CONNECT` to an IP
//! literal: a name entry never allows one.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::addr;

/// The ports an entry without `:PORT` allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// An allow entry that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allow entry {value:?}: {rule}")]
pub struct PolicyError {
    /// The entry as given.
    pub value: String,
    /// The rule it breaks.
    pub rule: String,
}

/// What an entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Exactly this name (lowercase, no trailing dot).
    Name(String),
    /// Any name strictly below this suffix (lowercase, no trailing dot).
    Below(String),
    /// These addresses; a single address is a /32 or /128.
    Addresses(IpNet),
}

/// One parsed allow entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    /// What it allows.
    pub target: Target,
    /// The one port it allows; `None` is [`DEFAULT_PORTS`].
    pub port: Option<u16>,
}

impl AllowEntry {
    /// Parses one entry as `--allow-host` gives it.
    pub fn parse(value: &str) -> Result<Self, PolicyError> {
        let fail = |rule: &str| PolicyError { value: value.to_owned(), rule: rule.to_owned() };
        let text = value.trim();
        if text.is_empty() {
            return Err(fail("an entry must not be empty"));
        }
        let (host, port) = split_entry(text).map_err(|rule| fail(&rule))?;
        let port = match port {
            None => None,
            Some(p) => Some(parse_port(p).map_err(|rule| fail(&rule))?),
        };
        let target = if host.contains('/') {
            let net: IpNet =
                host.parse().map_err(|_| fail("a CIDR must be ADDRESS/PREFIX, like 10.0.0.0/8 or fd00::/8"))?;
            if net.prefix_len() == 0 {
                return Err(fail("a /0 CIDR would allow every address; list the addresses meant"));
            }
            if net.trunc() != net {
                return Err(fail(&format!("a CIDR must not have host bits set (did you mean {}?)", net.trunc())));
            }
            Target::Addresses(net)
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            Target::Addresses(IpNet::from(ip))
        } else if let Some(suffix) = host.strip_prefix("*.") {
            let suffix = normalize_name(suffix).map_err(|rule| fail(&rule))?;
            if !suffix.contains('.') {
                return Err(fail("a wildcard must be below a name of two labels or more (*.example.com, not *.com)"));
            }
            Target::Below(suffix)
        } else if host.contains('*') {
            return Err(fail("a wildcard is only allowed as a whole first label: *.example.com"));
        } else {
            Target::Name(normalize_name(host).map_err(|rule| fail(&rule))?)
        };
        Ok(Self { target, port })
    }

    /// Whether this entry allows `port`.
    pub fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    /// Whether this entry allows the (normalized) `name` on `port`.
    pub fn allows_name(&self, name: &str, port: u16) -> bool {
        self.allows_port(port)
            && match &self.target {
                Target::Name(n) => n == name,
                Target::Below(suffix) => {
                    name.strip_suffix(suffix.as_str()).is_some_and(|head| head.len() > 1 && head.ends_with('.'))
                }
                Target::Addresses(_) => false,
            }
    }

    /// Whether this entry allows the address `ip` on `port`.
    pub fn covers_address(&self, ip: IpAddr, port: u16) -> bool {
        self.allows_port(port)
            && match &self.target {
                Target::Addresses(net) => net.contains(&addr::canonical(ip)),
                _ => false,
            }
    }
}

impl fmt::Display for AllowEntry {
    /// The canonical spelling, which [`AllowEntry::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = match &self.target {
            Target::Name(n) => n.clone(),
            Target::Below(s) => format!("*.{s}"),
            Target::Addresses(net) if net.prefix_len() == net.max_prefix_len() => net.addr().to_string(),
            Target::Addresses(net) => net.to_string(),
        };
        let v6 = matches!(&self.target, Target::Addresses(IpNet::V6(_)));
        match (self.port, v6) {
            (None, _) => f.write_str(&host),
            (Some(p), true) => write!(f, "[{host}]:{p}"),
            (Some(p), false) => write!(f, "{host}:{p}"),
        }
    }
}

/// The whole allowlist. It is stored as the list of its entries' canonical
/// spellings and checked again when read back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Policy {
    entries: Vec<AllowEntry>,
}

impl Policy {
    /// Parses every entry; the first bad one is the error.
    pub fn parse<I, S>(entries: I) -> Result<Self, PolicyError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let entries = entries.into_iter().map(|e| AllowEntry::parse(e.as_ref())).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { entries })
    }

    /// The entries, in the order given.
    pub fn entries(&self) -> &[AllowEntry] {
        &self.entries
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The first entry allowing `name` (normalized by [`normalize_name`]) on `port`.
    pub fn allows_name(&self, name: &str, port: u16) -> Option<&AllowEntry> {
        self.entries.iter().find(|e| e.allows_name(name, port))
    }

    /// The first address or CIDR entry covering `ip` on `port`.
    pub fn covers_address(&self, ip: IpAddr, port: u16) -> Option<&AllowEntry> {
        self.entries.iter().find(|e| e.covers_address(ip, port))
    }
}

impl TryFrom<Vec<String>> for Policy {
    type Error = PolicyError;
    fn try_from(entries: Vec<String>) -> Result<Self, PolicyError> {
        Policy::parse(entries)
    }
}

impl From<Policy> for Vec<String> {
    fn from(policy: Policy) -> Self {
        policy.entries.iter().map(ToString::to_string).collect()
    }
}

/// Splits `HOST[:PORT]`, `[V6]:PORT` and a bare IPv6 address or CIDR.
fn split_entry(text: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) =
            rest.split_once(']').ok_or_else(|| "a '[' must be closed by ']' around an IPv6 address".to_owned())?;
        let v6 = matches!(inside.parse::<IpAddr>(), Ok(IpAddr::V6(_)))
            || matches!(inside.parse::<IpNet>(), Ok(IpNet::V6(_)));
        if !v6 {
            return Err("only an IPv6 address or CIDR may stand in brackets".to_owned());
        }
        return match after {
            "" => Ok((inside, None)),
            _ => match after.strip_prefix(':') {
                Some(p) => Ok((inside, Some(p))),
                None => Err("after ']' only :PORT may follow".to_owned()),
            },
        };
    }
    if text.matches(':').count() > 1 {
        // A bare IPv6 address or CIDR: no port without brackets.
        return Ok((text, None));
    }
    Ok(match text.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (text, None),
    })
}

fn parse_port(text: &str) -> Result<u16, String> {
    let rule = || "the port must be a number from 1 to 65535".to_owned();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(rule());
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(rule()),
        Ok(p) => Ok(p),
    }
}

/// Checks a DNS name and returns it lowercase without its trailing dot.
///
/// Rules: ASCII only (punycode for international names); at most 253
/// characters; labels of 1 to 63 characters from `a-z 0-9 - _`, not starting
/// or ending with `-`; the last label not all digits (that would be an
/// address in disguise, like `127.1`).
pub fn normalize_name(name: &str) -> Result<String, String> {
    if !name.is_ascii() {
        return Err("non-ASCII names are refused: write the punycode (xn--) form".to_owned());
    }
    let lower = name.to_ascii_lowercase();
    let trimmed = lower.strip_suffix('.').unwrap_or(&lower);
    if trimmed.is_empty() {
        return Err("a name must not be empty".to_owned());
    }
    if trimmed.len() > 253 {
        return Err("a name must be at most 253 characters".to_owned());
    }
    for label in trimmed.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("each label of a name must be 1 to 63 characters".to_owned());
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err("a name may hold only letters, digits, '-', '_' and '.'".to_owned());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label must not start or end with '-'".to_owned());
        }
    }
    let last = trimmed.rsplit('.').next().unwrap_or(trimmed);
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err("a name's last label must not be all digits (write an address as an address)".to_owned());
    }
    Ok(trimmed.to_owned())
}

/// The whole address rule for connecting to `ip` on `port`: allowed if an
/// address or CIDR entry covers it; otherwise refused if it (or the IPv4
/// address it embeds) is one of `host_addresses` or is [`addr::forbidden`].
/// The error is the reason, one line.
pub fn check_address(ip: IpAddr, port: u16, policy: &Policy, host_addresses: &HashSet<IpAddr>) -> Result<(), String> {
    if policy.covers_address(ip, port).is_some() {
        return Ok(());
    }
    let ip = addr::canonical(ip);
    let embedded = match ip {
        IpAddr::V6(v6) => addr::embedded_v4(v6).map(|(_, v4)| IpAddr::V4(v4)),
        IpAddr::V4(_) => None,
    };
    let own = |a: IpAddr| host_addresses.iter().any(|h| addr::canonical(*h) == a);
    if own(ip) || embedded.is_some_and(own) {
        return Err(format!("address {ip} is one of this host's own addresses"));
    }
    match addr::forbidden(ip) {
        Some(why) => Err(format!("address {ip} is {why}")),
        None => Ok(()),
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
