//! Unit tables for one intercepted request's checks and rewriting.

use std::collections::BTreeMap;

use super::*;
use crate::secrets::SecretRule;

fn rules() -> InjectRules {
    InjectRules {
        box_id: "b".into(),
        secrets: vec![
            SecretRule {
                name: "A".into(),
                placeholder: "tinybox-placeholder-aaaa".into(),
                hosts: vec!["a.test".into()],
            },
            SecretRule { name: "B".into(), placeholder: "tinybox-placeholder-bbbb".into(), hosts: vec![] },
        ],
        headers: BTreeMap::new(),
    }
}

fn injector() -> Injector {
    let values = BTreeMap::from([("A".to_owned(), "va".to_owned()), ("B".to_owned(), "vb".to_owned())]);
    Injector::new(rules(), values, None).unwrap()
}

fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut b = hyper::Request::builder().uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

#[test]
fn placeholders_are_found_wherever_they_are_and_each_once() {
    let r = rules();
    let found = placeholders_in(b"x tinybox-placeholder-bbbb y tinybox-placeholder-aaaa tinybox-placeholder-aaaa", &r);
    assert_eq!(found.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["B", "A"]);
    assert!(placeholders_in(b"tinybox-placeholder-cccc", &r).is_empty());
}

#[test]
fn only_a_bound_host_gets_a_value_and_only_in_a_header() {
    let inj = injector();
    let mut p = parts("/x", &[("host", "a.test"), ("authorization", "Bearer tinybox-placeholder-aaaa")]);
    let done = rewrite_head(&mut p, "a.test", 443, &inj).unwrap();
    assert_eq!(done, [Injected { secret: "A".into(), header: "authorization".into(), encoded: None }]);
    assert_eq!(p.headers["authorization"], "Bearer va");
    let mut p = parts("/x", &[("host", "a.test"), ("x-k", "tinybox-placeholder-bbbb")]);
    let err = rewrite_head(&mut p, "a.test", 443, &inj).unwrap_err();
    assert_eq!(err.status, 403);
    assert!(err.reason.contains("secret B is sent to a.test, which it is not bound to"), "{}", err.reason);
    let mut p = parts("/x?k=tinybox-placeholder-aaaa", &[("host", "a.test")]);
    assert!(rewrite_head(&mut p, "a.test", 443, &inj).unwrap_err().reason.contains("in the URL"));
    let mut p = parts("/x", &[("host", "a.test:8443")]);
    assert!(rewrite_head(&mut p, "a.test", 8443, &inj).is_ok(), "host with its port");
    let mut p = parts("/x", &[("host", "b.test")]);
    assert_eq!(rewrite_head(&mut p, "a.test", 443, &inj).unwrap_err().status, 400);
    assert!(check_body(b"{\"k\": \"tinybox-placeholder-aaaa\"}", &inj.rules).is_err());
    assert!(check_body(b"plain", &inj.rules).is_ok());
}

fn basic(credentials: &str) -> String {
    use base64::Engine as _;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(credentials))
}

#[test]
fn a_placeholder_inside_a_basic_credential_is_filled_and_encoded_again() {
    let inj = injector();
    // As git and pip send `https://user:TOKEN@host/`: the token is inside the encoding.
    let mut p =
        parts("/x", &[("host", "a.test"), ("authorization", &basic("x-access-token:tinybox-placeholder-aaaa"))]);
    let done = rewrite_head(&mut p, "a.test", 443, &inj).unwrap();
    let (sent, wrote) = (basic("x-access-token:va"), basic("x-access-token:tinybox-placeholder-aaaa"));
    let encoded = Some((sent[6..].to_owned(), wrote[6..].to_owned()));
    assert_eq!(done, [Injected { secret: "A".into(), header: "authorization".into(), encoded }]);
    assert_eq!(p.headers["authorization"], sent.as_str());
    // The scheme's name in any case; the bound-host rule holds inside the encoding too.
    let mut p = parts(
        "/x",
        &[("host", "a.test"), ("authorization", &basic("u:tinybox-placeholder-aaaa").replace("Basic", "bAsIc"))],
    );
    rewrite_head(&mut p, "a.test", 443, &inj).unwrap();
    assert_eq!(p.headers["authorization"], basic("u:va").as_str());
    let mut p = parts("/x", &[("host", "a.test"), ("authorization", &basic("u:tinybox-placeholder-bbbb"))]);
    assert!(rewrite_head(&mut p, "a.test", 443, &inj).unwrap_err().reason.contains("secret B is sent to a.test"));
    // A Basic credential without a placeholder, or not base64, is left as it is.
    for other in [basic("u:plain"), "Basic !!!not-base64".to_owned(), "Bearer abc".to_owned()] {
        let mut p = parts("/x", &[("host", "a.test"), ("authorization", &other)]);
        assert_eq!(rewrite_head(&mut p, "a.test", 443, &inj).unwrap(), []);
        assert_eq!(p.headers["authorization"], other.as_str());
    }
}
