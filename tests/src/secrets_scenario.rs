//! The secrets suites' scenario (ADR 0032), the same on every sandbox
//! that declares `secret_injection`: from a box made with `--secret
//! T=file:... --secret-host T=bound.test` (and `bound.test`,
//! `unbound.test` and the server's address on its allowlist), curl and
//! Python `requests` reach the [`crate::tls_world`] server with the real
//! value; an unbound host sees the placeholder; a query string, a body
//! and plain http are refused; the value is nowhere the box can read
//! (probed from inside, checked outside), nor in `inspect`, the store or
//! the logs; and each injection has its audit line.

use std::path::Path;
use std::process::Output;

use crate::boxes::BoxEnv;
use crate::dns::DnsServer;
use crate::egress::text;
use crate::tls_world::TlsWorld;

/// The port of the world's HTTPS server.
pub const PORT: u16 = 8443;

/// What differs between sandboxes' boxes.
pub struct Clients<'a> {
    /// Where `requests` is, in the box.
    pub pythonpath: &'a str,
    /// How curl trusts the unbound host's own certificate (not intercepted).
    pub unbound_trust: &'a str,
    /// The directories whose files the probe reads whole.
    pub files: &'a str,
}

/// `tinybox ARGS` with the proxy resolving through `dns` and trusting the world's CA upstream.
pub fn run(env: &BoxEnv, dns: &DnsServer, world: &TlsWorld, args: &[&str]) -> Output {
    env.cli(args)
        .env("TINYBOX_EGRESS_RESOLVER", dns.addr.to_string())
        .env("TINYBOX_EGRESS_CA", &world.ca)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run tinybox")
}

