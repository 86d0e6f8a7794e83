//! The `tinybox-egress` binary as core and a box use it: `serve` from a
//! directory (ready line, pid file, socket, decision log, and its end when
//! the policy file goes), and `relay` ending as its command did.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::HttpUpstream;
use tinybox_egress::{Verdict, layout, read_decisions_file};

const EGRESS: &str = env!("CARGO_BIN_EXE_tinybox-egress");
const GUARD: Duration = Duration::from_secs(20);

fn ask(sock: &std::path::Path, request: &str) -> String {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_listens_in_its_directory_logs_each_decision_and_ends_with_its_policy() {
    let upstream = HttpUpstream::start().await;
    let port = upstream.port;
    let dir = tempfile::tempdir().unwrap();
    let policy = serde_json::json!([format!("web.test:{port}"), format!("127.0.0.1:{port}")]);
    std::fs::write(dir.path().join(layout::POLICY), policy.to_string()).unwrap();
    let mut child = Command::new(EGRESS)
        .args(["serve", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), layout::READY);
    let pid = std::fs::read_to_string(dir.path().join(layout::PID)).unwrap();
    assert_eq!(pid.trim(), child.id().to_string());

    let sock = dir.path().join(layout::SOCKET);
    let request = |host: &str| format!("GET http://{host}/p HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let sock2 = sock.clone();
    let allowed_req = request(&format!("127.0.0.1:{port}"));
    let allowed = tokio::task::spawn_blocking(move || ask(&sock2, &allowed_req)).await.unwrap();
    assert!(allowed.ends_with("upstream saw GET /p HTTP/1.1 with 0 body bytes"), "{allowed}");
    let sock2 = sock.clone();
    let refused = tokio::task::spawn_blocking(move || ask(&sock2, &request("other.test"))).await.unwrap();
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");

    let log = dir.path().join(layout::DECISIONS);
    let start = Instant::now();
    let decisions = loop {
        let d = read_decisions_file(&log).unwrap();
        if d.len() == 2 {
            break d;
        }
        assert!(start.elapsed() < GUARD, "two decisions logged: {d:?}");
        tokio::task::yield_now().await;
    };
    let verdicts: Vec<_> = decisions.iter().map(|d| (d.name.clone().unwrap(), d.decision)).collect();
    assert!(verdicts.contains(&("127.0.0.1".to_owned(), Verdict::Allowed)), "{verdicts:?}");
    assert!(verdicts.contains(&("other.test".to_owned(), Verdict::Refused)), "{verdicts:?}");
    assert!(decisions.iter().any(|d| d.bytes_down > 0), "{decisions:?}");

    // Its box is gone: the proxy ends by itself.
    std::fs::remove_file(dir.path().join(layout::POLICY)).unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < GUARD, "the proxy outlived its policy");
        tokio::task::yield_now().await;
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn serve_without_a_policy_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(EGRESS).args(["serve", "--dir"]).arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with(&format!("tinybox-egress: serving {}", dir.path().display())), "{err}");
    assert!(!dir.path().join(layout::PID).exists());
}

fn relay(command: &[&str]) -> std::process::ExitStatus {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    Command::new(EGRESS)
        .args(["relay", "--listen", &format!("127.0.0.1:{port}"), "--to", "/nonexistent", "--"])
        .args(command)
        .status()
        .unwrap()
}

#[test]
fn relay_ends_as_its_command_did() {
    assert_eq!(relay(&["sh", "-c", "exit 3"]).code(), Some(3));
    assert_eq!(relay(&["sh", "-c", "kill -TERM $$"]).signal(), Some(15));
    assert_eq!(relay(&["/nonexistent/program"]).code(), Some(125));
    let usage = Command::new(EGRESS).arg("relay").output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).starts_with("tinybox-egress: relay needs a command after --"));
}
