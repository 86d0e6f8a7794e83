//! Egress by allowlist on the microvm sandbox, live (ADR 0020): the guest
//! has no NIC; the agent listens on the guest's 127.0.0.1:3128 and carries
//! each connection over one virtio-serial port to the driver's relay on
//! the host, which hands it to the box's egress proxy. The "internet" is a
//! test host in a network namespace of our own and the names come from a
//! DNS server of our own: nothing leaves this machine. One emulated VM.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::dns::DnsServer;
use tinybox_tests::egress::{in_box, kill_proxy, proxy_dir, proxy_pid, run, running, text, wait_gone};
use tinybox_tests::microvm::{Reaper, TCG, processes_under};
use tinybox_tests::netns::{HTTP_PORT, OK_HEAD, TestHost, http_program};
use tinybox_tests::{need_microvm, skip};

const TEST: &str = "egress_microvm::a_microvm_allowlist_box_has_no_nic_and_reaches_what_it_lists_through_the_relay";

/// The bytes `/big` answers with: 32 MiB, more than the guest's socket
/// buffers, the mux's window and the host's sockets together hold.
const BIG: usize = 32 << 20;

/// The test host: `/big` gets [`BIG`] bytes of a pattern, anything else
/// 200 with a line naming the request.
fn program(addr: &str) -> String {
    http_program(
        addr,
        HTTP_PORT,
        &format!("big=bytes(range(256))*({BIG}//256)"),
        "ok(big) if ' /big ' in line else hello(line)",
    )
}

/// The md5 of the whole answer to `/big`, head included, as busybox's
/// md5sum in the guest prints it.
fn big_answer_md5() -> String {
    let head = format!("{OK_HEAD}Content-Length: {BIG}\r\n\r\n").replace('\r', "\\r").replace('\n', "\\n");
    let script = format!("import hashlib;b=bytes(range(256))*({BIG}//256);print(hashlib.md5(b'{head}'+b).hexdigest())");
    let out = std::process::Command::new("python3").args(["-c", &script]).output().expect("python3");
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

/// A shell line sending `GET http://AUTHORITY/PATH` in the proxy's form to
/// the host and port `$http_proxy` names, with busybox `nc`; prints the answer.
fn fetch_script(authority: &str, path: &str) -> String {
    format!(
        "p=${{http_proxy#http://}}; \
         printf 'GET http://{authority}{path} HTTP/1.1\\r\\nHost: {authority}\\r\\n\\r\\n' | nc -w 20 ${{p%:*}} ${{p##*:}}"
    )
}

fn status_line(got: &str) -> &str {
    got.split("\r\n").next().unwrap_or(got)
}

fn pid_in(file: &std::path::Path) -> i32 {
    std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display())).trim().parse().unwrap()
}

