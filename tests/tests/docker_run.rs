//! Live suite: `tinybox run` on docker as one `docker run --rm`
//! (`sandbox.run_once`, ADR 0023) against a real dockerd — the command's
//! streams, stdin, status and the one line for a missing program, the
//! box's workspace and hardening, a timeout and an interrupt, and a
//! `tinybox run` SIGKILLed mid-command: its record stays `creating` until
//! `tinybox rm` removes what it made. After each, no container of the
//! test's namespace is left. Each test skips, saying why, when no daemon
//! answers.

use std::io::{BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use tinybox_tests::docker::{self, GUARD, Namespace, docker};
use tinybox_tests::{Cli, read_line_within, skip};

macro_rules! need_docker {
    ($test:expr) => {
        if let Some(why) = docker::unavailable() {
            skip($test, &why);
            return;
        }
    };
}

/// `run --sandbox docker --namespace NS EXTRA -- COMMAND`.
fn run_args<'a>(ns: &'a Namespace, extra: &[&'a str], command: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["run", "--sandbox", "docker", "--namespace", ns.name.as_str()];
    a.extend_from_slice(extra);
    a.push("--");
    a.extend_from_slice(command);
    a
}

/// The containers of the namespace, running or not.
fn containers(ns: &Namespace) -> Vec<String> {
    let label = format!("label=tinybox.namespace={}", ns.name);
    let (code, out, err) = docker(&["ps", "-a", "--filter", &label, "--format", "{{.Names}}"]);
    assert_eq!(code, 0, "docker ps: {err}");
    out.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn a_run_is_one_container_with_the_callers_streams_its_status_and_nothing_left() {
    need_docker!("docker_run::a_run_is_one_container_with_the_callers_streams_its_status_and_nothing_left");
    let ns = Namespace::new("run-basics");
    let cli = Cli::new();

    // Both streams apart, the command's status; docker's init is pid 1, so
    // this is the box made for the command, not a kept-alive container.
    let script = "echo out; echo err >&2; tr '\\n' ' ' < /proc/1/cmdline >&2; exit 3";
    let (code, out, err) = cli.run(&run_args(&ns, &[], &["sh", "-c", script]));
    assert_eq!((code, out.as_str()), (3, "out\n"), "{err}");
    assert!(err.contains("tinybox: created box-0 on local/docker"), "{err}");
    assert!(err.contains("\nerr\n") && err.contains("docker-init"), "one docker run --rm --init: {err}");
    assert!(containers(&ns).is_empty(), "{:?}", containers(&ns));
    assert!(cli.run(&["ls"]).2.contains("no boxes"), "the record went with the box");

    // A missing program is named in one line, with 127.
    let (code, out, err) = cli.run(&run_args(&ns, &[], &["no-such-program", "x"]));
    assert_eq!((code, out.as_str()), (127, ""), "{err}");
    assert_eq!(err.lines().last(), Some("tinybox: no program no-such-program in the box"), "{err}");

    // stdin is the caller's own, passed through.
    let mut child = cli
        .cmd(&run_args(&ns, &[], &["tr", "a-z", "A-Z"]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"piped input\n").unwrap();
    let done = child.wait_with_output().unwrap();
    assert_eq!((done.status.code(), String::from_utf8_lossy(&done.stdout).as_ref()), (Some(0), "PIPED INPUT\n"));

    // The command's environment, the limits and hardening a box has.
    let probe = "echo $CMDV; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; \
                 grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ls /sys/class/net";
    let (code, out, err) = cli.run(&run_args(&ns, &["--pids", "64", "-e", "CMDV=from-cmd"], &["sh", "-c", probe]));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["from-cmd", "64"], "{out}");
    assert!(out.contains("CapEff:\t0000000000000000") && out.contains("NoNewPrivs:\t1"), "{out}");
    assert_eq!(lines.last(), Some(&"lo"), "the network is denied: {out}");
    assert!(containers(&ns).is_empty(), "{:?}", containers(&ns));

    // A box with ports keeps create, exec and rm: pid 1 is its keepalive.
    let (code, out, err) = cli.run(&run_args(&ns, &["--port", "18080:80"], &["cat", "/proc/1/cmdline"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("while :; do sleep 86400; done") && !out.contains("docker-init"), "{out}");
    assert!(containers(&ns).is_empty(), "{:?}", containers(&ns));
}

#[test]
fn a_bound_workspace_is_written_as_its_owner_and_refuses_setuid_bits() {
    need_docker!("docker_run::a_bound_workspace_is_written_as_its_owner_and_refuses_setuid_bits");
    let ns = Namespace::new("run-ws");
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("in.txt"), "from the host\n").unwrap();
    let script = "pwd; cat in.txt; echo made > out.txt; chmod u+s out.txt || echo refused";
    let ws_arg = ws.path().to_str().unwrap();
    let (code, out, err) = cli.run(&run_args(&ns, &["--workspace", ws_arg], &["sh", "-c", script]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "/workspace\nfrom the host\nrefused\n", "{err}");
    assert_eq!(std::fs::read_to_string(ws.path().join("out.txt")).unwrap(), "made\n");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(ws.path().join("out.txt")).unwrap().permissions());
    assert_eq!(mode & 0o6000, 0, "no setuid bit landed on the host");
    assert!(containers(&ns).is_empty(), "{:?}", containers(&ns));
}

#[test]
fn a_timeout_and_an_interrupt_stop_the_command_and_leave_nothing() {
    need_docker!("docker_run::a_timeout_and_an_interrupt_stop_the_command_and_leave_nothing");
    let ns = Namespace::new("run-stop");
    let cli = Cli::new();
    let (code, _, err) = cli.run(&run_args(&ns, &["--timeout", "1s"], &["sleep", "600"]));
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("ran longer than 1s and was stopped"), "{err}");
    assert!(containers(&ns).is_empty(), "{:?}", containers(&ns));

    let mut child = cli
        .cmd(&run_args(&ns, &[], &["sh", "-c", "echo started; sleep 600"]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, _out) = read_line_within(BufReader::new(child.stdout.take().unwrap()), GUARD);
    assert_eq!(line, "started\n");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(130), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(containers(&ns).is_empty(), "{:?}", containers(&ns));
    assert!(cli.run(&["ls"]).2.contains("no boxes"));
}

#[test]
fn a_killed_run_leaves_a_creating_record_that_rm_clears_with_its_container() {
    need_docker!("docker_run::a_killed_run_leaves_a_creating_record_that_rm_clears_with_its_container");
    let ns = Namespace::new("run-killed");
    let cli = Cli::new();
    // tinybox and its drivers in a group of their own, killed together: no
    // driver is left to stop the command, whose docker client (in a group
    // of its own) keeps the container running.
    let mut child = cli
        .cmd(&run_args(&ns, &[], &["sh", "-c", "echo started; sleep 600"]))
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (line, _out) = read_line_within(BufReader::new(child.stdout.take().unwrap()), GUARD);
    assert_eq!(line, "started\n");
    assert_eq!(containers(&ns), [ns.container("box-0")], "the box's container is named from its record");
    let group = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process_group(group, rustix::process::Signal::KILL).unwrap();
    child.wait().unwrap();
    assert_eq!(containers(&ns), [ns.container("box-0")], "nothing stopped the command");

    // The record names the box while anything of it may be left.
    let (code, out, err) = cli.run(&["--json", "ls"]);
    assert_eq!(code, 0, "{err}");
    let listing: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listing[0]["id"], "box-0", "{out}");
    assert_eq!(listing[0]["phase"], "creating", "{out}");

    let (code, out, err) = cli.run(&["rm", "box-0"]);
    assert_eq!((code, out.trim()), (0, "box-0"), "{err}");
    assert!(containers(&ns).is_empty(), "rm removed the container: {:?}", containers(&ns));
    assert!(cli.run(&["ls"]).2.contains("no boxes"));
}
