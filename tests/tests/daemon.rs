//! The optional supervisor, live: `tinybox daemon` started and stopped by
//! the tests themselves, timers that act with no `reap`, one daemon per
//! store, callers of another version or another uid refused, and a daemon
//! killed with SIGKILL losing nothing.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use tinybox_tests::{Cli, have, skip};

const GUARD: Duration = Duration::from_secs(60);

/// A daemon on a test's store, stopped when the test ends however it ends.
struct Daemon<'a> {
    cli: &'a Cli,
}

impl<'a> Daemon<'a> {
    fn start(cli: &'a Cli) -> Daemon<'a> {
        let (code, _, err) = cli.run(&["daemon", "start"]);
        assert_eq!(code, 0, "daemon start: {err}");
        Daemon { cli }
    }

    fn status(&self) -> serde_json::Value {
        let (code, out, err) = self.cli.run(&["--json", "daemon", "status"]);
        assert_eq!(code, 0, "daemon status: {err}");
        serde_json::from_str(&out).unwrap()
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        let _ = self.cli.run(&["daemon", "stop"]);
    }
}

/// Polls `cond` every 50 ms until it holds, failing after `GUARD`.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + GUARD;
    while !cond() {
        assert!(Instant::now() < deadline, "{what} did not happen within {GUARD:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `pid` no longer runs: gone, or a zombie nobody has reaped yet.
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn ids(cli: &Cli, all: bool) -> Vec<String> {
    let args: &[&str] = if all { &["--json", "ls", "--all"] } else { &["--json", "ls"] };
    let (code, out, err) = cli.run(args);
    assert_eq!(code, 0, "ls: {err}");
    let boxes: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    boxes.iter().map(|b| b["id"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_box_whose_ttl_passes_is_reaped_by_the_daemon_without_any_reap() {
    let cli = Cli::new();
    let daemon = Daemon::start(&cli);
    let keep = cli.create(&["--sandbox", "passthrough", "--ttl", "1h"]);
    let short = cli.create(&["--sandbox", "passthrough", "--ttl", "2s"]);
    wait_until("the daemon reaping the 2 s box", || !ids(&cli, false).contains(&short));
    assert_eq!(ids(&cli, false), [keep], "only the expired box went");
    assert!(daemon.status()["reaped"].as_u64().unwrap() >= 1);
    // `tinybox reap` still works by hand beside it.
    let (code, _, err) = cli.run(&["reap"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn one_daemon_per_store_and_stop_waits_until_it_is_gone() {
    let cli = Cli::new();
    let (code, _, err) = cli.run(&["daemon", "status"]);
    assert_eq!(code, 1);
    assert!(err.contains("no daemon runs on store") && err.contains("tinybox daemon start"), "{err}");

    let daemon = Daemon::start(&cli);
    let pid = daemon.status()["pid"].as_u64().unwrap();
    let (code, _, err) = cli.run(&["daemon", "run"]);
    assert_eq!(code, 1);
    assert!(err.contains("a daemon already runs") && err.contains(&format!("pid {pid}")), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Starting again is no error: one runs.
    let (code, _, err) = cli.run(&["daemon", "start"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(daemon.status()["pid"].as_u64(), Some(pid));

    let (code, _, err) = cli.run(&["daemon", "stop"]);
    assert_eq!(code, 0, "{err}");
    // Stop returns once the daemon has let go of the store; its process
    // ends right after (a zombie, until whoever adopted it reaps it).
    assert!(!cli.home.path().join("daemon.sock").exists(), "the socket outlived the daemon");
    wait_until("the daemon's process ending", || ended(pid as i32));
    drop(daemon);
}

#[test]
fn a_daemon_of_another_version_is_named_and_a_caller_of_another_version_changes_nothing() {
    // A stand-in daemon of another version on the store's socket.
    let cli = Cli::new();
    let socket = cli.home.path().join("daemon.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let fake = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        let answer = r#"{"tinybox":"0.0.1-other","status":{"pid":1,"version":"0.0.1-other","store":"/","started_at":0,"ticks":0,"reaped":0,"snapshots_taken":0,"pool_boxes_made":0}}"#;
        (&stream).write_all(format!("{answer}\n").as_bytes()).unwrap();
        line
    });
    let (code, _, err) = cli.run(&["daemon", "status"]);
    let asked = fake.join().unwrap();
    assert!(asked.contains(&format!("\"tinybox\":\"{}\"", env!("CARGO_PKG_VERSION"))), "{asked}");
    assert_eq!(code, 1);
    assert!(err.contains("is tinybox 0.0.1-other and this is") && err.contains("tinybox daemon stop"), "{err}");
    std::fs::remove_file(&socket).unwrap();

    // The real daemon answers a caller of another version with its own
    // version, and does not act on what it asked.
    let daemon = Daemon::start(&cli);
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream.write_all(b"{\"tinybox\":\"0.0.1-other\",\"call\":\"stop\"}\n").unwrap();
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["tinybox"], env!("CARGO_PKG_VERSION"));
    assert!(reply.get("status").is_none(), "{reply}");
    assert_eq!(daemon.status()["version"], env!("CARGO_PKG_VERSION"), "it stopped for another version's caller");
}

#[test]
fn a_caller_who_does_not_own_the_store_is_refused_by_its_uid() {
    if rustix::process::geteuid().as_raw() != 0 || !have("runuser") || !have("python3") {
        skip(
            "daemon::a_caller_who_does_not_own_the_store_is_refused_by_its_uid",
            "needs root, runuser and python3 to call the daemon as another user",
        );
        return;
    }
    if tinybox_tests::sshd::ensure_user("tinybox-test", "/bin/sh").is_none() {
        skip("daemon::a_caller_who_does_not_own_the_store_is_refused_by_its_uid", "no /bin/sh for the test user");
        return;
    }
    refused_by_uid();
}

fn refused_by_uid() {
    use std::os::unix::fs::PermissionsExt;
    let cli = Cli::new();
    let daemon = Daemon::start(&cli);
    let socket = cli.home.path().join("daemon.sock");
    // Open the way in by hand (a store is 0700 and the socket 0600), so the
    // daemon's own check of the caller's uid is what is tested.
    for (path, mode) in [(cli.home.path().to_owned(), 0o755), (socket.clone(), 0o666)] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let script = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.sendall(b'{\"tinybox\":\"' + sys.argv[2].encode() + b'\",\"call\":\"stop\"}\\n')\nprint(s.makefile().readline().strip())";
    let out = std::process::Command::new("runuser")
        .args(["-u", "tinybox-test", "--", "python3", "-c", script])
        .arg(&socket)
        .arg(env!("CARGO_PKG_VERSION"))
        .output()
        .unwrap();
    let reply = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{reply} {}", String::from_utf8_lossy(&out.stderr));
    let reply: serde_json::Value = serde_json::from_str(reply.trim()).unwrap();
    let error = reply["error"].as_str().unwrap_or_default();
    assert!(error.contains("does not own this store"), "{reply}");
    assert_eq!(daemon.status()["version"], env!("CARGO_PKG_VERSION"), "another uid stopped the daemon");
}

#[test]
fn a_daemon_killed_with_sigkill_mid_fill_loses_nothing_and_the_next_one_finishes() {
    if !have("bwrap") {
        skip(
            "daemon::a_daemon_killed_with_sigkill_mid_fill_loses_nothing_and_the_next_one_finishes",
            "needs bwrap for namespace boxes",
        );
        return;
    }
    let cli = Cli::new();
    let (code, _, err) = cli.run(&["pool", "create", "warm", "--size", "4", "--no-fill", "--sandbox", "namespace"]);
    assert_eq!(code, 0, "{err}");
    let daemon = Daemon::start(&cli);
    let pid = daemon.status()["pid"].as_u64().unwrap() as i32;
    // Kill it the moment it has reserved its first box, read straight from
    // the store (a CLI poll would be slower than a namespace create).
    let records = cli.home.path().join("boxes");
    let reserved = || {
        std::fs::read_dir(&records)
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".json")))
            .unwrap_or(false)
    };
    wait_until("the daemon starting to fill the pool", reserved);
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL).unwrap();
    wait_until("the killed daemon's end", || ended(pid));
    std::mem::forget(daemon);
    let (_, out, _) = cli.run(&["--json", "ls", "--all"]);
    let creating = out.matches("\"creating\"").count();
    eprintln!("killed the daemon with {} boxes recorded, {creating} of them half-made", ids(&cli, true).len());

    let daemon = Daemon::start(&cli);
    let ready = || {
        let (_, out, _) = cli.run(&["--json", "pool", "ls"]);
        let pools: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap_or_default();
        pools.first().map(|p| (p["ready"].as_u64(), p["filling"].as_u64()))
    };
    wait_until("the next daemon filling the pool", || ready() == Some((Some(4), Some(0))));
    let all = ids(&cli, true);
    assert_eq!(all.len(), 4, "a half-made box was kept or lost: {all:?}");
    // Every waiting box works once handed out.
    let id = cli.create(&["--pool", "warm"]);
    let (code, out, err) = cli.run(&["exec", &id, "--", "echo", "ok"]);
    assert_eq!((code, out.as_str()), (0, "ok\n"), "{err}");
    drop(daemon);
}

#[test]
fn with_a_daemon_commands_run_through_it_with_the_same_streams_status_and_stops() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let daemon = Daemon::start(&cli);
    let out = cli
        .cmd(&["exec", &id, "--", "sh", "-c", "cat; echo to-stderr >&2; exit 3"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(b"through the daemon\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through the daemon\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "to-stderr\n");
    let (code, _, err) = cli.run(&["exec", "--timeout", "1s", &id, "--", "sleep", "30"]);
    assert_eq!(code, 124, "{err}");
    let (code, _, err) = cli.run(&["exec", "box-404", "--", "true"]);
    assert_eq!(code, 125);
    assert!(err.contains("no box named box-404") && err.trim().lines().count() == 1, "{err}");
    assert_eq!(daemon.status()["execs"].as_u64(), Some(3), "the commands did not go through the daemon");

    // A daemon killed mid-command: the caller says so in one line, 125.
    let mut running = cli
        .cmd(&["exec", &id, "--", "sh", "-c", "echo started; exec sleep 300"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = running.stdout.take().unwrap();
    let caller_pipe = format!("pipe:[{}]", rustix::fs::fstat(&stdout).unwrap().st_ino);
    let (line, _) = tinybox_tests::read_line_within(BufReader::new(stdout), GUARD);
    assert_eq!(line, "started\n");
    let pid = daemon.status()["pid"].as_i64().unwrap() as i32;
    // The command writes to the caller's pipe, which the driver took from
    // the caller itself: the long-lived daemon holds none of its streams.
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.display().to_string())
        .collect();
    assert!(!held.contains(&caller_pipe), "the daemon holds the caller's stdout {caller_pipe}: {held:?}");
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL).unwrap();
    let out = running.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("ended while running the command"), "{err}");
}
