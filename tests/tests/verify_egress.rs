//! `tinybox drivers verify SANDBOX --egress-target FILE`: the kit's
//! allowlist claims, live, against test services of our own — a test host
//! in a network namespace (HTTP with a redirect to a refused name, TLS with
//! a self-signed certificate) and a DNS server on 127.0.0.1 that knows the
//! test names. Nothing leaves this machine. Every sandbox declaring
//! `network_allowlist` here is run: namespace, docker, microvm (emulated).
//! Then the negative control, on namespace and docker: the same run with
//! the box's proxy not checking SNI (the hidden test switch of ADR 0020)
//! fails the SNI claim by name.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use serde_json::Value;
use tinybox_tests::dns::DnsServer;
use tinybox_tests::netns::{HTTP_PORT, TestHost, http_program};
use tinybox_tests::{Cli, have, skip};

const HTTPS_PORT: u16 = 8443;

/// Every allowlist claim, in report order.
const ALLOWLIST_CLAIMS: &[&str] = &[
    "network.allowlist.listed_name_reached",
    "network.allowlist.unlisted_name_refused",
    "network.allowlist.address_literal_refused",
    "network.allowlist.no_direct_connection",
    "network.allowlist.without_proxy_fails",
    "network.allowlist.rebinding_refused",
    "network.allowlist.no_dns",
    "network.allowlist.https_connect",
    "network.allowlist.sni_mismatch_refused",
    "network.allowlist.redirect_refused",
    "network.allowlist.host_unreachable",
];

/// The test host: HTTP on [`HTTP_PORT`] (`/redirect` answers 302 to
/// `http://other.test:8080/`, anything else 200 with a line naming the
/// request) and TLS on [`HTTPS_PORT`] with the certificate in `cert_dir`.
fn program(addr: &str, cert_dir: &Path) -> String {
    let cert = cert_dir.join("cert.pem");
    let key = cert_dir.join("key.pem");
    let tls = format!(
        r#"import ssl
ctx=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain('{cert}','{key}')
def tls(c):
 try:
  c.settimeout(10)
  t=ctx.wrap_socket(c,server_side=True)
  t.sendall(b'hello over tls\n')
  t.close()
 except Exception:
  c.close()
def tls_loop():
 while True:
  c,_=l.accept()
  threading.Thread(target=tls,args=(c,),daemon=True).start()
l=socket.socket()
l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
l.bind(('{addr}',{HTTPS_PORT}))
l.listen(16)
threading.Thread(target=tls_loop,daemon=True).start()
redirect=b'HTTP/1.0 302 Found\r\nLocation: http://other.test:{HTTP_PORT}/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'"#,
        cert = cert.display(),
        key = key.display(),
    );
    http_program(addr, HTTP_PORT, &tls, "redirect if ' /redirect ' in line else hello(line)")
}

/// A self-signed certificate for allowed.test, made with openssl.
fn self_signed(dir: &Path) -> bool {
    std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=allowed.test", "-keyout"])
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `tinybox --json drivers verify SANDBOX... --egress-target FILE` with the
/// proxy resolving through `dns` and `extra` in the environment.
fn verify(cli: &Cli, dns: &DnsServer, sandbox: &[&str], target: &Path, extra: &[(&str, &str)]) -> (i32, Value) {
    let target = target.to_str().unwrap();
    let mut args = vec!["--json", "drivers", "verify"];
    args.extend_from_slice(sandbox);
    args.extend(["--egress-target", target]);
    let mut cmd = cli.cmd_with_drivers(&[], &args);
    cmd.env("TINYBOX_EGRESS_RESOLVER", dns.addr.to_string()).stdin(std::process::Stdio::null());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run tinybox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), v)
}

/// The test services of one run: a test host, a DNS server, the target file.
struct Services {
    _certs: tempfile::TempDir,
    peer: TestHost,
    dns: DnsServer,
    _dir: tempfile::TempDir,
    target: std::path::PathBuf,
}

