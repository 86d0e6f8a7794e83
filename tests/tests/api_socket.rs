//! `tinybox serve --socket` live: the API on a UNIX socket, made 0600 in a
//! directory only the server's user can write, where the peer's uid (the
//! kernel's `SO_PEERCRED`) is the credential: the server's own uid gets in
//! with no token (a wrong token is still refused), and the real
//! unprivileged user `tinybox-test` gets 403 and one line naming the rule
//! — even holding the right token, and even once the test has opened the
//! socket's mode to everyone so that only the uid check stands between
//! them. A socket in a directory others can write is refused at start,
//! with nothing made in the store. `serve env` names the socket.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde_json::{Value, json};
use tinybox_tests::api::Server;
use tinybox_tests::{Cli, have, skip};

/// One HTTP/1.1 request over the socket: (status, body as JSON).
fn over_socket(socket: &Path, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut s = UnixStream::connect(socket).expect("connect to the API socket");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let body = if method == "POST" { "{}" } else { "" };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: tinybox\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    parse(&raw)
}

fn parse(raw: &str) -> (u16, Value) {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer: {raw:?}"));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status");
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body:?}"));
    (status, body)
}

/// The same request as the user `tinybox-test` (python3 under runuser).
fn as_test_user(socket: &Path, method: &str, token: Option<&str>) -> (u16, Value) {
    let script = r#"import socket,sys
s=socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
auth='Authorization: Bearer '+sys.argv[3]+'\r\n' if sys.argv[3] else ''
body='{}' if sys.argv[2]=='POST' else ''
s.sendall((sys.argv[2]+' /v1/boxes HTTP/1.1\r\nHost: tinybox\r\nConnection: close\r\n'+auth+'Content-Type: application/json\r\nContent-Length: '+str(len(body))+'\r\n\r\n'+body).encode())
out=b''
while True:
    b=s.recv(65536)
    if not b: break
    out+=b
sys.stdout.write(out.decode())"#;
    let out = std::process::Command::new("runuser")
        .args(["-u", "tinybox-test", "--", "python3", "-c", script])
        .arg(socket)
        .arg(method)
        .arg(token.unwrap_or(""))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    parse(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn on_the_socket_only_the_servers_uid_gets_in_and_needs_no_token() {
    let test = "api_socket::on_the_socket_only_the_servers_uid_gets_in_and_needs_no_token";
    if rustix::process::geteuid().as_raw() != 0 || !have("runuser") || !have("python3") {
        return skip(test, "needs root, runuser and python3 to call the socket as another user");
    }
    if tinybox_tests::sshd::ensure_user("tinybox-test", "/bin/sh").is_none() {
        return skip(test, "no /bin/sh for the test user");
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("api.sock");
    let server = Server::start(&["--socket", socket.to_str().expect("utf-8")]);
    let (cli, token) = (&server.cli, server.token.as_str());
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!((meta.permissions().mode() & 0o777, meta.uid()), (0o600, 0), "the socket is 0600 and ours");

    // The server's own uid: in with no token, with the right one, not with a wrong one.
    assert_eq!(over_socket(&socket, "GET", "/v1/boxes", None), (200, json!([])));
    assert_eq!(over_socket(&socket, "GET", "/v1/boxes", Some(token)), (200, json!([])));
    let (status, v) = over_socket(&socket, "GET", "/v1/boxes", Some("00"));
    assert_eq!((status, v["error"]["kind"].as_str()), (401, Some("unauthorized")), "{v}");

    // `serve env` names the socket beside the port's settings.
    let out = cli.cmd(&["serve", "env"]).output().unwrap();
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(env.contains(&format!("export TINYBOX_API_SOCKET={}\n", socket.display())), "{env}");
    assert!(env.contains("export TINYBOX_API_URL=http://127.0.0.1:"), "{env}");

    // Another uid: the way in opened by hand (the directory and the socket
    // are 0700/0600, so the kernel alone would stop it), so that what is
    // tested is the server's own check of the peer's uid.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let before = tinybox_tests::tree_contents(cli.home.path());
    for (method, with) in [("GET", None), ("GET", Some(token)), ("POST", Some(token))] {
        let (status, v) = as_test_user(&socket, method, with);
        assert_eq!((status, v["error"]["kind"].as_str()), (403, Some("forbidden")), "{method} {with:?}: {v}");
        let line = v["error"]["message"].as_str().unwrap();
        assert!(!line.contains('\n') && line.contains("uid") && line.contains("only the uid"), "{line}");
    }
    assert_eq!(tinybox_tests::tree_contents(cli.home.path()), before, "a refused caller changed the store");
    assert_eq!(over_socket(&socket, "GET", "/v1/boxes", None), (200, json!([])), "and nothing was made");
}

#[test]
fn a_socket_in_a_directory_others_can_write_is_refused_and_nothing_is_made() {
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.path().join("api.sock");
    let before = tinybox_tests::tree_contents(cli.home.path());
    let out = cli.cmd(&["serve", "--listen", "127.0.0.1:0", "--socket"]).arg(&socket).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("writable by others") && err.contains(&socket.display().to_string()), "{err}");
    assert!(!socket.exists(), "no socket was bound");
    assert_eq!(tinybox_tests::tree_contents(cli.home.path()), before, "the store was changed");
}
