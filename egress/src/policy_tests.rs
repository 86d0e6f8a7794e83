//! Unit tables for allow-entry parsing and matching.

use super::*;

fn entry(text: &str) -> AllowEntry {
    AllowEntry::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn good_entries_parse_to_their_canonical_spelling() {
    let table: &[(&str, &str)] = &[
        ("example.com", "example.com"),
        ("Example.COM.", "example.com"),
        ("example.com:8443", "example.com:8443"),
        ("*.example.com", "*.example.com"),
        ("*.Example.com:443", "*.example.com:443"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("_dmarc.example.com", "_dmarc.example.com"),
        ("1.2.3.4", "1.2.3.4"),
        ("1.2.3.4:8080", "1.2.3.4:8080"),
        ("2001:db8::1", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        ("[2001:db8::1]:443", "[2001:db8::1]:443"),
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.0.0.0/8:5432", "10.0.0.0/8:5432"),
        ("fd00::/8", "fd00::/8"),
        ("[fd00::/8]:53", "[fd00::/8]:53"),
        ("127.0.0.1/32", "127.0.0.1"),
        ("  web.test  ", "web.test"),
    ];
    for (text, canonical) in table {
        let e = entry(text);
        assert_eq!(e.to_string(), *canonical, "{text}");
        assert_eq!(entry(canonical), e, "{canonical} reads back");
    }
}

#[test]
fn bad_entries_name_the_value_and_the_rule() {
    let table: &[(&str, &str)] = &[
        ("", "must not be empty"),
        ("example.com:0", "the port must be a number from 1 to 65535"),
        ("example.com:65536", "the port must be"),
        ("example.com:", "the port must be"),
        ("example.com:http", "the port must be"),
        ("example.com:+1", "the port must be"),
        ("bücher.example", "non-ASCII names are refused"),
        ("*", "whole first label"),
        ("*.com", "two labels or more"),
        ("a.*.example.com", "whole first label"),
        ("foo*.example.com", "whole first label"),
        ("-a.example.com", "must not start or end with '-'"),
        ("a..example.com", "1 to 63 characters"),
        (&"a".repeat(64), "1 to 63 characters"),
        ("127.1", "all digits"),
        ("10.0.0.1/8", "did you mean 10.0.0.0/8"),
        ("0.0.0.0/0", "/0 CIDR"),
        ("::/0", "/0 CIDR"),
        ("10.0.0.0/33", "a CIDR must be"),
        ("[2001:db8::1", "closed by ']'"),
        ("[1.2.3.4]:80", "only an IPv6"),
        ("[2001:db8::1]x", "only :PORT"),
        ("a b.example", "may hold only"),
        ("http://example.com", "the port must be"),
    ];
    for (text, rule) in table {
        let err = AllowEntry::parse(text).expect_err(text);
        let line = err.to_string();
        assert!(line.starts_with(&format!("allow entry {text:?}: ")), "{line}");
        assert!(line.contains(rule), "{text}: {line}");
        assert!(!line.contains('\n'), "{line}");
    }
    let long = format!("{}.example", vec!["a".repeat(60); 5].join("."));
    assert!(AllowEntry::parse(&long).unwrap_err().to_string().contains("253"));
}

#[test]
fn names_match_exactly_and_wildcards_only_below() {
    let table: &[(&str, &str, u16, bool)] = &[
        ("example.com", "example.com", 443, true),
        ("example.com", "example.com", 80, true),
        ("example.com", "example.com", 8080, false),
        ("example.com", "www.example.com", 443, false),
        ("example.com:8080", "example.com", 8080, true),
        ("example.com:8080", "example.com", 443, false),
        ("*.example.com", "a.example.com", 443, true),
        ("*.example.com", "a.b.example.com", 443, true),
        ("*.example.com", "example.com", 443, false),
        ("*.example.com", "badexample.com", 443, false),
        ("*.example.com", ".example.com", 443, false),
        ("*.example.com:22", "a.example.com", 22, true),
        ("*.example.com:22", "a.example.com", 443, false),
        ("1.2.3.4", "1.2.3.4", 443, false),
    ];
    for (e, name, port, allowed) in table {
        assert_eq!(entry(e).allows_name(name, *port), *allowed, "{e} vs {name}:{port}");
    }
}

#[test]
fn addresses_are_covered_by_address_and_cidr_entries_only() {
    let table: &[(&str, &str, u16, bool)] = &[
        ("127.0.0.1", "127.0.0.1", 443, true),
        ("127.0.0.1", "127.0.0.2", 443, false),
        ("127.0.0.1:9000", "127.0.0.1", 9000, true),
        ("127.0.0.1:9000", "127.0.0.1", 443, false),
        ("10.0.0.0/8", "10.200.1.1", 80, true),
        ("10.0.0.0/8", "11.0.0.1", 80, false),
        ("10.0.0.0/8", "::ffff:10.1.2.3", 80, true),
        ("fd00::/8", "fd12::1", 443, true),
        ("[2001:db8::1]:443", "2001:db8::1", 443, true),
        ("example.com", "93.184.216.34", 443, false),
    ];
    for (e, ip, port, covered) in table {
        let ip: IpAddr = ip.parse().unwrap();
        assert_eq!(entry(e).covers_address(ip, *port), *covered, "{e} vs {ip}:{port}");
    }
}

#[test]
fn a_policy_round_trips_through_json_and_is_checked_when_read() {
    let policy = Policy::parse(["Example.com", "*.pypi.org:443", "[fd00::/8]:53", "10.1.2.3"]).unwrap();
    let json = serde_json::to_string(&policy).unwrap();
    assert_eq!(json, r#"["example.com","*.pypi.org:443","[fd00::/8]:53","10.1.2.3"]"#);
    let back: Policy = serde_json::from_str(&json).unwrap();
    assert_eq!(back, policy);
    let err = serde_json::from_str::<Policy>(r#"["ok.example","bad:0"]"#).unwrap_err().to_string();
    assert!(err.contains(r#"allow entry "bad:0""#), "{err}");
    assert_eq!(policy.allows_name("www.pypi.org", 443).map(ToString::to_string), Some("*.pypi.org:443".into()));
    assert!(policy.allows_name("www.pypi.org", 80).is_none());
    assert!(Policy::default().is_empty());
}
