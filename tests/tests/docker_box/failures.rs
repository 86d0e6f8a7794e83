//! A docker box's failures, live: its daemon killed mid-exec, its command
//! dying with the driver that started it, a missing or unrunnable program,
//! and an unreachable daemon passed over by the auto-pick.

use super::*;

/// SIGKILL to one process this test found by pid; it may have gone already.
fn kill_pid(pid: u32) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).expect("a pid"),
        rustix::process::Signal::KILL,
    );
}

/// Waits for `child` to end, failing the test if it has not within `guard`.
fn output_within(child: std::process::Child, guard: Duration) -> std::process::Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(guard) {
        Ok(out) => out.expect("wait for tinybox"),
        Err(_) => {
            kill_pid(pid);
            panic!("tinybox {pid} did not end within {guard:?}");
        }
    }
}

#[test]
fn a_daemon_killed_mid_exec_is_tinybox_s_failure_in_one_line_not_the_command_s_status() {
    let test =
        "docker_box::failures::a_daemon_killed_mid_exec_is_tinybox_s_failure_in_one_line_not_the_command_s_status";
    need_docker!(test);
    let mut daemon = match PrivateDaemon::start() {
        Ok(d) => d,
        Err(why) => return skip(test, &why),
    };
    let cli = Cli::new();
    let created = cli
        .cmd(&["create", "--sandbox", "docker", "--namespace", "private"])
        .env("DOCKER_HOST", daemon.host())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let id = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    let mut exec = cli
        .cmd(&["exec", &id, "--", "sh", "-c", "echo started; exec sleep 600"])
        .env("DOCKER_HOST", daemon.host())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, out) = read_line_within(BufReader::new(exec.stdout.take().unwrap()), GUARD);
    assert_eq!(line, "started\n");
    drop(out);
    daemon.kill();
    let ended = output_within(exec, GUARD);
    let err = String::from_utf8_lossy(&ended.stderr);
    assert_eq!(ended.status.code(), Some(125), "tinybox's own failure, not the client's 255: {err:?}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("tinybox: ") && err.contains("lost docker"), "{err:?}");
}

#[test]
fn a_command_dies_with_the_driver_that_started_it() {
    need_docker!("docker_box::failures::a_command_dies_with_the_driver_that_started_it");
    let ns = Namespace::new("lifeline");
    let cli = Cli::new();
    let id = docker_box(&cli, &ns, &[]);
    let mut exec = cli
        .cmd(&["exec", &id, "--", "sh", "-c", "echo started; exec sleep 3141592"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, out) = read_line_within(BufReader::new(exec.stdout.take().unwrap()), GUARD);
    assert_eq!(line, "started\n");
    drop(out);
    let driver = tinybox_tests::processes()
        .into_iter()
        .find(|(_, parent, args)| *parent == exec.id() && args.contains("tinybox-driver-docker"))
        .map(|(pid, _, _)| pid)
        .expect("the CLI's docker driver");
    kill_pid(driver);
    let ended = output_within(exec, GUARD);
    assert_ne!(ended.status.code(), Some(0), "{ended:?}");

    let container = ns.container(&id);
    let deadline = Instant::now() + GUARD;
    loop {
        let ps = docker_ok(&["exec", &container, "ps", "-o", "pid,args"]);
        if !ps.contains("sleep 3141592") {
            break;
        }
        assert!(Instant::now() < deadline, "the command outlived its driver by {GUARD:?}: {ps}");
    }
}

#[test]
fn a_missing_program_exits_127_and_one_that_cannot_run_126_with_one_tinybox_line() {
    need_docker!("docker_box::failures::a_missing_program_exits_127_and_one_that_cannot_run_126_with_one_tinybox_line");
    let ns = Namespace::new("noprog");
    let cli = Cli::new();
    let id = docker_box(&cli, &ns, &[]);
    for (program, code, line) in [
        ("no-such-program", 127, "tinybox: no program no-such-program in the box\n"),
        ("/no/such/prog", 127, "tinybox: no program /no/such/prog in the box\n"),
        ("/etc/passwd", 126, "tinybox: /etc/passwd in the box is not an executable file\n"),
        ("/tmp", 126, "tinybox: /tmp in the box is not an executable file\n"),
    ] {
        let (got, out, err) = cli.run(&["exec", &id, "--", program, "arg"]);
        assert_eq!((got, out.as_str(), err.as_str()), (code, "", line), "{program}");
    }
    // A command's own 127 is its status, and its own words are left alone.
    let (got, _, err) = cli.run(&["exec", &id, "--", "sh", "-c", "echo mine >&2; exit 127"]);
    assert_eq!((got, err.as_str()), (127, "mine\n"));
}

#[test]
fn an_unreachable_daemon_makes_docker_unhealthy_and_the_auto_pick_passes_it_over_saying_why() {
    let test = "docker_box::failures::an_unreachable_daemon_makes_docker_unhealthy_and_the_auto_pick_passes_it_over_saying_why";
    if !tinybox_tests::have("docker") {
        return skip(test, "no docker CLI on PATH (apt-get install docker.io)");
    }
    let dir = tempfile::tempdir().unwrap();
    let nothing = format!("unix://{}", dir.path().join("nothing.sock").display());
    // A daemon that takes the connection and never answers: health is bounded.
    let silent_path = dir.path().join("silent.sock");
    let _silent = std::os::unix::net::UnixListener::bind(&silent_path).unwrap();
    let silent = format!("unix://{}", silent_path.display());
    let cli = Cli::new();
    for (host, why) in [
        (&nothing, "Cannot connect to the Docker daemon".to_owned()),
        (&silent, "docker version gave no answer within 2 s".to_owned()),
    ] {
        let out = cli.cmd(&["drivers"]).env("DOCKER_HOST", host).stdin(Stdio::null()).output().unwrap();
        let listing = String::from_utf8_lossy(&out.stdout);
        let docker_line = listing.lines().find(|l| l.starts_with("docker ")).expect("docker is listed");
        assert!(docker_line.contains("unavailable: the docker daemon does not answer"), "{docker_line}");
        assert!(docker_line.contains(&why), "{docker_line}");
    }
    let out = cli
        .cmd(&["run", "--untrusted", "--", "true"])
        .env("DOCKER_HOST", &nothing)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("on local/docker"), "docker was picked: {err}");
    assert!(err.contains("docker (unavailable: the docker daemon does not answer"), "the choice says why: {err}");
    // Asked for by name, docker's handshake skips the probe (core does not
    // read it: health_not_read); the create itself meets the dead daemon
    // and says so in one line, recording nothing.
    let out = cli
        .cmd(&["create", "--sandbox", "docker", "--image", "busybox"])
        .env("DOCKER_HOST", &nothing)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a create against no daemon succeeded: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("docker daemon not reachable") && err.contains("Cannot connect"), "{err}");
    let (code, listed, _) = cli.run(&["ls", "--json"]);
    assert_eq!((code, listed.trim()), (0, "[]"), "the failed create left a record");
}
