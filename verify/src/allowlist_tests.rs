//! The allowlist claims' judging, without a box: target files, tunnels,
//! refusals and the DNS query.

use super::*;

fn target() -> EgressTarget {
    EgressTarget {
        dns: "127.0.0.1:5353".parse().unwrap(),
        test_host: "10.254.1.2".parse().unwrap(),
        allowed_name: "allowed.test".into(),
        http_port: 8080,
        https_port: 8443,
        refused_name: "other.test".into(),
        rebind_name: "rebind.test".into(),
        unlisted_address: "10.254.1.1".parse().unwrap(),
        redirect_path: "/redirect".into(),
    }
}

fn decision(method: Method, name: &str, decision: Decided, reason: &str) -> Decision {
    Decision {
        time_ms: 1,
        method,
        name: Some(name.into()),
        port: Some(8443),
        address: None,
        decision,
        reason: reason.into(),
        bytes_up: 0,
        bytes_down: 0,
        secret: None,
    }
}

#[test]
fn a_target_file_round_trips_and_bad_names_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("target.json");
    std::fs::write(&path, serde_json::to_string(&target()).unwrap()).unwrap();
    assert_eq!(EgressTarget::from_file(&path).unwrap(), target());
    assert_eq!(target().entries()[3], "10.254.1.2:8080");
    let mut bad = target();
    bad.allowed_name = "a.test'; rm -rf /".into();
    std::fs::write(&path, serde_json::to_string(&bad).unwrap()).unwrap();
    let e = EgressTarget::from_file(&path).unwrap_err().to_string();
    assert!(e.contains("allowed_name") && !e.contains('\n'), "{e}");
    std::fs::write(&path, "{\"dns\": 1}").unwrap();
    assert!(EgressTarget::from_file(&path).is_err());
}

#[test]
fn a_tunnel_is_judged_by_the_server_hello_and_the_sni_refusal() {
    let mut reply = b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec();
    let closed = reply.clone();
    reply.extend([0x16, 0x03, 0x03, 0x00, 0x7a, 0x02, 0x00]);
    let allowed = [decision(Method::Connect, "allowed.test", Decided::Allowed, "allowed.test:8443")];
    assert_eq!(tunnel_verdict(&reply, &allowed, "allowed.test:8443", "allowed.test", None).0, Status::Pass);
    assert_eq!(tunnel_verdict(&closed, &allowed, "allowed.test:8443", "allowed.test", None).0, Status::Fail);
    // A foreign SNI that reaches the server fails, whatever was logged.
    assert_eq!(tunnel_verdict(&reply, &allowed, "allowed.test:8443", "other.test", Some(true)).0, Status::Fail);
    let refused = [decision(Method::Connect, "allowed.test", Decided::Refused, "sni \"other.test\" does not match")];
    assert_eq!(tunnel_verdict(&closed, &refused, "allowed.test:8443", "other.test", Some(true)).0, Status::Pass);
    assert_eq!(tunnel_verdict(&closed, &[], "allowed.test:8443", "other.test", Some(true)).0, Status::Fail);
    assert_eq!(tunnel_verdict(&closed, &[], "allowed.test:8443", "other.test", Some(false)).0, Status::Skipped);
}

#[test]
fn a_refusal_needs_the_proxys_decision_and_nothing_through() {
    let f = |rc: i32, body: &str| Fetch { missing: false, rc: Some(rc), body: body.into(), stderr: String::new() };
    let refused = [decision(Method::Http, "other.test", Decided::Refused, "not on the allowlist")];
    assert_eq!(refused_verdict(&f(8, ""), &refused, "other.test", "x").0, Status::Pass);
    assert_eq!(refused_verdict(&f(0, "hello"), &refused, "other.test", "x").0, Status::Fail);
    assert_eq!(refused_verdict(&f(4, ""), &[], "other.test", "x").0, Status::Fail);
    let literal = [decision(Method::Http, "10.254.1.1", Decided::Refused, "not on the allowlist")];
    assert_eq!(refused_verdict(&f(8, ""), &literal, "10.254.1.1", "x").0, Status::Pass);
    let allowed = [decision(Method::Http, "allowed.test", Decided::Allowed, "allowed.test:8080")];
    assert_eq!(reached_verdict(&f(0, "hello"), &allowed, "allowed.test").0, Status::Pass);
    assert_eq!(reached_verdict(&f(0, "hello"), &[], "allowed.test").0, Status::Fail);
}

#[test]
fn the_dns_query_names_the_host() {
    let q = dns_query("allowed.test");
    assert_eq!(&q[12..], b"\x07allowed\x04test\x00\x00\x01\x00\x01");
    assert_eq!(unhex("485454500a"), b"HTTP\n");
}

#[test]
fn an_allowlist_box_that_reaches_the_host_fails_the_host_claim() {
    let addrs = vec!["127.0.0.1".to_owned(), "::1".to_owned()];
    let done = |out: &str, accepted: bool| listed_host_verdict(out, accepted, &addrs, 4000, "cut".into()).0;
    assert_eq!(done("done\n", false), Status::Pass);
    assert_eq!(done("reached=::1\ndone\n", false), Status::Fail);
    assert_eq!(done("reached=127.0.0.1-through-the-proxy\ndone\n", false), Status::Fail);
    assert_eq!(done("done\n", true), Status::Fail, "the listener's accept counts even unseen");
    assert_eq!(done("", false), Status::Fail, "a probe that did not finish proves nothing");
    assert_eq!(done("no-nc\ndone\n", false), Status::Skipped);
    let v6 = host_addresses_v6();
    assert!(v6.iter().all(|a| a.parse::<std::net::Ipv6Addr>().is_ok()), "{v6:?}");
}

#[test]
fn a_redirect_is_judged_on_both_requests_in_either_logged_order() {
    let f = |rc: i32| Fetch { missing: false, rc: Some(rc), body: String::new(), stderr: String::new() };
    let allowed = decision(Method::Http, "allowed.test", Decided::Allowed, "allowed.test:8080");
    let refused = decision(Method::Http, "other.test", Decided::Refused, "not on the allowlist");
    let through = decision(Method::Http, "other.test", Decided::Allowed, "other.test:8080");
    let t = target();
    // The proxy logs a request when its connection ends: the redirected
    // request can come first, and the wait is for both names.
    let late = [refused.clone(), allowed.clone()];
    assert!(covers(&late, &["allowed.test", "other.test"]));
    assert!(!covers(&late[..1], &["allowed.test", "other.test"]));
    assert_eq!(redirect_verdict(&f(8), &late, &t).0, Status::Pass);
    assert_eq!(redirect_verdict(&f(8), &[allowed.clone(), refused.clone()], &t).0, Status::Pass);
    assert_eq!(redirect_verdict(&f(0), &[allowed.clone(), through], &t).0, Status::Fail);
    assert_eq!(redirect_verdict(&f(8), &late[..1], &t).0, Status::Skipped);
    assert_eq!(redirect_verdict(&f(0), &[allowed], &t).0, Status::Skipped);
}
