//! A microVM with egress, live: fenced from this machine and private
//! ranges unless an address is listed, and a create killed while its guest
//! boots leaving nothing behind.

use super::*;

/// This machine's own IPv4 addresses: a service on 0.0.0.0 answers on each.
fn host_addresses() -> Vec<String> {
    let out = std::process::Command::new("hostname").arg("-I").output().expect("hostname -I");
    text(&out.stdout).split_whitespace().filter(|a| !a.contains(':')).map(str::to_owned).collect()
}

/// Tries a TCP connection from the guest to each `addr` on `port` and says,
/// per address, whether it was made (busybox nc fails at once on a refused
/// or rejected connection; a made one idles until `-w`). A made connection
/// whose far end's FIN never comes back through passt and slirp4netns would
/// idle on: `timeout` ends it, and being ended that way (143) means it was made.
fn connects(env: &BoxEnv, id: &str, addrs: &[String], port: &str) -> Vec<(String, bool)> {
    let script = "port=$1; shift; for a in \"$@\"; do \
                  echo probe | timeout 10 nc -w 2 \"$a\" \"$port\" >/dev/null 2>&1; rc=$?; \
                  if [ $rc = 0 ] || [ $rc = 143 ]; then echo \"$a ok\"; else echo \"$a no\"; fi; done";
    let mut argv = vec!["sh", "-c", script, "probe", port];
    argv.extend(addrs.iter().map(String::as_str));
    let out = exec_ok(env, id, &argv);
    let got: Vec<(String, bool)> =
        out.lines().filter_map(|l| l.split_once(' ')).map(|(a, verdict)| (a.to_owned(), verdict == "ok")).collect();
    assert_eq!(got.len(), addrs.len(), "one verdict per address: {out}");
    got
}

/// The commands of `dir`'s processes, for checks on what a box is made of.
fn commands_under(dir: &std::path::Path) -> Vec<String> {
    processes_under(dir).into_iter().map(|(_, cmd)| cmd).collect()
}

