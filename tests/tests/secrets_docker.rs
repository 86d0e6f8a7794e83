//! Secrets a box uses but never reads, live on the docker sandbox (ADR
//! 0032): the same scenario as secrets_namespace (tinybox_tests::
//! secrets_scenario) in a container of an image holding this machine's
//! curl and Python (tinybox_tests::client_image), whose CA bundle comes in
//! with the proxy's directory; and the container's own configuration, as
//! docker keeps it, never holds the value; stopped and resumed, the box
//! has a new CA and a new placeholder, and its secret still works. Root only:
//! the docker daemon's socket is root's.

use std::net::Ipv4Addr;

use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::client_image::{PYLIB, client_image};
use tinybox_tests::dns::DnsServer;
use tinybox_tests::docker::{Namespace, docker, unavailable};
use tinybox_tests::egress::{proxy_dir, text};
use tinybox_tests::netns::TestHost;
use tinybox_tests::secrets_scenario::{Clients, PORT, check_box, create_secret_box, holds, in_box, run};
use tinybox_tests::skip;
use tinybox_tests::tls_world::TlsWorld;

const TEST: &str = "secrets_docker::a_docker_box_uses_its_secret_through_the_proxy_and_never_sees_it";

#[test]
fn a_docker_box_uses_its_secret_through_the_proxy_and_never_sees_it() {
    if let Some(why) = unavailable() {
        skip(TEST, &why);
        return;
    }
    let image = match client_image() {
        Ok(image) => image,
        Err(why) => {
            skip(TEST, &format!("cannot make the clients' image: {why}"));
            return;
        }
    };
    let world = TlsWorld::new(&["bound.test", "unbound.test"]);
    let Some(peer) = TestHost::running("dsecret", PORT, &|addr| world.server_program(addr, PORT)) else {
        skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
        return;
    };
    let peer_ip: Ipv4Addr = peer.addr.parse().unwrap();
    let dns = DnsServer::start(&[("bound.test", peer_ip), ("unbound.test", peer_ip)]);
    let ns = Namespace::new("secrets-docker");
    let env = BoxEnv::new(&Principal::Me);
    let value = format!("tbx-real-docker-{}-{}", std::process::id(), peer.port);
    let secret_file = world.dir.path().join("token");
    std::fs::write(&secret_file, format!("{value}\n")).unwrap();
    let id = create_secret_box(
        &env,
        &dns,
        &world,
        &["--sandbox", "docker", "--namespace", &ns.name, "--image", image, "--persistent"],
        &peer.addr,
        &format!("file:{}", secret_file.display()),
    );

    let clients = Clients {
        pythonpath: PYLIB,
        // The unbound host's certificate is the test CA's, which the box
        // does not hold: -k, since what is checked is what the server saw.
        unbound_trust: "-k",
        files: "/run/tinybox /tmp",
    };
    let placeholder = check_box(&env, &dns, &world, &id, &value, &clients);

    // Stopped and resumed: a new CA and a new placeholder, and the secret still works.
    let bundle = std::fs::read_to_string(proxy_dir(&env).join("box/ca-bundle.pem")).unwrap();
    for verb in ["stop", "resume"] {
        let out = run(&env, &dns, &world, &[verb, &id]);
        assert!(out.status.success(), "{verb}: {}", text(&out.stderr));
    }
    let fresh = in_box(&env, &dns, &world, &id, "printf %s \"$T\"");
    assert!(fresh.starts_with("tinybox-placeholder-") && fresh != placeholder, "{fresh} after resume");
    let curl = "curl -sS -m 30 -H \"Authorization: Bearer $T\" https://bound.test:8443/resumed";
    assert_eq!(in_box(&env, &dns, &world, &id, curl), "ok\n");
    assert!(world.head_for("/resumed").is_some_and(|h| h.contains(&format!("Bearer {value}"))));
    assert_ne!(std::fs::read_to_string(proxy_dir(&env).join("box/ca-bundle.pem")).unwrap(), bundle, "a new CA");

    // Docker's own record of the container: no value in it.
    let (code, inspected, err) = docker(&["inspect", &ns.container(&id)]);
    assert_eq!(code, 0, "docker inspect: {err}");
    assert!(!holds(inspected.as_bytes(), &value), "docker's record of the container holds the value");

    let out = run(&env, &dns, &world, &["rm", &id]);
    assert!(out.status.success(), "rm: {}", text(&out.stderr));
}