/// `tinybox create PLACEMENT...` of a box with secret T from `source`
/// bound to bound.test, and bound.test, unbound.test and the test host
/// `peer_addr` on its allowlist (the test host's address is a private
/// one, which only a listed address reaches); the box's id.
pub fn create_secret_box(
    env: &BoxEnv,
    dns: &DnsServer,
    world: &TlsWorld,
    placement: &[&str],
    peer_addr: &str,
    source: &str,
) -> String {
    let mut args = vec!["create".to_owned()];
    args.extend(placement.iter().map(|a| (*a).to_owned()));
    for host in ["bound.test", "unbound.test", peer_addr] {
        args.extend(["--allow-host".to_owned(), format!("{host}:{PORT}")]);
    }
    args.extend(["--secret".into(), format!("T={source}"), "--secret-host".into(), "T=bound.test".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(env, dns, world, &args);
    assert!(out.status.success(), "create: {}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

/// `sh -c SCRIPT` in box `id`, which must succeed; its stdout.
pub fn in_box(env: &BoxEnv, dns: &DnsServer, world: &TlsWorld, id: &str, script: &str) -> String {
    let out = run(env, dns, world, &["exec", id, "--", "sh", "-c", script]);
    assert!(out.status.success(), "{script}: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// Every file under `dir`, read whole, as one byte string.
pub fn all_bytes(dir: &Path) -> Vec<u8> {
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

pub fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The whole scenario on box `id`, whose secret T has `value`; returns the placeholder.
pub fn check_box(
    env: &BoxEnv,
    dns: &DnsServer,
    world: &TlsWorld,
    id: &str,
    value: &str,
    clients: &Clients<'_>,
) -> String {
    // The box holds a placeholder, and trusts its proxy's CA through the variables clients read.
    let placeholder = in_box(env, dns, world, id, "printf %s \"$T\"");
    assert!(placeholder.starts_with("tinybox-placeholder-") && placeholder != *value, "{placeholder}");
    let vars = in_box(
        env,
        dns,
        world,
        id,
        "echo $SSL_CERT_FILE $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $NODE_EXTRA_CA_CERTS $DENO_CERT $GIT_SSL_CAINFO $PIP_CERT; head -c 27 $SSL_CERT_FILE",
    );
    assert!(vars.starts_with(&"/run/tinybox/egress/ca-bundle.pem ".repeat(7).trim_end().to_owned()), "{vars}");
    assert!(vars.contains("-----BEGIN CERTIFICATE-----"), "{vars}");

    // curl and requests to the bound host: the server sees the real value.
    let curl = "curl -sS -m 30 -H \"Authorization: Bearer $T\" https://bound.test:8443/curl";
    assert_eq!(in_box(env, dns, world, id, curl), "ok\n");
    let python = format!(
        "PYTHONPATH={} python3 -c \"import os,requests; r=requests.get('https://bound.test:8443/requests', headers={{'Authorization': 'Bearer '+os.environ['T']}}, timeout=30); print(r.status_code, r.text.strip())\"",
        clients.pythonpath
    );
    assert_eq!(in_box(env, dns, world, id, &python), "200 ok\n");
    for path in ["/curl", "/requests"] {
        let head = world.head_for(path).unwrap_or_else(|| panic!("no request for {path}: {:?}", world.heads()));
        assert!(head.contains(&format!("Bearer {value}")), "{path}: {head}");
        assert!(!head.contains(&placeholder), "{path}: {head}");
    }

    // A bound host that echoes the request: the box gets the placeholder back, never the value.
    let echo =
        in_box(env, dns, world, id, "curl -sS -m 30 -H \"Authorization: Bearer $T\" https://bound.test:8443/echo");
    assert!(world.head_for("/echo").is_some_and(|h| h.contains(&format!("Bearer {value}"))));
    assert!(echo.contains(&format!("Bearer {placeholder}")) && !echo.contains(value), "{echo}");

    // A host bound to nothing is passed through untouched: it sees the placeholder.
    let other = format!(
        "curl -sS -m 30 {} -H \"Authorization: Bearer $T\" https://unbound.test:8443/unbound",
        clients.unbound_trust
    );
    assert_eq!(in_box(env, dns, world, id, &other), "ok\n");
    let head = world.head_for("/unbound").expect("the unbound request");
    assert!(head.contains(&placeholder) && !head.contains(value), "{head}");

    // The placeholder in a query string, in a body, over plain http: refused, never forwarded.
    let status = |args: &str| format!("curl -s -m 30 -o /dev/null -w '%{{http_code}}' {args}");
    let refused = [
        status("\"https://bound.test:8443/query?key=$T\""),
        status("-d \"key=$T\" https://bound.test:8443/body"),
        status("-H \"Authorization: Bearer $T\" http://bound.test:8443/plain"),
    ];
    for probe in &refused {
        assert_eq!(in_box(env, dns, world, id, probe), "403", "{probe}");
    }
    for path in ["/query", "/body", "/plain"] {
        assert!(world.heads().iter().all(|h| !h.contains(path)), "{path} reached the server: {:?}", world.heads());
    }

    // Nowhere the box can read: every box process's environment and
    // command line, and the files under /run/tinybox, /tmp and /workspace
    // (its Python library aside), dumped from inside, searched outside.
    let dump = format!(
        "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; done; \
         find {} -type f -print 2>/dev/null | while read f; do cat \"$f\"; done",
        clients.files
    );
    let seen = in_box(env, dns, world, id, &dump);
    assert!(seen.contains(&placeholder), "the dump reads the box's environment: {}", seen.len());
    assert!(!seen.contains(value), "the real value is readable in the box");

    // Nor in inspect, the store (the proxy's directory included) or the logs.
    for args in [vec!["--json", "inspect", id], vec!["inspect", id], vec!["--json", "logs", "--network", id]] {
        let out = run(env, dns, world, &args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(!holds(&out.stdout, value) && !holds(&out.stderr, value), "{args:?} shows the value");
    }
    assert!(!holds(&all_bytes(env.store.path()), value), "the store holds the value");

    // One audit line per injection, naming the box, the host and the secret.
    let out = run(env, dns, world, &["--json", "logs", "--network", id]);
    let log: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("the log is a JSON array");
    let audits: Vec<&serde_json::Value> = log.iter().filter(|d| d["secret"] == "T").collect();
    assert_eq!(audits.len(), 3, "curl's, requests' and the echo's injections: {log:?}");
    for a in &audits {
        assert_eq!((a["name"].as_str(), a["decision"].as_str()), (Some("bound.test"), Some("allowed")), "{a}");
        assert!(
            a["reason"].as_str().unwrap().contains(&format!("box {id}: secret T put in header authorization")),
            "{a}"
        );
    }
    let refusals = log.iter().filter(|d| d["decision"] == "refused").count();
    assert!(refusals >= 3, "the query, body and plain refusals are logged: {log:?}");

    // A proxy that died is started again by the next command, with a new
    // CA the box trusts at once, the same placeholder, the value read again.
    let dir = crate::egress::proxy_dir(env);
    let bundle = std::fs::read_to_string(dir.join("box/ca-bundle.pem")).expect("the proxy's CA bundle");
    crate::egress::kill_proxy(crate::egress::proxy_pid(&dir));
    let again = "curl -sS -m 30 -H \"Authorization: Bearer $T\" https://bound.test:8443/restarted";
    assert_eq!(in_box(env, dns, world, id, again), "ok\n");
    assert!(world.head_for("/restarted").is_some_and(|h| h.contains(&format!("Bearer {value}"))));
    assert_ne!(std::fs::read_to_string(dir.join("box/ca-bundle.pem")).unwrap(), bundle, "a new CA");
    assert_eq!(in_box(env, dns, world, id, "printf %s \"$T\""), placeholder, "the same placeholder");
    placeholder
}
