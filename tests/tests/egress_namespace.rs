//! Egress by allowlist on the namespace sandbox, live (ADR 0020): a box
//! made with `--allow-host` reaches exactly what it lists, through its own
//! egress proxy, and nothing else. The "internet" is a test host in a
//! network namespace of our own and the names come from a DNS server of
//! our own: nothing leaves this machine. Run as root and, rootless, as the
//! unprivileged test user.

use std::net::Ipv4Addr;

use tinybox_tests::boxes::{BoxEnv, Principal, probe_value};
use tinybox_tests::dns::DnsServer;
use tinybox_tests::egress::{in_box, kill_proxy, proxy_dir, proxy_pid, run, running, text};
use tinybox_tests::netns::{HTTP_PORT, Service, TestHost};
use tinybox_tests::{have, skip};

const TEST: &str = "egress_namespace::an_allowlist_box_reaches_what_it_lists_and_nothing_else";

#[test]
fn an_allowlist_box_reaches_what_it_lists_and_nothing_else() {
    if !have("bwrap") {
        skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
        return;
    }
    for program in ["curl", "wget", "cc"] {
        if !have(program) {
            skip(TEST, &format!("{program} is not installed (contrib/setup/install-deps)"));
            return;
        }
    }
    let Some(peer) = TestHost::serving("allow", Service::Http) else {
        skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
        return;
    };
    let peer_ip: Ipv4Addr = peer.addr.parse().unwrap();
    let dns = DnsServer::start(&[("allowed.test", peer_ip), ("other.test", peer_ip)]);
    for who in Principal::all(TEST) {
        allowlist_as(&who, &peer, &dns);
    }
}

