//! Egress by allowlist on the docker sandbox, live (ADR 0020): a container
//! made with `--allow-host` reaches exactly what it lists, through its own
//! egress proxy relayed in by the static relay, and nothing else. The
//! image is the imported busybox one, so the relay must run without the
//! host's C library. Requests are busybox `nc` speaking the proxy's HTTP
//! form to the address `$http_proxy` names: Debian 12's busybox `wget`
//! segfaults on every fetch on these machines, in a container and out. The "internet" is a test host in a network namespace
//! of our own and the names come from a DNS server of our own: nothing
//! leaves this machine. Root only: the docker daemon's socket is root's.

use std::net::Ipv4Addr;

use tinybox_tests::boxes::{BoxEnv, Principal, probe_value};
use tinybox_tests::dns::DnsServer;
use tinybox_tests::docker::{Namespace, docker, unavailable};
use tinybox_tests::egress::{answer, fetch_script, in_box, kill_proxy, proxy_dir, proxy_pid, run, running, text};
use tinybox_tests::netns::{HTTP_PORT, Service, TestHost};
use tinybox_tests::{have, skip};

const TEST: &str = "egress_docker::a_docker_allowlist_box_reaches_what_it_lists_and_nothing_else";

#[test]
fn a_docker_allowlist_box_reaches_what_it_lists_and_nothing_else() {
    if let Some(why) = unavailable() {
        skip(TEST, &why);
        return;
    }
    if !have("cc") {
        skip(TEST, "cc is not installed (contrib/setup/install-deps), so the escape probe cannot be built");
        return;
    }
    let Some(peer) = TestHost::serving("dallow", Service::Http) else {
        skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
        return;
    };
    let peer_ip: Ipv4Addr = peer.addr.parse().unwrap();
    let dns = DnsServer::start(&[("allowed.test", peer_ip), ("other.test", peer_ip)]);
    let ns = Namespace::new("egress-docker");
    let env = BoxEnv::new(&Principal::Me);
    env.install_probe();
    let ws = env.workspace.path().to_str().unwrap().to_owned();
    let allowed = format!("allowed.test:{HTTP_PORT}");
    // The test host's address is private: a name entry alone never reaches it (ADR 0020).
    let listed_address = format!("{}:{HTTP_PORT}", peer.addr);
    let create = [
        "create",
        "--sandbox",
        "docker",
        "--namespace",
        &ns.name,
        "--workspace",
        &ws,
        "--allow-host",
        &allowed,
        "--allow-host",
        &listed_address,
    ];
    let out = run(&env, &dns, &create);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_owned();
    let container = ns.container(&id);
    let network = docker(&["container", "inspect", "--format", "{{.HostConfig.NetworkMode}}", &container]);
    assert_eq!(network.1.trim(), "none", "the container has no network but its loopback: {network:?}");
    // Of its proxy's directory the box sees the socket and nothing else:
    // not the lock (holding it stalled every later command of the box's),
    // the policy or the logs.
    let seen = in_box(&env, &dns, &id, "ls -A /run/tinybox/egress");
    assert_eq!(seen, "proxy.sock\n", "what the box sees of its proxy");

    // The allowed name, through the proxy the box's environment names.
    let proxied = format!("echo \"$http_proxy\"; {}", fetch_script(&format!("allowed.test:{HTTP_PORT}"), "/hello"));
    let got = in_box(&env, &dns, &id, &proxied);
    let (status, body) = answer(&got);
    assert_eq!(status, "http://127.0.0.1:3128\nHTTP/1.0 200 OK", "the allowed name through the proxy: {got}");
    assert_eq!(body, "hello from the test host: GET /hello HTTP/1.1\n", "{got}");

    // An unlisted name, and an address literal nobody listed: 403 from the proxy.
    let fetch = |authority: &str| in_box(&env, &dns, &id, &fetch_script(authority, "/"));
    let other = fetch(&format!("other.test:{HTTP_PORT}"));
    assert!(other.starts_with("HTTP/1.1 403 "), "an unlisted name: {other}");
    let unlisted = fetch(&format!("{}:{HTTP_PORT}", peer.host_addr));
    assert!(unlisted.starts_with("HTTP/1.1 403 "), "an unlisted address literal: {unlisted}");

    // Around the proxy there is no way out: the container's network is loopback only.
    let out = run(&env, &dns, &["exec", &id, "--", "/workspace/escape", "connect", &peer.addr, &HTTP_PORT.to_string()]);
    assert!(out.status.success(), "probe: {}", text(&out.stderr));
    assert_ne!(probe_value(&out.stdout, "connect").as_deref(), Some("ok"), "a direct TCP connection to the test host");
    for target in [peer.addr.as_str(), "allowed.test"] {
        let script = format!("nc -w 5 {target} {HTTP_PORT} </dev/null 2>/dev/null; echo rc=$?");
        assert_eq!(in_box(&env, &dns, &id, &script), "rc=1\n", "nc without the proxy, to {target}");
    }

    // What the proxy decided, as `logs --network` gives it.
    let out = run(&env, &dns, &["--json", "logs", "--network", &id]);
    assert!(out.status.success(), "logs: {}", text(&out.stderr));
    let log: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("the log is a JSON array");
    let find = |name: &str| log.iter().find(|d| d["name"] == name).unwrap_or_else(|| panic!("no {name} in {log:?}"));
    let ok = find("allowed.test");
    assert_eq!(ok["decision"], "allowed", "{ok}");
    assert_eq!(ok["address"], listed_address, "the address the proxy connected to");
    assert!(ok["bytes_up"].as_u64().unwrap() > 0 && ok["bytes_down"].as_u64().unwrap() > 0, "{ok}");
    let refused = find("other.test");
    assert_eq!(refused["decision"], "refused", "{refused}");
    assert!(refused["reason"].as_str().unwrap().contains("not on the allowlist"), "{refused}");
    assert_eq!(find(&peer.host_addr)["decision"], "refused", "the unlisted address literal");

    // A proxy that died is started again by the next command, and the
    // running container reaches the new one: its directory is bound, not its socket.
    let dir = proxy_dir(&env);
    let first = proxy_pid(&dir);
    kill_proxy(first);
    let got = in_box(&env, &dns, &id, &fetch_script(&format!("allowed.test:{HTTP_PORT}"), "/hello"));
    assert!(got.ends_with("hello from the test host: GET /hello HTTP/1.1\n"), "after the proxy was killed: {got}");
    let second = proxy_pid(&dir);
    assert_ne!(first, second, "a new proxy");

    // rm stops the proxy, removes its directory and the container.
    let out = run(&env, &dns, &["rm", &id]);
    assert!(out.status.success(), "rm: {}", text(&out.stderr));
    assert!(!running(second), "the proxy outlived rm");
    assert!(!dir.exists(), "rm left {}", dir.display());
    let (code, _, _) = docker(&["container", "inspect", &container]);
    assert_ne!(code, 0, "rm left container {container}");
}
