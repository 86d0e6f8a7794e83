//! A microVM's ports, live: an exec port left served by a host that goes
//! away before the agent answers, and a command waiting on a stuck port
//! ending at its timeout without running.

use super::*;

/// A box whose VM has answered a command: its id, its VM's directory and
/// the sockets of its ports (a health port and at least one exec port).
fn answering_vm(env: &BoxEnv) -> (String, PathBuf, Vec<PathBuf>) {
    let id = env.create(TCG);
    assert_eq!(exec_ok(env, &id, &["echo", "ready"]), "ready\n");
    let dir = vm_dir(env, &id);
    let ports: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with("port-") && p.extension() == Some("sock".as_ref())
        })
        .collect();
    assert!(ports.len() >= 2, "a health port and an exec port: {ports:?}");
    (id, dir, ports)
}

/// Hosts that send a begin and leave before the agent answers (an open
/// that gave up, a killed driver) on every port: the agent greets the next
/// host on each. It used to stop serving such a port for good, and every
/// later command on it waited out its open (seen in CI as a kit that hung).
#[test]
fn a_host_that_leaves_before_the_agent_answers_leaves_the_port_served() {
    need_microvm!("microvm_box::ports::a_host_that_leaves_before_the_agent_answers_leaves_the_port_served");
    let (env, _reaper) = env_for(&Principal::Me);
    let (id, _, ports) = answering_vm(&env);
    // A begin frame: kind, a little-endian length, a 16-byte nonce.
    let mut begin = vec![b'B', 16, 0, 0, 0];
    begin.extend_from_slice(&[7u8; 16]);
    for port in &ports {
        for _ in 0..3 {
            let mut s = std::os::unix::net::UnixStream::connect(port).unwrap();
            std::io::Write::write_all(&mut s, &begin).unwrap();
        }
    }
    for n in 0..3 {
        assert_eq!(exec_ok(&env, &id, &["echo", "served"]), "served\n", "command {n} after the hosts left");
    }
    remove_and_check_clean(&env, &id);
}

/// A command queued behind exec ports that others hold and never let go
/// (CI once saw the kit stall behind one stuck command: every later probe
/// waited for the port, and its cancel could not reach an exec still
/// waiting) ends with its own timeout, says it never ran, and leaves the
/// ports to serve the next command once they are free.
#[test]
fn a_command_waiting_for_a_stuck_port_ends_at_its_timeout_and_never_runs() {
    need_microvm!("microvm_box::ports::a_command_waiting_for_a_stuck_port_ends_at_its_timeout_and_never_runs");
    let (env, _reaper) = env_for(&Principal::Me);
    let (id, dir, ports) = answering_vm(&env);
    // Port 0 is the health check's; the rest run commands.
    let exec_ports = ports.len() - 1;
    // Every exec port's lock held here, as a command stuck in the guest holds its own.
    let held: Vec<std::fs::File> = (1..=exec_ports)
        .map(|n| {
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(format!("port-{n}.lock")))
                .unwrap();
            rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .unwrap_or_else(|e| panic!("port {n} is busy with nothing running: {e}"));
            lock
        })
        .collect();
    let mut queued = env.cli(&["exec", "--timeout", "2s", &id, "--", "echo", "ran"]);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(queued.output()));
    let out = rx
        .recv_timeout(GUARD)
        .unwrap_or_else(|_| panic!("a command waiting for a held port outlived its timeout by {GUARD:?}"))
        .unwrap();
    assert!(!out.status.success(), "{:?}: {}", out.status, text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "the queued command ran");
    assert!(text(&out.stderr).contains("never ran"), "{}", text(&out.stderr));
    drop(held);
    assert_eq!(exec_ok(&env, &id, &["echo", "served"]), "served\n");
    remove_and_check_clean(&env, &id);
}