/// The services, or why they cannot run here.
fn services(tag: &str) -> Result<Services, String> {
    for program in ["openssl", "python3"] {
        if !have(program) {
            return Err(format!("{program} is not installed (contrib/setup/install-deps)"));
        }
    }
    let certs = tempfile::tempdir().unwrap();
    assert!(self_signed(certs.path()), "openssl could not make a self-signed certificate");
    let Some(peer) = TestHost::running(tag, HTTP_PORT, &|addr| program(addr, certs.path())) else {
        return Err("cannot create a network namespace here (needs root and iproute2)".into());
    };
    let peer_ip: Ipv4Addr = peer.addr.parse().unwrap();
    let dns =
        DnsServer::start(&[("allowed.test", peer_ip), ("other.test", peer_ip), ("rebind.test", Ipv4Addr::LOCALHOST)]);
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("egress-target.json");
    let body = serde_json::json!({
        "dns": dns.addr.to_string(),
        "test_host": peer.addr,
        "allowed_name": "allowed.test",
        "http_port": HTTP_PORT,
        "https_port": HTTPS_PORT,
        "refused_name": "other.test",
        "rebind_name": "rebind.test",
        "unlisted_address": peer.host_addr,
        "redirect_path": "/redirect",
    });
    std::fs::write(&target, body.to_string()).unwrap();
    Ok(Services { _certs: certs, peer, dns, _dir: dir, target })
}

/// Every allowlist claim passed, each saying what it saw.
fn assert_every_allowlist_claim_passes(v: &Value, peer: &TestHost) {
    for name in ALLOWLIST_CLAIMS {
        assert_status(v, name, "pass");
    }
    let reached = claim(v, "network.allowlist.listed_name_reached")["detail"].as_str().unwrap();
    assert!(reached.contains(&format!("{}:{HTTP_PORT}", peer.addr)), "the address connected to: {reached}");
    let sni = claim(v, "network.allowlist.sni_mismatch_refused")["detail"].as_str().unwrap();
    assert!(sni.contains("sni \"other.test\" does not match"), "{sni}");
    assert_eq!(v["report"]["egress_target"]["test_host"], peer.addr, "the report names its target");
}

/// The negative control: the box's proxy started without its SNI check
/// fails exactly the SNI claim, and the run.
fn assert_unchecked_sni_fails(cli: &Cli, s: &Services, sandbox: &[&str]) {
    let (code, v) = verify(cli, &s.dns, sandbox, &s.target, &[("TINYBOX_EGRESS_TEST_UNCHECKED_SNI", "1")]);
    assert_status(&v, "network.allowlist.sni_mismatch_refused", "fail");
    let said = claim(&v, "network.allowlist.sni_mismatch_refused")["detail"].as_str().unwrap();
    assert!(said.contains("the proxy does not check SNI"), "{said}");
    assert_status(&v, "network.allowlist.https_connect", "pass");
    assert_status(&v, "network.allowlist.unlisted_name_refused", "pass");
    assert_eq!(code, 1, "a proxy without SNI checks must not verify");
    assert_eq!(v["passed"], false);
}

fn assert_no_boxes(cli: &Cli) {
    let (code, out, _) = cli.run(&["--json", "ls"]);
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), serde_json::json!([]), "boxes left: {out}");
}

/// The run verified; otherwise the claimed claims that did not pass, each
/// with its status and detail (the whole report is too long for a CI
/// log's excerpt of a failure).
fn assert_verified(code: i32, v: &Value) {
    let claims = v["report"]["claims"].as_array().map(Vec::as_slice).unwrap_or_default();
    let unproven: Vec<String> = claims
        .iter()
        .filter(|c| c["status"] != "pass" && c["status"] != "not_claimed")
        .map(|c| format!("{} {}: {}", c["name"], c["status"], c["detail"]))
        .collect();
    assert_eq!(code, 0, "the kit did not verify; not passed:\n{}", unproven.join("\n"));
}

