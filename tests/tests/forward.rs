//! Port forwarding, live: a server in a docker box answers on this
//! machine's 127.0.0.1 — for a local box and for one on an ssh host — the
//! listener is on loopback only, and it closes when the command holding it
//! is killed, when the box is removed, and with the daemon that held it.

use std::io::{BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tinybox_tests::docker;
use tinybox_tests::sshd::Sshd;
use tinybox_tests::{Cli, KillOnDrop, have, read_line_within, skip};

const GUARD: Duration = Duration::from_secs(60);

fn ok(cli: &Cli, args: &[&str]) -> String {
    let (code, out, err) = cli.run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// Starts a one-shot server on `port` inside the box that sends `greeting`,
/// and waits (bounded) until it listens.
fn serve_once(cli: &Cli, id: &str, port: u16, greeting: &str) -> KillOnDrop {
    let script = format!("echo {greeting} | nc -l -p {port}");
    let server = cli.cmd(&["exec", id, "--", "sh", "-c", &script]).stdin(Stdio::null()).spawn().unwrap();
    let probe = format!("netstat -ltn 2>/dev/null | grep -q ':{port} '");
    let deadline = Instant::now() + GUARD;
    while cli.run(&["exec", id, "--", "sh", "-c", &probe]).0 != 0 {
        assert!(Instant::now() < deadline, "the server in the box never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    KillOnDrop(server)
}

/// Runs `tinybox port-forward` in the foreground and returns it with the
/// address it printed once listening.
fn forward(cli: &Cli, id: &str, spec: &str) -> (KillOnDrop, String) {
    let mut child: Child = cli
        .cmd(&["port-forward", id, spec])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let (line, _) = read_line_within(out, GUARD);
    (KillOnDrop(child), line.trim().to_owned())
}

fn read_all(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(GUARD)).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// Whether anything on this machine listens on `port`, and on which address.
fn listeners(port: u16) -> Vec<String> {
    let hex = format!(":{port:04X}");
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table).unwrap_or_default().lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // State 0A is LISTEN.
            if cols.len() > 3 && cols[1].ends_with(&hex) && cols[3] == "0A" {
                found.push(cols[1].to_owned());
            }
        }
    }
    found
}

fn wait_closed(port: u16, what: &str) {
    let deadline = Instant::now() + GUARD;
    while !listeners(port).is_empty() {
        assert!(Instant::now() < deadline, "the listener outlived {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_docker_box_s_port_answers_on_loopback_only_and_closes_with_its_holder_and_its_box() {
    if let Some(why) = docker::unavailable() {
        return skip(
            "forward::a_docker_box_s_port_answers_on_loopback_only_and_closes_with_its_holder_and_its_box",
            &why,
        );
    }
    let cli = Cli::new();
    let id = ok(&cli, &["create", "--sandbox", "docker"]).trim().to_owned();

    let _server = serve_once(&cli, &id, 8000, "hello-through-the-forward");
    let (held, addr) = forward(&cli, &id, ":8000");
    let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    assert_eq!(listeners(port), [format!("0100007F:{port:04X}")], "listening on anything but 127.0.0.1");
    assert_eq!(read_all(&addr), "hello-through-the-forward\n");
    let ports = ok(&cli, &["--json", "ports", &id]);
    assert!(ports.contains(&format!("\"local_port\": {port}")), "{ports}");
    drop(held);
    wait_closed(port, "the killed port-forward command");

    // `rm` closes a forward still held.
    let _server = serve_once(&cli, &id, 8001, "again");
    let (_held, addr) = forward(&cli, &id, ":8001");
    let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    assert_eq!(read_all(&addr), "again\n");
    ok(&cli, &["rm", &id]);
    wait_closed(port, "the removed box");
}

#[test]
fn the_daemon_holds_a_detached_forward_and_closes_it_when_killed() {
    if let Some(why) = docker::unavailable() {
        return skip("forward::the_daemon_holds_a_detached_forward_and_closes_it_when_killed", &why);
    }
    let cli = Cli::new();
    let id = ok(&cli, &["create", "--sandbox", "docker"]).trim().to_owned();
    let (code, _, err) = cli.run(&["port-forward", "--detach", &id, ":8000"]);
    assert_eq!(code, 1);
    assert!(err.contains("no daemon runs") && err.contains("tinybox daemon start"), "{err}");

    ok(&cli, &["daemon", "start"]);
    let _server = serve_once(&cli, &id, 8000, "held-by-the-daemon");
    let addr = ok(&cli, &["port-forward", "--detach", &id, ":8000"]).trim().to_owned();
    let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    assert_eq!(read_all(&addr), "held-by-the-daemon\n");
    let status: serde_json::Value = serde_json::from_str(&ok(&cli, &["--json", "daemon", "status"])).unwrap();
    let pid = status["pid"].as_i64().unwrap() as i32;
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL).unwrap();
    wait_closed(port, "the killed daemon");

    // The next daemon holds it again, from the store.
    ok(&cli, &["daemon", "start"]);
    let deadline = Instant::now() + GUARD;
    while listeners(port).is_empty() {
        assert!(Instant::now() < deadline, "the next daemon did not hold the forward again");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _server = serve_once(&cli, &id, 8000, "held-again");
    assert_eq!(read_all(&addr), "held-again\n");
    ok(&cli, &["rm", &id]);
    wait_closed(port, "the removed box");
    ok(&cli, &["daemon", "stop"]);
}

#[test]
fn a_sandbox_that_does_not_declare_port_forward_is_refused_before_anything_listens() {
    if !have("bwrap") {
        return skip(
            "forward::a_sandbox_that_does_not_declare_port_forward_is_refused_before_anything_listens",
            "needs bwrap",
        );
    }
    let cli = Cli::new();
    let id = ok(&cli, &["create", "--sandbox", "namespace"]).trim().to_owned();
    let (code, _, err) = cli.run(&["port-forward", &id, "18123:80"]);
    assert_eq!(code, 1);
    assert!(err.contains("sandbox namespace does not support port_forward"), "{err}");
    assert!(listeners(18123).is_empty());
    let (code, _, err) = cli.run(&["port-forward", &id, "0:80"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"0:80\" is not a port mapping"), "{err}");
}

#[test]
fn a_docker_box_on_an_ssh_host_answers_here() {
    if let Some(why) = docker::unavailable() {
        return skip("forward::a_docker_box_on_an_ssh_host_answers_here", &why);
    }
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => return skip("forward::a_docker_box_on_an_ssh_host_answers_here", &why),
    };
    let cli = Cli::new();
    // root on this machine's sshd, with the test dockerd: docker over there.
    let host_add = sshd.host_add_args("far", "root");
    ok(&cli, &host_add.iter().map(String::as_str).collect::<Vec<_>>());
    let id = ok(&cli, &["create", "--host", "far", "--sandbox", "docker"]).trim().to_owned();
    let _server = serve_once(&cli, &id, 8000, "from-the-far-side");
    let (_held, addr) = forward(&cli, &id, ":8000");
    assert_eq!(read_all(&addr), "from-the-far-side\n");
    ok(&cli, &["rm", &id]);
    let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    wait_closed(port, "the removed box");
}
