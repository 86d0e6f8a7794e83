//! Unit tests of the validated names: the permitted set and each rule's error.

use super::*;
use proptest::prelude::*;

#[test]
fn accepts_the_permitted_set() {
    for ok in ["a", "box-0", "A.b_c-9", "..a", "a..", "-x", &"x".repeat(64)] {
        assert_eq!(BoxId::new(ok).unwrap().as_str(), ok);
    }
}

#[test]
fn rejects_each_rule_with_a_specific_error() {
    assert_eq!(BoxId::new(""), Err(NameError::Empty { kind: "box" }));
    assert!(matches!(HostName::new("x".repeat(65)), Err(NameError::TooLong { len: 65, .. })));
    assert!(matches!(SandboxName::new("a/b"), Err(NameError::BadChar { ch: '/', .. })));
    assert!(matches!(SnapshotId::new("sha256:abc"), Err(NameError::BadChar { ch: ':', .. })));
    assert!(matches!(BoxId::new("a b"), Err(NameError::BadChar { ch: ' ', .. })));
    assert!(matches!(BoxId::new("é"), Err(NameError::BadChar { ch: 'é', .. })));
    assert!(matches!(BoxId::new("."), Err(NameError::Reserved { .. })));
    assert!(matches!(BoxId::new(".."), Err(NameError::Reserved { .. })));
}

#[test]
fn error_names_the_value_and_the_rule() {
    let msg = BoxId::new("a;b").unwrap_err().to_string();
    assert!(msg.contains("\"a;b\"") && msg.contains("[A-Za-z0-9._-]"), "{msg}");
}

#[test]
fn deserialization_revalidates() {
    let err = serde_json::from_str::<BoxId>("\"../etc\"").unwrap_err();
    assert!(err.to_string().contains("contains '/'"), "{err}");
    assert!(serde_json::from_str::<HostName>("\"..\"").is_err());
    assert!(serde_json::from_str::<HostName>("\"\"").is_err());
}

fn valid_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._-]{1,64}".prop_filter("reserved", |s| s != "." && s != "..")
}

proptest! {
    #[test]
    fn accepted_names_round_trip_through_json(name in valid_name()) {
        let id = BoxId::new(name.clone()).unwrap();
        let json = serde_json::to_string(&id).unwrap();
        let back: BoxId = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back.as_str(), name.as_str());
    }

    #[test]
    fn rejected_names_are_rejected_on_deserialization_too(name in any::<String>()) {
        let constructed = SnapshotId::new(name.clone());
        let json = serde_json::to_string(&name).unwrap();
        let decoded = serde_json::from_str::<SnapshotId>(&json);
        prop_assert_eq!(constructed.is_ok(), decoded.is_ok());
        if constructed.is_err() {
            prop_assert!(validate_name("snapshot", &name).is_err());
        }
    }

    #[test]
    fn only_the_permitted_set_is_accepted(name in "[ -~]{0,70}") {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            && name != "." && name != "..";
        prop_assert_eq!(TemplateName::new(name).is_ok(), ok);
    }
}
