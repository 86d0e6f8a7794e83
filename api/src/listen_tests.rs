//! The socket is bound 0600 only in a directory this user alone can write,
//! replaces a stale socket and never a live one or a file; a TLS identity
//! that is not one is refused naming the flag.

use std::os::unix::fs::PermissionsExt;

use super::*;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[tokio::test]
async fn the_socket_is_0600_and_a_stale_one_is_replaced_but_a_live_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("api.sock");
    let first = bind_socket(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    // Nothing but the socket is left behind (the temporary name is gone).
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, [std::ffi::OsString::from("api.sock")]);
    let e = bind_socket(&path).unwrap_err();
    assert!(e.to_string().contains("already listens"), "{e}");
    drop(first);
    let _second = bind_socket(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
}

#[test]
fn a_socket_in_a_directory_others_can_write_or_over_a_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let path = dir.path().join("api.sock");
    let e = bind_socket(&path).unwrap_err();
    assert!(matches!(e, ListenError::SocketDir { .. }), "{e}");
    assert!(e.to_string().contains("writable by others (mode 777)"), "{e}");
    assert!(!path.exists(), "nothing was bound");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(&path, "mine").unwrap();
    let e = bind_socket(&path).unwrap_err();
    assert!(e.to_string().contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"mine", "the file was left alone");
    let e = bind_socket(&dir.path().join("none/api.sock")).unwrap_err();
    assert!(e.to_string().contains("cannot be read"), "{e}");
}

#[test]
fn only_the_servers_own_uid_is_let_in_on_the_socket() {
    let me = rustix::process::geteuid().as_raw();
    assert_eq!(crate::auth::socket_refusal(Some(me)), None);
    let other = crate::auth::socket_refusal(Some(me + 1)).unwrap();
    assert!(other.contains(&format!("uid {}", me + 1)) && other.contains("only the uid"), "{other}");
    assert!(crate::auth::socket_refusal(None).is_some());
}

#[test]
fn a_tls_identity_that_is_not_one_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, "not pem").unwrap();
    std::fs::write(&key, "not pem").unwrap();
    let e = tls_config(&cert, &key).unwrap_err();
    assert!(matches!(e, ListenError::Cert { .. }) && e.to_string().starts_with("--tls-cert"), "{e}");
    let missing = tls_config(&dir.path().join("none.pem"), &key).unwrap_err();
    assert!(missing.to_string().contains("none.pem"), "{missing}");
}
