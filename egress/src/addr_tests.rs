//! Unit tables for the address rule.

use super::*;
use crate::policy::{Policy, check_address};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn address_classes_by_table() {
    use Class::*;
    let table: &[(&str, Option<Class>)] = &[
        ("0.0.0.0", Some(Unspecified)),
        ("0.1.2.3", Some(ThisNetwork)),
        ("10.0.0.1", Some(Private)),
        ("172.16.0.1", Some(Private)),
        ("172.31.255.255", Some(Private)),
        ("172.32.0.1", None),
        ("192.168.1.1", Some(Private)),
        ("100.64.0.1", Some(SharedCgnat)),
        ("100.127.255.255", Some(SharedCgnat)),
        ("100.128.0.1", None),
        ("127.0.0.1", Some(Loopback)),
        ("127.255.0.9", Some(Loopback)),
        ("169.254.169.254", Some(LinkLocal)),
        ("192.0.0.8", Some(IetfProtocol)),
        ("192.0.2.1", Some(Documentation)),
        ("198.18.0.1", Some(Benchmarking)),
        ("224.0.0.1", Some(Multicast)),
        ("239.255.255.250", Some(Multicast)),
        ("255.255.255.255", Some(Broadcast)),
        ("240.0.0.1", Some(Reserved)),
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("::", Some(Unspecified)),
        ("::1", Some(Loopback)),
        ("fc00::1", Some(UniqueLocal)),
        ("fdff::1", Some(UniqueLocal)),
        ("fe80::1", Some(LinkLocal)),
        ("febf::1", Some(LinkLocal)),
        ("fec0::1", Some(SiteLocal)),
        ("ff02::1", Some(Multicast)),
        ("2001:db8::1", Some(Documentation)),
        ("2001:0:4136:e378::1", Some(Teredo)),
        ("64:ff9b:1::1", Some(LocalNat64)),
        ("100::1", Some(DiscardOnly)),
        ("2606:4700::1111", None),
        ("64:ff9b::808:808", None),
        ("2002:808:808::1", None),
        ("::ffff:8.8.8.8", None),
    ];
    for (text, class) in table {
        assert_eq!(forbidden(ip(text)).map(|f| f.class), *class, "{text}");
    }
}

#[test]
fn embedded_ipv4_addresses_are_judged_by_what_they_embed() {
    let table: &[(&str, Class, Option<Embedding>)] = &[
        ("::ffff:127.0.0.1", Class::Loopback, None),
        ("::ffff:10.1.2.3", Class::Private, None),
        ("::ffff:169.254.169.254", Class::LinkLocal, None),
        ("::127.0.0.1", Class::Loopback, Some(Embedding::Compatible)),
        ("::10.0.0.1", Class::Private, Some(Embedding::Compatible)),
        ("64:ff9b::7f00:1", Class::Loopback, Some(Embedding::Nat64)),
        ("64:ff9b::a9fe:a9fe", Class::LinkLocal, Some(Embedding::Nat64)),
        ("64:ff9b::6440:1", Class::SharedCgnat, Some(Embedding::Nat64)),
        ("2002:7f00:1::1", Class::Loopback, Some(Embedding::SixToFour)),
        ("2002:c0a8:101::", Class::Private, Some(Embedding::SixToFour)),
        ("2002:a00:1:2::3", Class::Private, Some(Embedding::SixToFour)),
    ];
    for (text, class, how) in table {
        let f = forbidden(ip(text)).unwrap_or_else(|| panic!("{text} allowed"));
        assert_eq!(f.class, *class, "{text}");
        assert_eq!(f.via.map(|(h, _)| h), *how, "{text}");
    }
    let why = forbidden(ip("64:ff9b::7f00:1")).unwrap().to_string();
    assert_eq!(why, "NAT64 and embeds 127.0.0.1, which is loopback");
}

#[test]
fn the_whole_rule_with_host_addresses_and_explicit_entries() {
    let host: HashSet<IpAddr> = [ip("203.0.114.7"), ip("2a01:4f8::7")].into();
    let none = Policy::default();
    let allow = Policy::parse(["127.0.0.1:8080", "10.0.0.0/8", "203.0.114.7:443"]).unwrap();
    let table: &[(&str, u16, &Policy, Result<(), &str>)] = &[
        ("8.8.8.8", 443, &none, Ok(())),
        ("127.0.0.1", 8080, &none, Err("address 127.0.0.1 is loopback")),
        ("127.0.0.1", 8080, &allow, Ok(())),
        ("127.0.0.1", 8081, &allow, Err("address 127.0.0.1 is loopback")),
        ("::ffff:127.0.0.1", 8080, &allow, Ok(())),
        ("10.9.9.9", 80, &allow, Ok(())),
        ("10.9.9.9", 80, &none, Err("address 10.9.9.9 is private (RFC 1918)")),
        ("203.0.114.7", 80, &none, Err("address 203.0.114.7 is one of this host's own addresses")),
        ("::ffff:203.0.114.7", 80, &none, Err("one of this host's own addresses")),
        ("2002:cb00:7207::1", 80, &none, Err("one of this host's own addresses")),
        ("203.0.114.7", 443, &allow, Ok(())),
        ("2a01:4f8::7", 443, &none, Err("one of this host's own addresses")),
        ("::ffff:10.0.0.1", 443, &none, Err("address 10.0.0.1 is private")),
    ];
    for (addr, port, policy, expected) in table {
        let got = check_address(ip(addr), *port, policy, &host);
        match (expected, got) {
            (Ok(()), Ok(())) => {}
            (Err(part), Err(why)) => assert!(why.contains(part), "{addr}:{port}: {why}"),
            (e, g) => panic!("{addr}:{port}: expected {e:?}, got {g:?}"),
        }
    }
}

#[cfg(feature = "proxy")]
#[test]
fn this_hosts_addresses_include_loopback() {
    let own = host_addresses().unwrap();
    assert!(own.contains(&ip("127.0.0.1")), "{own:?}");
}
