//! Real clients use a secret through the injecting proxy and never see it
//! (ADR 0032), live on the namespace sandbox: Python `httpx`, Node's own
//! `fetch` (through undici's `EnvHttpProxyAgent`), `git clone` over https
//! with the token in the URL, and `pip install` from an index that wants a
//! token — the last two send it inside a `Basic` credential, which the
//! proxy decodes, fills and encodes again. The secret's source is a
//! command (`cmd:`), run on this side only. Each client trusts the box's
//! CA through the variable it reads (`SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`,
//! `GIT_SSL_CAINFO`, `PIP_CERT`); a host bound to nothing sees only the
//! placeholder, and an echoing bound host hands back no encoding of the
//! value. curl and `requests` are in secrets_namespace. Root only.

use std::net::Ipv4Addr;

use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::dns::DnsServer;
use tinybox_tests::egress::text;
use tinybox_tests::netns::TestHost;
use tinybox_tests::secrets_scenario::{PORT, create_secret_box, in_box, run};
use tinybox_tests::tls_world::{PACKAGE_MARK, REPO_MARK, TlsWorld, install_python, install_undici};
use tinybox_tests::{have, skip};

const TEST: &str = "secrets_clients::httpx_node_git_and_pip_use_a_secret_they_never_see";

fn basic(credentials: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(credentials)
}