#[test]
fn a_microvm_allowlist_box_has_no_nic_and_reaches_what_it_lists_through_the_relay() {
    need_microvm!(TEST);
    let Some(peer) = TestHost::running("vmallow", HTTP_PORT, &program) else {
        return skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
    };
    let peer_ip: Ipv4Addr = peer.addr.parse().unwrap();
    let dns = DnsServer::start(&[("allowed.test", peer_ip), ("other.test", peer_ip)]);
    let env = BoxEnv::new(&Principal::Me);
    let _reaper = Reaper(env.store.path().to_owned());
    let allowed = format!("allowed.test:{HTTP_PORT}");
    // The test host's address is private: a name entry alone never reaches it (ADR 0020).
    let listed_address = format!("{}:{HTTP_PORT}", peer.addr);
    let mut create = vec!["create"];
    create.extend_from_slice(TCG);
    create.extend(["--allow-host", &allowed, "--allow-host", &listed_address]);
    let out = run(&env, &dns, &create);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_owned();

    // The record: the list in force, no NIC, the relay named.
    let out = run(&env, &dns, &["--json", "inspect", &id]);
    let inspect: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect --json");
    let handle = &inspect["workspace"]["handle"];
    assert_eq!(handle["allowlist"], true, "{inspect}");
    assert_eq!(handle["egress"], false, "an allowlist box has no passt NIC: {inspect}");
    let vm = PathBuf::from(handle["dir"].as_str().unwrap());
    let out = run(&env, &dns, &["inspect", &id]);
    let shown = text(&out.stdout);
    assert!(shown.contains(&format!("network    allowlist: {allowed}, {listed_address}")), "{shown}");
    assert!(shown.contains("no network interface; the allowlist's egress proxy reached through the agent's relay"));

    // The guest's only interface is loopback, and its proxy variables name the agent's listener.
    let got = in_box(&env, &dns, &id, "ls /sys/class/net; echo \"$http_proxy $https_proxy\"");
    assert_eq!(got, "lo\nhttp://127.0.0.1:3128 http://127.0.0.1:3128\n");

    // The listed name, through the proxy; an unlisted one and an unlisted address literal refused.
    let got = in_box(&env, &dns, &id, &fetch_script(&allowed, "/hello"));
    assert_eq!(status_line(&got), "HTTP/1.0 200 OK", "{got}");
    assert!(got.ends_with("hello from the test host: GET /hello HTTP/1.1\n"), "{got}");
    let other = in_box(&env, &dns, &id, &fetch_script(&format!("other.test:{HTTP_PORT}"), "/"));
    assert!(other.starts_with("HTTP/1.1 403 "), "an unlisted name: {other}");
    let unlisted = in_box(&env, &dns, &id, &fetch_script(&format!("{}:{HTTP_PORT}", peer.host_addr), "/"));
    assert!(unlisted.starts_with("HTTP/1.1 403 "), "an unlisted address literal: {unlisted}");

    // Around the proxy there is no way out.
    for target in [peer.addr.as_str(), "allowed.test"] {
        let script = format!("nc -w 5 {target} {HTTP_PORT} </dev/null 2>/dev/null; echo rc=$?");
        assert_eq!(in_box(&env, &dns, &id, &script), "rc=1\n", "nc without the proxy, to {target}");
    }

    // Several connections at once, each answered whole over the one port.
    let mut concurrent: String =
        (1..=8).map(|i| format!("( {} > /tmp/got-{i} ) & ", fetch_script(&allowed, &format!("/n{i}")))).collect();
    concurrent.push_str("wait; for i in 1 2 3 4 5 6 7 8; do tail -n 1 /tmp/got-$i; done");
    let got = in_box(&env, &dns, &id, &concurrent);
    let want: String = (1..=8).map(|i| format!("hello from the test host: GET /n{i} HTTP/1.1\n")).collect();
    assert_eq!(got, want);

    // A stalled stream holds only its own window: while a client reads
    // nothing of a 32 MiB answer (far more than every buffer on its way
    // holds), twenty connections after it are answered whole, one by one,
    // each bounded by `timeout` (the first that is not ends the loop); then
    // the first gets every byte, in order.
    let stalled = format!(
        "{big} | {{ while [ ! -e /tmp/go ]; do sleep 0.1; done; cat > /tmp/big; }} & \
         i=0; while [ $i -lt 20 ]; do i=$((i+1)); r=$({small} | tail -n 1); [ -n \"$r\" ] || break; echo \"$r\"; done | grep -c 'GET /small HTTP/1.1'; \
         touch /tmp/go; wait; wc -c < /tmp/big; md5sum < /tmp/big",
        big = fetch_script(&allowed, "/big").replace("nc -w 20", "nc -w 60"),
        small = fetch_script(&allowed, "/small").replace("nc -w 20", "timeout 60 nc -w 20"),
    );
    let got = in_box(&env, &dns, &id, &stalled);
    let head_len = format!("{OK_HEAD}Content-Length: {BIG}\r\n\r\n").len();
    assert_eq!(got, format!("20\n{}\n{}  -\n", BIG + head_len, big_answer_md5()));

    // A proxy that died is started again by the next command, and the
    // running relay reaches the new one: it connects by name per stream.
    let dir = proxy_dir(&env);
    let first = proxy_pid(&dir);
    kill_proxy(first);
    let got = in_box(&env, &dns, &id, &fetch_script(&allowed, "/again"));
    assert!(got.ends_with("hello from the test host: GET /again HTTP/1.1\n"), "after the proxy was killed: {got}");
    assert_ne!(proxy_pid(&dir), first, "a new proxy");

    // A relay killed behind tinybox's back is started again by the next command.
    let relay = pid_in(&vm.join("relay.pid"));
    kill_proxy(relay);
    let got = in_box(&env, &dns, &id, &fetch_script(&allowed, "/relay"));
    assert!(got.ends_with("hello from the test host: GET /relay HTTP/1.1\n"), "after the relay was killed: {got}");
    let relay = pid_in(&vm.join("relay.pid"));
    assert!(running(relay), "a new relay");
    let relay_cmdline = std::fs::read(format!("/proc/{relay}/cmdline")).unwrap();
    let mut needle = vm.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    assert!(relay_cmdline.windows(needle.len()).any(|w| w == needle), "the relay's command line names the VM's dir");

    // What the proxy decided, as `logs --network` gives it.
    let out = run(&env, &dns, &["--json", "logs", "--network", &id]);
    let log: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("the log is a JSON array");
    let allowed_ones = log.iter().filter(|d| d["name"] == "allowed.test" && d["decision"] == "allowed").count();
    assert!(allowed_ones >= 32, "every fetch of the listed name was logged allowed: {log:?}");

    // rm leaves no relay, no QEMU, no VM directory and no proxy.
    let qemu = pid_in(&vm.join("qemu.pid"));
    let proxy = proxy_pid(&dir);
    let out = run(&env, &dns, &["rm", &id]);
    assert!(out.status.success(), "rm: {}", text(&out.stderr));
    for (pid, what) in [(relay, "the relay"), (qemu, "QEMU"), (proxy, "the proxy")] {
        wait_gone(pid, what);
    }
    assert!(!vm.exists(), "rm left {}", vm.display());
    assert!(!dir.exists(), "rm left {}", dir.display());
    assert_eq!(processes_under(env.store.path()), vec![], "rm left processes under the store");
}
