//! The token: made once 0600, refused when exposed or malformed, matched whole.

use std::os::unix::fs::PermissionsExt;

use super::*;

#[test]
fn a_token_is_made_once_0600_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let made = Token::load_or_create(dir.path()).unwrap();
    let path = dir.path().join(TOKEN_FILE);
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(made.as_str().len(), 64);
    assert!(made.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
    let again = Token::load_or_create(dir.path()).unwrap();
    assert_eq!(again.as_str(), made.as_str());
    assert_eq!(made.e2b_key(), format!("e2b_{}", made.as_str()));
}

#[test]
fn a_token_readable_by_others_or_malformed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(TOKEN_FILE);
    std::fs::write(&path, "a".repeat(64)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Token::load_or_create(dir.path()).unwrap_err();
    assert!(matches!(e, TokenError::Exposed { mode: 0o644, .. }), "{e}");
    assert!(e.to_string().contains("0600"), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, "not a token").unwrap();
    assert!(matches!(Token::load_or_create(dir.path()), Err(TokenError::Malformed { .. })));
}

#[test]
fn only_the_whole_token_matches() {
    let t = Token::from_text(&"ab".repeat(32));
    assert!(t.matches(&"ab".repeat(32)));
    for wrong in ["", "ab", &"ab".repeat(31), &format!("{}a", "ab".repeat(32)), &"ba".repeat(32)] {
        assert!(!t.matches(wrong), "{wrong:?}");
    }
}