fn allowlist_as(who: &Principal, peer: &TestHost, dns: &DnsServer) {
    let label = who.label();
    let env = BoxEnv::new(who);
    env.install_probe();
    let ws = env.workspace.path().to_str().unwrap().to_owned();
    let allowed = format!("allowed.test:{HTTP_PORT}");
    // The test host's address is private: a name entry alone never reaches it (ADR 0020).
    let listed_address = format!("{}:{HTTP_PORT}", peer.addr);
    let out = run(
        &env,
        dns,
        &[
            "create",
            "--sandbox",
            "namespace",
            "--workspace",
            &ws,
            "--allow-host",
            &allowed,
            "--allow-host",
            &listed_address,
        ],
    );
    assert!(out.status.success(), "{label}: create: {}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_owned();

    // The allowed name, through the proxy the box's environment names.
    let url = format!("http://allowed.test:{HTTP_PORT}/hello");
    let got = in_box(&env, dns, &id, &format!("echo \"$http_proxy\"; curl -sS -m 20 {url}"));
    assert_eq!(
        got, "http://127.0.0.1:3128\nhello from the test host: GET /hello HTTP/1.1\n",
        "{label}: the allowed name through the proxy"
    );

    // An unlisted name, and an address literal nobody listed: 403 from the proxy.
    let status = |url: &str| format!("curl -sS -m 20 -o /dev/null -w '%{{http_code}}' {url}");
    let other = in_box(&env, dns, &id, &status(&format!("http://other.test:{HTTP_PORT}/")));
    assert_eq!(other, "403", "{label}: an unlisted name");
    let unlisted_ip = format!("http://{}:{HTTP_PORT}/", peer.host_addr);
    assert_eq!(in_box(&env, dns, &id, &status(&unlisted_ip)), "403", "{label}: an unlisted address literal");

    // Around the proxy there is no way out: the box's network is loopback only.
    let out = probe_connect(&env, dns, &id, &peer.addr);
    assert_ne!(out.as_deref(), Some("ok"), "{label}: a direct TCP connection to the test host");
    for target in [format!("http://{}:{HTTP_PORT}/", peer.addr), url.clone()] {
        let script = format!(
            "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY wget -q -t 1 -T 5 -O - {target}; echo rc=$?"
        );
        let got = in_box(&env, dns, &id, &script);
        assert!(got.ends_with("rc=4\n") || got.ends_with("rc=1\n"), "{label}: wget without the proxy, {target}: {got}");
        assert!(!got.contains("hello from the test host"), "{label}: {got}");
    }

    // What the proxy decided, as `logs --network` gives it.
    let out = run(&env, dns, &["--json", "logs", "--network", &id]);
    assert!(out.status.success(), "{label}: logs: {}", text(&out.stderr));
    let log: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("the log is a JSON array");
    let find =
        |name: &str| log.iter().find(|d| d["name"] == name).unwrap_or_else(|| panic!("{label}: no {name} in {log:?}"));
    let ok = find("allowed.test");
    assert_eq!(ok["decision"], "allowed", "{label}: {ok}");
    assert_eq!(ok["port"], HTTP_PORT, "{label}: {ok}");
    assert_eq!(ok["address"], listed_address, "{label}: the address the proxy connected to");
    assert!(ok["bytes_up"].as_u64().unwrap() > 0 && ok["bytes_down"].as_u64().unwrap() > 0, "{label}: {ok}");
    let refused = find("other.test");
    assert_eq!(refused["decision"], "refused", "{label}: {refused}");
    assert!(refused["reason"].as_str().unwrap().contains("not on the allowlist"), "{label}: {refused}");
    assert_eq!(find(&peer.host_addr)["decision"], "refused", "{label}: the unlisted address literal");
    let table = run(&env, dns, &["logs", "--network", &id]);
    let table = text(&table.stdout);
    assert!(
        table.starts_with("TIME") && table.contains("allowed.test") && table.contains("refused"),
        "{label}: {table}"
    );

    // inspect shows the list in force.
    let out = run(&env, dns, &["--json", "inspect", &id]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect --json");
    assert_eq!(view["workspace"]["network"], "allowlist", "{label}: {view}");
    assert_eq!(view["workspace"]["allow_hosts"], serde_json::json!([allowed, listed_address]), "{label}");
    let out = run(&env, dns, &["inspect", &id]);
    assert!(text(&out.stdout).contains(&format!("allowlist: {allowed}, {listed_address}")), "{label}");

    // A proxy that died (a reboot, a kill) is started again by the next command.
    let dir = proxy_dir(&env);
    let first = proxy_pid(&dir);
    kill_proxy(first);
    let got = in_box(&env, dns, &id, &format!("curl -sS -m 20 {url}"));
    assert!(got.starts_with("hello from the test host"), "{label}: after the proxy was killed: {got}");
    let second = proxy_pid(&dir);
    assert_ne!(first, second, "{label}: a new proxy");

    // rm stops it and removes its directory.
    let out = run(&env, dns, &["rm", &id]);
    assert!(out.status.success(), "{label}: rm: {}", text(&out.stderr));
    assert!(!running(second), "{label}: the proxy outlived rm");
    assert!(!dir.exists(), "{label}: rm left {}", dir.display());
}

/// The escape probe's raw `connect` to `addr:HTTP_PORT` from inside the box.
fn probe_connect(env: &BoxEnv, dns: &DnsServer, id: &str, addr: &str) -> Option<String> {
    let out = run(env, dns, &["exec", id, "--", "/workspace/escape", "connect", addr, &HTTP_PORT.to_string()]);
    assert!(out.status.success(), "{}: probe: {}", env.who.label(), text(&out.stderr));
    probe_value(&out.stdout, "connect")
}

#[test]
fn a_sandbox_that_does_not_declare_it_refuses_an_allowlist_in_one_line() {
    let cli = tinybox_tests::Cli::new();
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().to_str().unwrap();
    let (code, _, err) =
        cli.run(&["create", "--sandbox", "passthrough", "--workspace", ws, "--allow-host", "allowed.test"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "tinybox: sandbox passthrough does not support network_allowlist (it cannot hold a box to an egress proxy; the namespace and docker sandboxes on this machine can)\n"
    );
    let (_, out, _) =
        cli.run(&["--json", "create", "--sandbox", "passthrough", "--workspace", ws, "--allow-host", "a.test"]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["error"]["kind"], "unsupported");
    // Nothing was made: no box, no proxy.
    let (_, out, _) = cli.run(&["--json", "ls"]);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap(), serde_json::json!([]));
    assert!(!cli.home.path().join("egress").exists());
    // A bad entry is one line naming it and the rule, before any sandbox is asked.
    let (code, _, err) = cli.run(&["create", "--sandbox", "passthrough", "--workspace", ws, "--allow-host", "*.com"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "tinybox: allow entry \"*.com\": a wildcard must be below a name of two labels or more (*.example.com, not *.com)\n"
    );
}
