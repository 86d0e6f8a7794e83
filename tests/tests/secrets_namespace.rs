//! Secrets a box uses but never reads, live on the namespace sandbox (ADR
//! 0032): a box made with `--secret T=file:... --secret-host T=bound.test`
//! holds a placeholder in `$T`; curl and Python `requests` in the box reach
//! an HTTPS test server through the box's injecting proxy, and the server
//! sees the real value; a server bound to nothing sees the placeholder;
//! the placeholder in a query string, a body or over plain http is refused;
//! and the real value is nowhere the box can read (probed from inside,
//! checked outside), nor in `inspect`, the store or the logs. The
//! "internet" is a test host in a network namespace of our own, the names
//! come from our own DNS server and the server's certificate from our own
//! CA, which the proxy trusts through `TINYBOX_EGRESS_CA`. Root only.

use std::net::Ipv4Addr;

use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::dns::DnsServer;
use tinybox_tests::egress::text;
use tinybox_tests::netns::TestHost;
use tinybox_tests::secrets_scenario::{Clients, PORT, check_box, create_secret_box, run};
use tinybox_tests::tls_world::{TlsWorld, install_requests};
use tinybox_tests::{have, skip};

const TEST: &str = "secrets_namespace::a_namespace_box_uses_its_secret_through_the_proxy_and_never_sees_it";

#[test]
fn a_namespace_box_uses_its_secret_through_the_proxy_and_never_sees_it() {
    for program in ["bwrap", "curl"] {
        if !have(program) {
            skip(TEST, &format!("{program} is not installed (contrib/setup/install-deps)"));
            return;
        }
    }
    let world = TlsWorld::new(&["bound.test", "unbound.test"]);
    let Some(peer) = TestHost::running("secret", PORT, &|addr| world.server_program(addr, PORT)) else {
        skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
        return;
    };
    let peer_ip: Ipv4Addr = peer.addr.parse().unwrap();
    let dns = DnsServer::start(&[("bound.test", peer_ip), ("unbound.test", peer_ip)]);
    let env = BoxEnv::new(&Principal::Me);
    let pylib = env.workspace.path().join("pylib");
    if let Err(why) = install_requests(&pylib) {
        skip(TEST, &format!("{why} (PyPI must be reachable for this suite)"));
        return;
    }
    std::fs::copy(&world.ca, env.workspace.path().join("test-ca.pem")).unwrap();
    // The value: random, so a hit anywhere is this test's and nothing else's.
    let value = format!("tbx-real-{}-{}", std::process::id(), peer.port);
    let secret_file = world.dir.path().join("token");
    std::fs::write(&secret_file, format!("{value}\n")).unwrap();
    let ws = env.workspace.path().to_str().unwrap().to_owned();
    let id = create_secret_box(
        &env,
        &dns,
        &world,
        &["--sandbox", "namespace", "--workspace", &ws],
        &peer.addr,
        &format!("file:{}", secret_file.display()),
    );

    let clients = Clients {
        pythonpath: "/workspace/pylib",
        unbound_trust: "--cacert /workspace/test-ca.pem",
        files: "/run/tinybox /tmp /workspace -path /workspace/pylib -prune -o",
    };
    check_box(&env, &dns, &world, &id, &value, &clients);
    let out = run(&env, &dns, &world, &["rm", &id]);
    assert!(out.status.success(), "rm: {}", text(&out.stderr));
}