fn claim<'a>(v: &'a Value, name: &str) -> &'a Value {
    let claims = v["report"]["claims"].as_array().expect("claims");
    claims.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no claim {name} in {v}"))
}

fn assert_status(v: &Value, name: &str, want: &str) {
    let c = claim(v, name);
    assert_eq!(c["status"], want, "{name}: {}", serde_json::to_string_pretty(&v["report"]["claims"]).unwrap());
}

#[test]
fn the_kit_attacks_the_namespace_allowlist_and_catches_a_proxy_without_sni_checks() {
    const TEST: &str = "verify_egress::the_kit_attacks_the_namespace_allowlist_and_catches_a_proxy_without_sni_checks";
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let s = match services("kit") {
        Ok(s) => s,
        Err(why) => return skip(TEST, &why),
    };
    let cli = Cli::new();
    let (code, v) = verify(&cli, &s.dns, &["namespace"], &s.target, &[]);
    assert_every_allowlist_claim_passes(&v, &s.peer);
    // With a private test host to try, the fence's claims are both proven.
    assert_status(&v, "network.egress_fence.host_unreachable", "pass");
    assert_status(&v, "network.egress_fence.private_unreachable", "pass");
    let fenced = claim(&v, "network.egress_fence.private_unreachable")["detail"].as_str().unwrap();
    assert!(fenced.contains(&format!("{}:{HTTP_PORT}; a box listing it did", s.peer.addr)), "{fenced}");
    assert_verified(code, &v);
    assert_eq!(
        v["report"]["egress_target"]["unlisted_address"].as_str().map(str::parse::<IpAddr>).and_then(Result::ok),
        s.peer.host_addr.parse().ok()
    );
    assert_unchecked_sni_fails(&cli, &s, &["namespace"]);
    assert_no_boxes(&cli);
}

#[test]
fn the_kit_attacks_the_docker_allowlist_and_catches_a_proxy_without_sni_checks() {
    const TEST: &str = "verify_egress::the_kit_attacks_the_docker_allowlist_and_catches_a_proxy_without_sni_checks";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(TEST, &why);
    }
    let s = match services("kitd") {
        Ok(s) => s,
        Err(why) => return skip(TEST, &why),
    };
    let cli = Cli::new();
    let (code, v) = verify(&cli, &s.dns, &["docker"], &s.target, &[]);
    assert_every_allowlist_claim_passes(&v, &s.peer);
    assert_status(&v, "network.egress_fence.private_unreachable", "pass");
    assert_verified(code, &v);
    assert_unchecked_sni_fails(&cli, &s, &["docker"]);
    assert_no_boxes(&cli);
}

#[test]
fn the_kit_attacks_the_microvm_allowlist_under_emulation() {
    const TEST: &str = "verify_egress::the_kit_attacks_the_microvm_allowlist_under_emulation";
    tinybox_tests::need_microvm!(TEST);
    let s = match services("kitm") {
        Ok(s) => s,
        Err(why) => return skip(TEST, &why),
    };
    let cli = Cli::new();
    let (code, v) = verify(&cli, &s.dns, &["microvm", "--accel", "tcg"], &s.target, &[]);
    assert_every_allowlist_claim_passes(&v, &s.peer);
    assert_status(&v, "network.egress_fence.private_unreachable", "pass");
    assert_verified(code, &v);
    assert_no_boxes(&cli);
    let left = tinybox_tests::microvm::processes_under(cli.home.path());
    assert_eq!(left, vec![], "the kit left VMs or relays running");
}

#[test]
fn a_bad_egress_target_is_one_line_naming_the_file() {
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("t.json");
    std::fs::write(&target, "{\"dns\": \"127.0.0.1:53\"}").unwrap();
    let (code, _, err) = cli.run(&["drivers", "verify", "passthrough", "--egress-target", target.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.starts_with(&format!("tinybox: egress target {}: missing field", target.display())), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
