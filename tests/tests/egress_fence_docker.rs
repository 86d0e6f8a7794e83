//! The egress fence on the docker sandbox, live (ADR 0021): a plain egress
//! box reaches neither a private test host (in a network namespace of the
//! suite's own) nor a service of this machine's listening on every address,
//! through docker's bridge, any of `hostname -I`'s addresses or loopback;
//! listed, the test host is reached; the box holds no capability and its
//! root's attempts leave the fence standing; forks and resumed boxes are
//! fenced again; `rm` leaves no helper container behind. The same holds
//! for a user who reaches docker through the docker group only, and for a
//! docker host reached over ssh.

use std::net::TcpListener;
use std::sync::Arc;

use tinybox_core::Tinybox;
use tinybox_core::clock::SystemClock;
use tinybox_core::model::{BoxId, Lifecycle, NetworkPolicy};
use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::docker::{self, Namespace, docker, run, run_ok};
use tinybox_tests::netns::TestHost;
use tinybox_tests::sshd::Sshd;
use tinybox_tests::{Cli, skip};

/// One test host at a time: a [`TestHost`]'s names are this process's.
static ONE_TEST_HOST: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const TEST: &str = "egress_fence_docker::a_docker_egress_box_is_fenced_from_the_host_and_private_ranges_unless_listed";

/// What `nc ADDR PORT` in the box got: the peer's words, or its failure.
async fn connect(tb: &Tinybox, id: &BoxId, addr: &str, port: &str) -> Result<String, String> {
    let out = run(tb, id, &["nc", "-w", "5", addr, port]).await;
    match out.status.success() && !out.stdout.is_empty() {
        true => Ok(out.stdout),
        false => Err(format!("{}: {}", out.status, out.stderr.trim())),
    }
}