#[test]
fn httpx_node_git_and_pip_use_a_secret_they_never_see() {
    for program in ["bwrap", "git", "node", "npm"] {
        if !have(program) {
            skip(TEST, &format!("{program} is not installed (contrib/setup/install-deps)"));
            return;
        }
    }
    let world = TlsWorld::new(&["bound.test", "unbound.test"]);
    world.add_git_repository().expect("the world's git repository");
    world.add_package_index().expect("the world's package index");
    let Some(peer) = TestHost::running("secretcl", PORT, &|addr| world.server_program(addr, PORT)) else {
        skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
        return;
    };
    let peer_ip: Ipv4Addr = peer.addr.parse().unwrap();
    let dns = DnsServer::start(&[("bound.test", peer_ip), ("unbound.test", peer_ip)]);
    let env = BoxEnv::new(&Principal::Me);
    let ws = env.workspace.path();
    if let Err(why) = install_python(&ws.join("pylib"), &["httpx"]) {
        skip(TEST, &format!("{why} (PyPI must be reachable for this suite)"));
        return;
    }
    if let Err(why) = install_undici(&ws.join("node")) {
        skip(TEST, &format!("{why} (npm's registry must be reachable for this suite)"));
        return;
    }
    std::fs::copy(&world.ca, ws.join("test-ca.pem")).unwrap();
    let value = format!("tbx-real-{}-{}", std::process::id(), peer.port);
    std::fs::write(&world.auth, &value).unwrap();
    // The source is a command, as `gh auth token` would be: it prints the value.
    let secret_file = world.dir.path().join("token");
    std::fs::write(&secret_file, format!("{value}\n")).unwrap();
    let source = format!("cmd:cat '{}'", secret_file.display());
    let id = create_secret_box(
        &env,
        &dns,
        &world,
        &["--sandbox", "namespace", "--workspace", ws.to_str().unwrap()],
        &peer.addr,
        &source,
    );
    let placeholder = in_box(&env, &dns, &world, &id, "printf %s \"$T\"");
    assert!(placeholder.starts_with("tinybox-placeholder-"), "{placeholder}");

    // httpx: a Bearer header, the CA from SSL_CERT_FILE, the proxy from HTTPS_PROXY.
    let httpx = "PYTHONPATH=/workspace/pylib python3 -c \"import os,httpx; r=httpx.get('https://bound.test:8443/httpx', headers={'Authorization': 'Bearer '+os.environ['T']}, timeout=30); print(r.status_code, r.text.strip())\"";
    assert_eq!(in_box(&env, &dns, &world, &id, httpx), "200 ok\n");
    // Node's own fetch: the CA from NODE_EXTRA_CA_CERTS.
    let node = "NODE_PATH=/workspace/node/node_modules node -e \"const u=require('undici'); u.setGlobalDispatcher(new u.EnvHttpProxyAgent()); fetch('https://bound.test:8443/node', {headers: {authorization: 'Bearer ' + process.env.T}}).then(async r => console.log(r.status, (await r.text()).trim())).catch(e => { console.error(e); process.exit(1) })\"";
    assert_eq!(in_box(&env, &dns, &world, &id, node), "200 ok\n");
    for path in ["/httpx", "/node"] {
        let head = world.head_for(path).unwrap_or_else(|| panic!("no request for {path}: {:?}", world.heads()));
        assert!(head.contains(&format!("Bearer {value}")) && !head.contains(&placeholder), "{path}: {head}");
    }

    // git: the token in the URL, sent as Basic; the CA from GIT_SSL_CAINFO.
    let git = "cd /tmp && HOME=/tmp git clone -q \"https://x-access-token:$T@bound.test:8443/files/repo.git\" clone && cat clone/README";
    assert_eq!(in_box(&env, &dns, &world, &id, git), format!("{REPO_MARK}\n"));
    // pip: an index URL with the token, sent as Basic; the CA from PIP_CERT.
    let pip = "cd /tmp && HOME=/tmp python3 -m pip install -q --no-deps --no-cache-dir --disable-pip-version-check --target /tmp/pkgs --index-url \"https://__token__:$T@bound.test:8443/files/simple/\" tbxprobe && PYTHONPATH=/tmp/pkgs python3 -c 'import tbxprobe; print(tbxprobe.MARK)'";
    assert_eq!(in_box(&env, &dns, &world, &id, pip), format!("{PACKAGE_MARK}\n"));
    let files: Vec<String> = world.heads().into_iter().filter(|h| h.contains(" /files/")).collect();
    let (git_auth, pip_auth) = (basic(&format!("x-access-token:{value}")), basic(&format!("__token__:{value}")));
    assert!(files.iter().any(|h| h.contains("/files/repo.git/") && h.contains(&git_auth)), "{files:?}");
    assert!(files.iter().any(|h| h.contains("/files/simple/tbxprobe/") && h.contains(&pip_auth)), "{files:?}");
    for head in &files {
        assert!(!head.contains(&basic(&format!("x-access-token:{placeholder}"))), "{head}");
        assert!(!head.contains(&basic(&format!("__token__:{placeholder}"))), "{head}");
    }

    // A bound host echoing a Basic credential hands back the placeholder's encoding, not the value's.
    let echo = in_box(&env, &dns, &world, &id, "curl -sS -m 30 -u \"u:$T\" https://bound.test:8443/echo");
    assert!(world.head_for("/echo").is_some_and(|h| h.contains(&basic(&format!("u:{value}")))));
    assert!(echo.contains(&basic(&format!("u:{placeholder}"))), "{echo}");
    assert!(!echo.contains(&basic(&format!("u:{value}"))) && !echo.contains(&value), "{echo}");

    // git to a host bound to nothing: passed through untouched (so it
    // checks that host's own certificate), the placeholder is all it gets.
    let stray = run(
        &env,
        &dns,
        &world,
        &[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "cd /tmp && HOME=/tmp GIT_SSL_CAINFO=/workspace/test-ca.pem git clone -q \"https://x:$T@unbound.test:8443/files/repo.git\" stray",
        ],
    );
    assert!(!stray.status.success(), "the unbound host must refuse the placeholder: {}", text(&stray.stdout));
    let unbound_heads: Vec<String> = world.heads().into_iter().filter(|h| h.contains("unbound.test")).collect();
    let why = text(&stray.stderr);
    assert!(why.contains("Authentication failed"), "refused by the host, not on the way: {why}");
    assert!(unbound_heads.iter().any(|h| h.contains(&basic(&format!("x:{placeholder}")))), "{unbound_heads:?}");
    assert!(unbound_heads.iter().all(|h| !h.contains(&basic(&format!("x:{value}")))), "{unbound_heads:?}");

    // Every injection has its audit line, and the value is in no log or record.
    let out = run(&env, &dns, &world, &["--json", "logs", "--network", &id]);
    assert!(!out.stdout.windows(value.len()).any(|w| w == value.as_bytes()), "the log shows the value");
    let log: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("the log is a JSON array");
    let audits = log.iter().filter(|d| d["secret"] == "T" && d["decision"] == "allowed").count();
    assert!(audits >= 5, "httpx's, node's, git's, pip's and the echo's injections: {log:?}");
    let out = run(&env, &dns, &world, &["--json", "inspect", &id]);
    assert!(text(&out.stdout).contains("cmd:cat") && !text(&out.stdout).contains(&value), "{}", text(&out.stdout));
    let out = run(&env, &dns, &world, &["rm", &id]);
    assert!(out.status.success(), "rm: {}", text(&out.stderr));
}