#[test]
fn egress_is_fenced_from_the_host_and_private_ranges_unless_an_address_is_listed() {
    const TEST: &str =
        "microvm_box::egress::egress_is_fenced_from_the_host_and_private_ranges_unless_an_address_is_listed";
    need_microvm!(TEST);
    let Some(peer) = tinybox_tests::netns::TestHost::start("vmegress") else {
        skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
        return;
    };
    for program in ["slirp4netns", "iptables", "hostname", "passt"] {
        if !tinybox_tests::have(program) && !std::path::Path::new("/usr/sbin").join(program).exists() {
            skip(TEST, &format!("{program} is not installed (contrib/setup/install-deps)"));
            return;
        }
    }
    let (env, _reaper) = env_for(&Principal::Me);
    // A service of the host's on every address, the way a careless daemon listens.
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut host_side = host_addresses();
    assert!(!host_side.is_empty(), "hostname -I listed no address of this machine's");
    // The host's loopback, passt's gateway, slirp4netns's host and name
    // server addresses, this machine's side of the test host's link.
    host_side.extend(["127.0.0.1", "10.0.2.2", "10.0.2.3", "10.0.2.100", &peer.host_addr].map(str::to_owned));
    let peer_port = peer.port.to_string();
    let listed = format!("{}:{}", peer.addr, peer.port);

    // Plain egress: not the private test host, not the host's own service.
    let mut create = TCG.to_vec();
    create.extend(["--network", "egress"]);
    let fenced = env.create(&create);
    assert_eq!(connects(&env, &fenced, std::slice::from_ref(&peer.addr), &peer_port), [(peer.addr.clone(), false)]);
    for (addr, made) in connects(&env, &fenced, &host_side, &port) {
        assert!(!made, "plain egress reached the host's own service on {addr}");
    }
    // The guest's resolver still answers for public names, as the host's does.
    use std::net::ToSocketAddrs;
    match ("deb.debian.org", 80).to_socket_addrs() {
        Ok(addrs) => {
            let want: Vec<String> = addrs.filter(|a| a.is_ipv4()).map(|a| a.ip().to_string()).collect();
            let out = exec_ok(&env, &fenced, &["nslookup", "deb.debian.org"]);
            assert!(want.iter().any(|a| out.contains(a.as_str())), "the guest resolved {want:?} as {out}");
        }
        Err(e) => skip(&format!("{TEST} (DNS part)"), &format!("this host resolves no public name: {e}")),
    }
    let inspect = run_ok(&env, &["--json", "inspect", &fenced]);
    assert!(inspect.contains("behind the egress fence") && inspect.contains("no host loopback"), "{inspect}");
    // What the fence is made of is found from the box's directory alone,
    // even once the wrapper that would clean up after it is killed.
    let dir = vm_dir(&env, &fenced);
    let commands = commands_under(&dir);
    for part in ["tinybox-netwrap", "slirp4netns", "passt --runas"] {
        assert!(commands.iter().any(|c| c.contains(part)), "no {part} among {commands:#?}");
    }
    for (pid, cmd) in processes_under(&dir) {
        if cmd.starts_with("sh -c") && cmd.contains("tinybox-netwrap") {
            rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL)
                .unwrap();
        }
    }
    remove_and_check_clean(&env, &fenced);

    // Listed, the test host is reached, on that port; nothing else is.
    let mut create = TCG.to_vec();
    create.extend(["--network", "egress", "--allow-host", &listed]);
    let listing = env.create(&create);
    // nc's stdin stays open (a FIFO this shell holds) until the test host
    // has answered and closed: a guest that half-closes at once sometimes
    // never gets the reply through Debian 12's passt.
    // Up to three tries of 20 s: once, under a loaded CI machine, the first
    // connection through passt timed out.
    let read_peer = "for try in 1 2 3; do rm -f /tmp/in; mkfifo /tmp/in; \
                     nc -w 20 \"$0\" \"$1\" </tmp/in & exec 3>/tmp/in; wait $! && exit; exec 3>&-; done; exit 1";
    assert_eq!(exec_ok(&env, &listing, &["sh", "-c", read_peer, &peer.addr, &peer_port]), "hello", "the listed host");
    // The same probe that found everything else refused says so when it is not.
    assert_eq!(connects(&env, &listing, std::slice::from_ref(&peer.addr), &peer_port), [(peer.addr.clone(), true)]);
    for (addr, made) in connects(&env, &listing, &host_side, &port) {
        assert!(!made, "a box listing only {listed} reached the host's own service on {addr}");
    }
    let info: serde_json::Value = serde_json::from_str(&run_ok(&env, &["--json", "inspect", &listing])).unwrap();
    assert_eq!(info["workspace"]["network"], "egress", "{info}");
    assert_eq!(info["workspace"]["allow_hosts"], serde_json::json!([listed]), "{info}");
    assert!(info.to_string().contains(&format!("public addresses and {listed}")), "{info}");
    assert!(listener.accept().is_err(), "the host's own service was reached from a guest");
    remove_and_check_clean(&env, &listing);
}

#[test]
fn an_egress_create_killed_while_the_guest_boots_leaves_nothing_once_removed() {
    const TEST: &str = "microvm_box::egress::an_egress_create_killed_while_the_guest_boots_leaves_nothing_once_removed";
    need_microvm!(TEST);
    for program in ["slirp4netns", "iptables", "passt"] {
        if !tinybox_tests::have(program) && !std::path::Path::new("/usr/sbin").join(program).exists() {
            skip(TEST, &format!("{program} is not installed (contrib/setup/install-deps)"));
            return;
        }
    }
    let (env, _reaper) = env_for(&Principal::Me);
    let mut args = vec!["create"];
    args.extend_from_slice(TCG);
    args.extend(["--network", "egress"]);
    let mut child = env.cli(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // Once the fenced passt serves, the create is booting the guest (seconds under emulation).
    let deadline = Instant::now() + GUARD;
    loop {
        let commands: Vec<String> = vm_dirs(&env).iter().flat_map(|d| commands_under(d)).collect();
        if commands.iter().any(|c| c.contains("slirp4netns")) && commands.iter().any(|c| c.contains("passt --runas")) {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the create ended before its passt ran: {commands:#?}");
        assert!(Instant::now() < deadline, "no fenced passt within {GUARD:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The CLI and its driver die; the wrapper, slirp4netns, passt and QEMU stay.
    for pid in tinybox_tests::chaos::children(child.id()) {
        tinybox_tests::chaos::kill(pid);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let listed: serde_json::Value = serde_json::from_str(&run_ok(&env, &["--json", "ls"])).unwrap();
    let ids: Vec<String> = listed.as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 1, "{listed}");
    run_ok(&env, &["rm", &ids[0]]);
    assert_eq!(vm_dirs(&env), Vec::<PathBuf>::new(), "rm left a VM directory");
    assert_eq!(processes_under(env.store.path()), vec![], "rm left processes of the interrupted box");
}