fn host_addresses() -> Vec<String> {
    let out = std::process::Command::new("hostname").arg("-I").output().expect("hostname -I");
    String::from_utf8_lossy(&out.stdout).split_whitespace().filter(|a| !a.contains(':')).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_egress_box_is_fenced_from_the_host_and_private_ranges_unless_listed() {
    if let Some(why) = docker::unavailable() {
        return skip(TEST, &why);
    }
    let _one = ONE_TEST_HOST.lock().await;
    let Some(peer) = TestHost::start("dfence") else {
        return skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
    };
    if !std::path::Path::new("/usr/sbin/iptables").exists() {
        return skip(TEST, "iptables is not installed on the docker host (apt-get install iptables)");
    }
    let ns = Namespace::new("fence");
    let (tb, _dir) = docker::engine(Arc::new(SystemClock));
    // A service of this machine's on every address, as a careless daemon listens.
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let gateway = docker::bridge_address();
    let mut host_side = host_addresses();
    assert!(!host_side.is_empty(), "hostname -I listed no address of this machine's");
    host_side.extend([gateway.clone(), "127.0.0.1".to_owned(), peer.host_addr.clone()]);
    let peer_port = peer.port.to_string();

    // Plain egress: neither the private test host nor the host itself.
    let mut spec = docker::spec(&ns);
    spec.network = Some(NetworkPolicy::Egress);
    spec.lifecycle = Lifecycle::Persistent { autosnapshot_secs: 86_400 };
    let plain = tb.create(spec.clone()).await.unwrap();
    let got = connect(&tb, &plain.id, &peer.addr, &peer_port).await;
    assert!(got.is_err(), "plain egress reached the private test host: {got:?}");
    for addr in &host_side {
        let got = connect(&tb, &plain.id, addr, &port).await;
        assert!(got.is_err(), "plain egress reached this machine's service on {addr}: {got:?}");
    }

    // The box's root holds no capability, so it cannot take the fence down:
    // it tries what its tools allow, and the fence still stands.
    let status = run_ok(&tb, &plain.id, &["sh", "-c", "id -u; grep CapEff /proc/self/status"]).await;
    assert_eq!(status, "0\nCapEff:\t0000000000000000\n", "the box's root holds a capability");
    for attempt in ["ip route flush table all", "ip link set eth0 down", "ip route add 10.254.0.0/16 dev eth0"] {
        let tried = run(&tb, &plain.id, &["sh", "-c", attempt]).await;
        assert!(!tried.status.success(), "the box's root could `{attempt}`: {tried:?}");
        assert!(tried.stderr.contains("Operation not permitted"), "`{attempt}`: {}", tried.stderr);
    }
    let got = connect(&tb, &plain.id, &peer.addr, &peer_port).await;
    assert!(got.is_err(), "after the box's attempts, it reached the test host: {got:?}");

    // Listed, the test host is reached, on that port; the host's own
    // addresses stay fenced.
    let mut listing_spec = spec.clone();
    listing_spec.allow_hosts = vec![format!("{}:{}", peer.addr, peer.port)];
    let listing = tb.create(listing_spec).await.unwrap();
    assert_eq!(connect(&tb, &listing.id, &peer.addr, &peer_port).await, Ok("hello".to_owned()));
    for addr in &host_side {
        let got = connect(&tb, &listing.id, addr, &port).await;
        assert!(got.is_err(), "a listing box reached this machine's service on {addr}: {got:?}");
    }
    let view = tb.inspect(&listing.id).await.unwrap();
    assert_eq!(view.info.workspace.as_ref().unwrap().allow_hosts, [format!("{}:{}", peer.addr, peer.port)]);

    // A fork and a resumed box get a new network namespace: fenced again,
    // with the exceptions of the box they come from.
    let fork = tb.fork(&listing.id).await.unwrap();
    assert_eq!(connect(&tb, &fork.id, &peer.addr, &peer_port).await, Ok("hello".to_owned()));
    let got = connect(&tb, &fork.id, &gateway, &port).await;
    assert!(got.is_err(), "a fork reached this machine's service on {gateway}: {got:?}");
    tb.stop(&plain.id).await.unwrap();
    tb.resume(&plain.id).await.unwrap();
    let got = connect(&tb, &plain.id, &peer.addr, &peer_port).await;
    assert!(got.is_err(), "a resumed box reached the private test host: {got:?}");
    let got = connect(&tb, &plain.id, &gateway, &port).await;
    assert!(got.is_err(), "a resumed box reached this machine's service on {gateway}: {got:?}");
    assert!(listener.accept().is_err(), "this machine's service was reached");

    // Every helper is the box's, found and removed with it.
    for id in [&plain.id, &listing.id, &fork.id] {
        let holder = format!("tinybox.net-{}-{id}", ns.name);
        assert_eq!(docker(&["container", "inspect", &holder]).0, 0, "box {id} has no holder {holder}");
        tb.remove(id).await.unwrap();
        assert_ne!(docker(&["container", "inspect", &holder]).0, 0, "rm left {holder}");
    }
    let label = format!("label=tinybox.namespace={}", ns.name);
    let (_, left, _) = docker(&["ps", "-aq", "--filter", &label]);
    assert_eq!(left.trim(), "", "containers left in the namespace");
    tb.close().await;
}

/// The user who reaches docker through its group only (contrib/setup/start-test-user).
const DOCKER_USER: &str = "tinybox-docker";

#[test]
fn a_docker_group_user_s_egress_box_is_fenced_too() {
    const TEST: &str = "egress_fence_docker::a_docker_group_user_s_egress_box_is_fenced_too";
    if let Some(why) = docker::unavailable() {
        return skip(TEST, &why);
    }
    let id = |flag: &str| {
        let out = std::process::Command::new("id").args([flag, DOCKER_USER]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().ok().filter(|_| out.status.success())
    };
    let groups = std::process::Command::new("id").args(["-nG", DOCKER_USER]).output();
    let in_docker = groups.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().any(|g| g == "docker"));
    let (Some(uid), Some(gid), true) = (id("-u"), id("-g"), in_docker) else {
        return skip(TEST, &format!("no user {DOCKER_USER} in group docker (contrib/setup/start-test-user makes it)"));
    };
    let _one = ONE_TEST_HOST.blocking_lock();
    let Some(peer) = TestHost::start("dgroup") else {
        return skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
    };
    let who = Principal::User { name: DOCKER_USER.into(), uid, gid };
    let env = BoxEnv::new(&who);
    let ns = Namespace::new("fence-group");
    let create = |extra: &[&str]| {
        let mut args = vec!["create", "--sandbox", "docker", "--namespace", &ns.name, "--network", "egress"];
        args.extend_from_slice(extra);
        let out = env.cli(&args).env("TINYBOX_DOCKER_BASE_IMAGE", docker::BASE_IMAGE).output().unwrap();
        assert!(out.status.success(), "{DOCKER_USER}: create {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let nc = |box_id: &str, addr: &str, port: &str| {
        let out = env.run(&["exec", box_id, "--", "nc", "-w", "5", addr, port]);
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let port = peer.port.to_string();
    let plain = create(&[]);
    let (reached, said) = nc(&plain, &peer.addr, &port);
    assert!(!reached || said.is_empty(), "{DOCKER_USER}'s plain egress box reached the private test host: {said}");
    let gateway = docker::bridge_address();
    let (reached, said) = nc(&plain, &gateway, "22");
    assert!(!reached || said.is_empty(), "{DOCKER_USER}'s box reached this machine on {gateway}: {said}");
    let listed = format!("{}:{}", peer.addr, peer.port);
    let listing = create(&["--allow-host", &listed]);
    assert_eq!(nc(&listing, &peer.addr, &port), (true, "hello".to_owned()), "{DOCKER_USER}: the listed test host");
    for box_id in [&plain, &listing] {
        let out = env.run(&["rm", box_id]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let label = format!("label=tinybox.namespace={}", ns.name);
    let (_, left, _) = docker(&["ps", "-aq", "--filter", &label]);
    assert_eq!(left.trim(), "", "containers left in the namespace");
}

#[test]
fn an_egress_box_of_a_docker_host_reached_over_ssh_is_fenced_there() {
    const TEST: &str = "egress_fence_docker::an_egress_box_of_a_docker_host_reached_over_ssh_is_fenced_there";
    if let Some(why) = docker::unavailable() {
        return skip(TEST, &why);
    }
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => return skip(TEST, &why),
    };
    let _one = ONE_TEST_HOST.blocking_lock();
    let Some(peer) = TestHost::start("dssh") else {
        return skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
    };
    let cli = Cli::new();
    let ns = Namespace::new("fence-ssh");
    // root on this machine's sshd, with this machine's daemon: docker over there.
    let host_add = sshd.host_add_args("far", "root");
    let (code, _, err) = cli.run(&host_add.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    let create = |extra: &[&str]| {
        let mut args = vec!["--host", "far", "--sandbox", "docker", "--namespace", &ns.name, "--network", "egress"];
        args.extend_from_slice(extra);
        cli.create(&args)
    };
    let nc = |box_id: &str, addr: &str, port: &str| {
        let (code, out, _) = cli.run(&["exec", box_id, "--", "nc", "-w", "5", addr, port]);
        (code == 0, out)
    };
    let port = peer.port.to_string();
    let plain = create(&[]);
    let (reached, said) = nc(&plain, &peer.addr, &port);
    assert!(!reached || said.is_empty(), "a plain egress box over ssh reached the private test host: {said}");
    let gateway = docker::bridge_address();
    let (reached, said) = nc(&plain, &gateway, "22");
    assert!(!reached || said.is_empty(), "a box over ssh reached its docker host on {gateway}: {said}");
    let listed = format!("{}:{}", peer.addr, peer.port);
    let listing = create(&["--allow-host", &listed]);
    assert_eq!(nc(&listing, &peer.addr, &port), (true, "hello".to_owned()), "the listed test host, over ssh");
    for box_id in [&plain, &listing] {
        let (code, _, err) = cli.run(&["rm", box_id]);
        assert_eq!(code, 0, "{err}");
    }
    let label = format!("label=tinybox.namespace={}", ns.name);
    let (_, left, _) = docker(&["ps", "-aq", "--filter", &label]);
    assert_eq!(left.trim(), "", "containers left in the namespace");
}
