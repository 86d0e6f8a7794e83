//! The daemon's parts SIGKILLed under it: a sandbox driver of its own
//! (namespace, docker) and its host driver in the middle of an exec, and
//! the daemon itself under five docker execs. After each: the command the
//! killed part ran has ended (no process of it is left, in a container
//! either), the caller heard one `tinybox:` line, and the daemon serves the
//! next exec with a new session, saying so in its log.

use std::io::BufReader;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tinybox_tests::Cli;
use tinybox_tests::chaos::{children, kill, processes_named, program};

use crate::GUARD;

/// A daemon on a test's store, stopped when the test ends however it ends.
pub struct Daemon<'a> {
    pub cli: &'a Cli,
}

impl<'a> Daemon<'a> {
    pub fn start(cli: &'a Cli) -> Daemon<'a> {
        let (code, _, err) = cli.run(&["daemon", "start"]);
        assert_eq!(code, 0, "daemon start: {err}");
        Daemon { cli }
    }

    pub fn pid(&self) -> u32 {
        let (code, out, err) = self.cli.run(&["--json", "daemon", "status"]);
        assert_eq!(code, 0, "daemon status: {err}");
        let status: serde_json::Value = serde_json::from_str(&out).unwrap();
        status["pid"].as_u64().unwrap() as u32
    }

    /// The daemon's own driver process `tinybox-driver-<name>`.
    pub fn driver(&self, name: &str) -> u32 {
        let want = format!("tinybox-driver-{name}");
        let pid = self.pid();
        *children(pid)
            .iter()
            .find(|c| program(**c).as_deref() == Some(want.as_str()))
            .unwrap_or_else(|| panic!("the daemon (pid {pid}) runs no {want}"))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.cli.home.path().join("daemon.log")).unwrap_or_default()
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        let _ = self.cli.run(&["daemon", "stop"]);
    }
}

/// Polls `cond` until it holds, failing after `GUARD`.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + GUARD;
    while !cond() {
        assert!(Instant::now() < deadline, "{what} did not happen within {GUARD:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tinybox exec BOX -- sh -c 'echo started; exec sleep SECONDS'`, returned
/// once the command has said it started. `seconds` marks the command's
/// processes (`sleep SECONDS`), so pick one no other test uses.
pub fn running_exec(cli: &Cli, id: &str, seconds: u32) -> Child {
    let script = format!("echo started; exec sleep {seconds}");
    let mut child = cli
        .cmd(&["exec", id, "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tinybox exec");
    let (line, _) = tinybox_tests::read_line_within(BufReader::new(child.stdout.take().unwrap()), GUARD);
    assert_eq!(line, "started\n", "the command did not start");
    child
}

/// A `sleep` length no other run of this suite uses: a process an aborted
/// earlier run left cannot be mistaken for this one's.
fn mark(n: u32) -> u32 {
    3_000_000 + (std::process::id() % 100_000) * 10 + n
}

/// The processes of `sleep SECONDS`, on the host and in any container.
pub fn sleeping(seconds: u32) -> usize {
    processes_named("sleep", &format!("sleep\0{seconds}"))
}

/// Waits for a caller whose command's driver (or daemon) was killed: it
/// must fail in one `tinybox:` line, 125.
pub fn ends_in_one_line(test: &str, child: Child) {
    let out = child.wait_with_output().expect("wait for tinybox exec");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{test}: {err}");
    assert!(err.lines().count() == 1 && err.starts_with("tinybox: "), "{test}: {err:?}");
}

/// One exec that must work: `echo ok` answers `ok`.
pub fn serves(test: &str, cli: &Cli, id: &str) {
    let (code, out, err) = cli.run(&["exec", id, "--", "echo", "ok"]);
    assert_eq!((code, out.as_str()), (0, "ok\n"), "{test}: the daemon no longer serves execs: {err}");
}

/// Kills the daemon's driver `driver` under an exec of box `id`, then
/// checks the command ended, the caller was told, and the daemon serves
/// again with a new session and says so.
fn kill_driver_under_exec(test: &str, cli: &Cli, id: &str, driver: &str, seconds: u32) {
    let daemon = Daemon::start(cli);
    serves(test, cli, id);
    let killed = daemon.driver(driver);
    let running = running_exec(cli, id, seconds);
    kill(killed);
    ends_in_one_line(&format!("{test} ({driver} killed)"), running);
    wait_until(&format!("{test}: the command of the killed {driver} driver ending"), || sleeping(seconds) == 0);
    serves(test, cli, id);
    assert_ne!(daemon.driver(driver), killed, "{test}: the dead {driver} session was kept");
    let said = format!("driver {driver} (pid {killed}) ended (killed by signal 9); a new session serves");
    assert!(daemon.log().contains(&said), "{test}: the log does not say {said:?}: {}", daemon.log());
    println!("{test}: {driver} driver {killed} killed under an exec; its command ended and a new session served");
}

#[test]
fn a_daemon_whose_namespace_or_host_driver_is_killed_ends_its_command_and_serves_again() {
    let test =
        "chaos::chaos::supervised::a_daemon_whose_namespace_or_host_driver_is_killed_ends_its_command_and_serves_again";
    if !tinybox_tests::have("bwrap") {
        return tinybox_tests::skip(test, "needs bwrap for namespace boxes");
    }
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "namespace"]);
    kill_driver_under_exec(test, &cli, &id, "namespace", mark(1));
    kill_driver_under_exec(test, &cli, &id, "local", mark(2));
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_daemon_whose_docker_driver_is_killed_ends_its_command_and_serves_again() {
    let test = "chaos::chaos::supervised::a_daemon_whose_docker_driver_is_killed_ends_its_command_and_serves_again";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return tinybox_tests::skip(test, &why);
    }
    let ns = tinybox_tests::docker::Namespace::new("chaos-supervised-driver");
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "docker", "--namespace", &ns.name]);
    kill_driver_under_exec(test, &cli, &id, "docker", mark(3));
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_daemon_killed_under_docker_execs_leaves_none_of_their_commands_running() {
    let test = "chaos::chaos::supervised::a_daemon_killed_under_docker_execs_leaves_none_of_their_commands_running";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return tinybox_tests::skip(test, &why);
    }
    let ns = tinybox_tests::docker::Namespace::new("chaos-supervised-daemon");
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "docker", "--namespace", &ns.name]);
    let daemon = Daemon::start(&cli);
    let marks: Vec<u32> = (4..9).map(mark).collect();
    let running: Vec<Child> = marks.iter().map(|s| running_exec(&cli, &id, *s)).collect();
    kill(daemon.pid());
    std::mem::forget(daemon);
    for caller in running {
        ends_in_one_line(test, caller);
    }
    for s in &marks {
        wait_until(&format!("{test}: sleep {s} ending in its container"), || sleeping(*s) == 0);
    }
    // The next daemon serves the box as before.
    let daemon = Daemon::start(&cli);
    serves(test, &cli, &id);
    drop(daemon);
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}
