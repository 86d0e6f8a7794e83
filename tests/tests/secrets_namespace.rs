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
use std::path::Path;
use std::process::Output;

use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::dns::DnsServer;
use tinybox_tests::egress::text;
use tinybox_tests::netns::TestHost;
use tinybox_tests::tls_world::{TlsWorld, install_requests};
use tinybox_tests::{have, skip};

const TEST: &str = "secrets_namespace::a_namespace_box_uses_its_secret_through_the_proxy_and_never_sees_it";
const PORT: u16 = 8443;

/// `tinybox ARGS` with the proxy resolving through `dns` and trusting the world's CA upstream.
fn run(env: &BoxEnv, dns: &DnsServer, world: &TlsWorld, args: &[&str]) -> Output {
    env.cli(args)
        .env("TINYBOX_EGRESS_RESOLVER", dns.addr.to_string())
        .env("TINYBOX_EGRESS_CA", &world.ca)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tinybox")
}

fn in_box(env: &BoxEnv, dns: &DnsServer, world: &TlsWorld, id: &str, script: &str) -> String {
    let out = run(env, dns, world, &["exec", id, "--", "sh", "-c", script]);
    assert!(out.status.success(), "{script}: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// Every file under `dir`, read whole, as one byte string.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            all.extend(all_bytes(&path));
        } else {
            all.extend(std::fs::read(&path).unwrap_or_default());
        }
    }
    all
}

fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

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
    let (bound, unbound, address) =
        (format!("bound.test:{PORT}"), format!("unbound.test:{PORT}"), format!("{}:{PORT}", peer.addr));
    let source = format!("T=file:{}", secret_file.display());
    let create = [
        "create",
        "--sandbox",
        "namespace",
        "--workspace",
        &ws,
        "--allow-host",
        &bound,
        "--allow-host",
        &unbound,
        "--allow-host",
        &address,
        "--secret",
        &source,
        "--secret-host",
        "T=bound.test",
    ];
    let out = run(&env, &dns, &world, &create);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_owned();

    // The box holds a placeholder, and trusts its proxy's CA through the variables clients read.
    let placeholder = in_box(&env, &dns, &world, &id, "printf %s \"$T\"");
    assert!(placeholder.starts_with("tinybox-placeholder-") && placeholder != value, "{placeholder}");
    let vars = in_box(
        &env,
        &dns,
        &world,
        &id,
        "echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $NODE_EXTRA_CA_CERTS $DENO_CERT $GIT_SSL_CAINFO $PIP_CERT; head -c 27 $SSL_CERT_FILE",
    );
    assert!(vars.starts_with(&"/run/tinybox/egress/ca-bundle.pem ".repeat(7).trim_end().to_owned()), "{vars}");
    assert!(vars.contains("-----BEGIN CERTIFICATE-----"), "{vars}");

    // curl and requests to the bound host: the server sees the real value.
    let curl = "curl -sS -m 30 -H \"Authorization: Bearer $T\" https://bound.test:8443/curl";
    assert_eq!(in_box(&env, &dns, &world, &id, curl), "ok\n");
    let python = "PYTHONPATH=/workspace/pylib /usr/bin/python3 -c \"import os,requests; r=requests.get('https://bound.test:8443/requests', headers={'Authorization': 'Bearer '+os.environ['T']}, timeout=30); print(r.status_code, r.text.strip())\"";
    assert_eq!(in_box(&env, &dns, &world, &id, python), "200 ok\n");
    for path in ["/curl", "/requests"] {
        let head = world.head_for(path).unwrap_or_else(|| panic!("no request for {path}: {:?}", world.heads()));
        assert!(head.contains(&format!("Bearer {value}")), "{path}: {head}");
        assert!(!head.contains(&placeholder), "{path}: {head}");
    }

    // A host bound to nothing is passed through untouched: it sees the placeholder.
    let other = "curl -sS -m 30 --cacert /workspace/test-ca.pem -H \"Authorization: Bearer $T\" https://unbound.test:8443/unbound";
    assert_eq!(in_box(&env, &dns, &world, &id, other), "ok\n");
    let head = world.head_for("/unbound").expect("the unbound request");
    assert!(head.contains(&placeholder) && !head.contains(&value), "{head}");

    // The placeholder in a query string, in a body, over plain http: refused, never forwarded.
    let status = |args: &str| format!("curl -s -m 30 -o /dev/null -w '%{{http_code}}' {args}");
    let refused = [
        status("\"https://bound.test:8443/query?key=$T\""),
        status("-d \"key=$T\" https://bound.test:8443/body"),
        status("-H \"Authorization: Bearer $T\" http://bound.test:8443/plain"),
    ];
    for probe in &refused {
        assert_eq!(in_box(&env, &dns, &world, &id, probe), "403", "{probe}");
    }
    for path in ["/query", "/body", "/plain"] {
        assert!(world.heads().iter().all(|h| !h.contains(path)), "{path} reached the server: {:?}", world.heads());
    }

    // Nowhere the box can read: every box process's environment and
    // command line, and the files under /run/tinybox, /tmp and /workspace
    // (its Python library aside), dumped from inside, searched outside.
    let dump = "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; done; \
                find /run/tinybox /tmp /workspace -path /workspace/pylib -prune -o -type f -print 2>/dev/null | while read f; do cat \"$f\"; done";
    let seen = in_box(&env, &dns, &world, &id, dump);
    assert!(seen.contains(&placeholder), "the dump reads the box's environment: {}", seen.len());
    assert!(!seen.contains(&value), "the real value is readable in the box");

    // Nor in inspect, the store (the proxy's directory included) or the logs.
    for args in [vec!["--json", "inspect", &id], vec!["inspect", &id], vec!["--json", "logs", "--network", &id]] {
        let out = run(&env, &dns, &world, &args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(!holds(&out.stdout, &value) && !holds(&out.stderr, &value), "{args:?} shows the value");
    }
    assert!(!holds(&all_bytes(env.store.path()), &value), "the store holds the value");

    // One audit line per injection, naming the box, the host and the secret.
    let out = run(&env, &dns, &world, &["--json", "logs", "--network", &id]);
    let log: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("the log is a JSON array");
    let audits: Vec<&serde_json::Value> = log.iter().filter(|d| d["secret"] == "T").collect();
    assert_eq!(audits.len(), 2, "curl's and requests' injections: {log:?}");
    for a in &audits {
        assert_eq!((a["name"].as_str(), a["decision"].as_str()), (Some("bound.test"), Some("allowed")), "{a}");
        assert!(
            a["reason"].as_str().unwrap().contains(&format!("box {id}: secret T put in header authorization")),
            "{a}"
        );
    }
    let refusals = log.iter().filter(|d| d["decision"] == "refused").count();
    assert!(refusals >= 3, "the query, body and plain refusals are logged: {log:?}");

    let out = run(&env, &dns, &world, &["rm", &id]);
    assert!(out.status.success(), "rm: {}", text(&out.stderr));
}
