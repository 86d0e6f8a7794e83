//! The address rule: which resolved addresses a box may never reach unless an
//! address or CIDR entry names them.
//!
//! Refused: this host's own addresses, and every address that leads somewhere
//! local or special rather than to the public internet (see [`Class`]). An
//! IPv6 address that embeds an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`,
//! IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is
//! judged by the IPv4 address inside as well. IPv4-mapped addresses are
//! treated as the IPv4 address they map, everywhere. Teredo (`2001::/32`) and
//! local-use NAT64 (`64:ff9b:1::/48`) are refused whole: where they lead
//! cannot be read off the address.

#[cfg(feature = "proxy")]
use std::collections::HashSet;
use std::fmt;
#[cfg(feature = "proxy")]
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused by class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `0.0.0.0/8`, "this network".
    ThisNetwork,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `fc00::/7`.
    UniqueLocal,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// `fec0::/10` (deprecated, still routed locally by some stacks).
    SiteLocal,
    /// `100.64/10`, carrier-grade NAT.
    SharedCgnat,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `240/4`, reserved.
    Reserved,
    /// `192.0.0/24`, IETF protocol assignments.
    IetfProtocol,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`.
    Documentation,
    /// `198.18/15`.
    Benchmarking,
    /// `100::/64`.
    DiscardOnly,
    /// `2001::/32`.
    Teredo,
    /// `64:ff9b:1::/48`.
    LocalNat64,
}

impl Class {
    /// The class in words, for a refusal's reason.
    pub fn describe(self) -> &'static str {
        match self {
            Class::Unspecified => "unspecified",
            Class::ThisNetwork => "in 0.0.0.0/8 (this network)",
            Class::Loopback => "loopback",
            Class::Private => "private (RFC 1918)",
            Class::UniqueLocal => "unique local (fc00::/7)",
            Class::LinkLocal => "link-local",
            Class::SiteLocal => "site-local (fec0::/10)",
            Class::SharedCgnat => "shared address space (100.64.0.0/10, CGNAT)",
            Class::Multicast => "multicast",
            Class::Broadcast => "broadcast",
            Class::Reserved => "reserved (240.0.0.0/4)",
            Class::IetfProtocol => "IETF protocol assignments (192.0.0.0/24)",
            Class::Documentation => "a documentation range",
            Class::Benchmarking => "a benchmarking range (198.18.0.0/15)",
            Class::DiscardOnly => "discard-only (100::/64)",
            Class::Teredo => "Teredo (2001::/32), whose destination is not checkable",
            Class::LocalNat64 => "local-use NAT64 (64:ff9b:1::/48)",
        }
    }
}

/// How an IPv6 address carries an IPv4 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// `::a.b.c.d`.
    Compatible,
    /// `64:ff9b::a.b.c.d`.
    Nat64,
    /// `2002:AABB:CCDD::/48`.
    SixToFour,
}

impl Embedding {
    fn describe(self) -> &'static str {
        match self {
            Embedding::Compatible => "IPv4-compatible",
            Embedding::Nat64 => "NAT64",
            Embedding::SixToFour => "6to4",
        }
    }
}

/// A refusal by class, possibly of the IPv4 address an IPv6 one embeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forbidden {
    /// The class of the address (or of the embedded address).
    pub class: Class,
    /// Set when the class is the embedded IPv4 address's.
    pub via: Option<(Embedding, Ipv4Addr)>,
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.via {
            None => f.write_str(self.class.describe()),
            Some((how, v4)) => write!(f, "{} and embeds {v4}, which is {}", how.describe(), self.class.describe()),
        }
    }
}

/// `ip` with an IPv4-mapped IPv6 address turned into the IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

fn in4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in6(ip: Ipv6Addr, net: [u16; 8], prefix: u32) -> bool {
    let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

fn class_v4(ip: Ipv4Addr) -> Option<Class> {
    let table: [([u8; 4], u32, Class); 16] = [
        ([0, 0, 0, 0], 32, Class::Unspecified),
        ([0, 0, 0, 0], 8, Class::ThisNetwork),
        ([10, 0, 0, 0], 8, Class::Private),
        ([100, 64, 0, 0], 10, Class::SharedCgnat),
        ([127, 0, 0, 0], 8, Class::Loopback),
        ([169, 254, 0, 0], 16, Class::LinkLocal),
        ([172, 16, 0, 0], 12, Class::Private),
        ([192, 0, 0, 0], 24, Class::IetfProtocol),
        ([192, 0, 2, 0], 24, Class::Documentation),
        ([192, 168, 0, 0], 16, Class::Private),
        ([198, 18, 0, 0], 15, Class::Benchmarking),
        ([198, 51, 100, 0], 24, Class::Documentation),
        ([203, 0, 113, 0], 24, Class::Documentation),
        ([224, 0, 0, 0], 4, Class::Multicast),
        ([255, 255, 255, 255], 32, Class::Broadcast),
        ([240, 0, 0, 0], 4, Class::Reserved),
    ];
    table.iter().find(|(net, prefix, _)| in4(ip, *net, *prefix)).map(|(_, _, c)| *c)
}

/// The IPv4 address an IPv6 address embeds, and how (IPv4-mapped excluded:
/// [`canonical`] handles it).
pub fn embedded_v4(ip: Ipv6Addr) -> Option<(Embedding, Ipv4Addr)> {
    let bits = u128::from(ip);
    if in6(ip, [0; 8], 96) && bits > 1 {
        return Some((Embedding::Compatible, Ipv4Addr::from(bits as u32)));
    }
    if in6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return Some((Embedding::Nat64, Ipv4Addr::from(bits as u32)));
    }
    if in6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        return Some((Embedding::SixToFour, Ipv4Addr::from((bits >> 80) as u32)));
    }
    None
}

fn class_v6(ip: Ipv6Addr) -> Option<Class> {
    let table: [([u16; 8], u32, Class); 10] = [
        ([0; 8], 128, Class::Unspecified),
        ([0, 0, 0, 0, 0, 0, 0, 1], 128, Class::Loopback),
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Class::LocalNat64),
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, Class::DiscardOnly),
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, Class::Documentation),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, Class::Teredo),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, Class::UniqueLocal),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, Class::LinkLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Class::SiteLocal),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Class::Multicast),
    ];
    table.iter().find(|(net, prefix, _)| in6(ip, *net, *prefix)).map(|(_, _, c)| *c)
}

/// The class that forbids `ip`, if any. Ignores the policy and the host's
/// own addresses: see [`crate::check_address`] for the whole rule.
pub fn forbidden(ip: IpAddr) -> Option<Forbidden> {
    match canonical(ip) {
        IpAddr::V4(v4) => class_v4(v4).map(|class| Forbidden { class, via: None }),
        IpAddr::V6(v6) => {
            if let Some(class) = class_v6(v6) {
                return Some(Forbidden { class, via: None });
            }
            let (how, v4) = embedded_v4(v6)?;
            class_v4(v4).map(|class| Forbidden { class, via: Some((how, v4)) })
        }
    }
}

/// This host's interface addresses, every interface, both families.
#[cfg(feature = "proxy")]
pub fn host_addresses() -> io::Result<HashSet<IpAddr>> {
    Ok(if_addrs::get_if_addrs()?.into_iter().map(|i| canonical(i.ip())).collect())
}

#[cfg(test)]
#[path = "addr_tests.rs"]
mod tests;
