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
    assert_eq!(done, [Injected { secret: "A".into(), header: "authorization".into() }]);
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
