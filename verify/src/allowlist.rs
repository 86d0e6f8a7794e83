//! The allowlist claims (`network.allowlist.*`): for a sandbox declaring
//! `network_allowlist`, a box of the kit's with an allowlist attacks its
//! own egress proxy, and each attempt is judged from the host by what the
//! client in the box got and by what the proxy logged (core's
//! `network_log`, what `tinybox logs --network` prints).
//!
//! The kit cannot invent the internet it probes against: the caller names
//! test services of its own in an [`EgressTarget`] (`--egress-target FILE`).
//! Without one every allowlist claim is SKIPPED, saying so.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tinybox_core::egress::{Decision, Method, Verdict as Decided};
use tinybox_sdk::model::{BoxId, NetworkPolicy, WorkspaceSource};

use super::client_hello::{client_hello, is_server_hello, printf_octal};
use super::{Claim, Kit, Output, Status, run};

type Verdict = (Status, String);

/// How long the kit waits for the proxy to log a connection the box's
/// client has finished with (a tunnel's decision is written when it ends).
const LOG_WAIT: Duration = Duration::from_secs(10);

/// The test services an allowlist box is probed against, all the caller's:
/// a JSON object in the file `--egress-target` names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressTarget {
    /// The DNS server the proxy resolves with (`TINYBOX_EGRESS_RESOLVER`
    /// must name it); the box must not reach it.
    pub dns: SocketAddr,
    /// The test host's address: `allowed_name` resolves to it, and it
    /// serves HTTP on `http_port` and TLS on `https_port`.
    pub test_host: IpAddr,
    pub allowed_name: String,
    pub http_port: u16,
    /// A TLS server (any certificate, a self-signed one will do).
    pub https_port: u16,
    /// A name the DNS server resolves (to the test host) that the kit never lists.
    pub refused_name: String,
    /// A name the DNS server resolves to a private or loopback address; the
    /// kit lists it by name.
    pub rebind_name: String,
    /// An address the kit never lists, for the address-literal probe.
    pub unlisted_address: IpAddr,
    /// A path on `allowed_name:http_port` answering a redirect to
    /// `http://refused_name:http_port/`.
    pub redirect_path: String,
}

/// Why a target file cannot be used, in one line.
#[derive(Debug, Clone, thiserror::Error)]
#[error("egress target {path}: {why}")]
pub struct TargetError {
    pub path: String,
    pub why: String,
}

fn plain_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

impl EgressTarget {
    /// Reads and checks the target file at `path`.
    pub fn from_file(path: &std::path::Path) -> Result<EgressTarget, TargetError> {
        let fail = |why: String| TargetError { path: path.display().to_string(), why };
        let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
        let target: EgressTarget = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        target.check().map_err(fail)?;
        Ok(target)
    }

    fn check(&self) -> Result<(), String> {
        for (field, name) in [
            ("allowed_name", &self.allowed_name),
            ("refused_name", &self.refused_name),
            ("rebind_name", &self.rebind_name),
        ] {
            if !plain_name(name) {
                return Err(format!("{field} {name:?} must be a host name of letters, digits, dots and dashes"));
            }
        }
        let path_ok = self.redirect_path.starts_with('/')
            && self.redirect_path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._".contains(&b));
        if !path_ok {
            return Err(format!(
                "redirect_path {:?} must start with / and hold only letters, digits and /-._",
                self.redirect_path
            ));
        }
        Ok(())
    }

    /// The allowlist of the kit's box: the allowed and rebinding names on
    /// their ports, and the test host's address (a private test host is
    /// reached through a name only when its address is listed too, ADR 0020;
    /// the rebinding name's address is not).
    pub fn entries(&self) -> Vec<String> {
        let host = match self.test_host {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
        };
        vec![
            format!("{}:{}", self.allowed_name, self.http_port),
            format!("{}:{}", self.allowed_name, self.https_port),
            format!("{}:{}", self.rebind_name, self.http_port),
            format!("{host}:{}", self.http_port),
            format!("{host}:{}", self.https_port),
        ]
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.http_port)
    }
}

/// The allowlist claims, in report order.
pub fn claims() -> impl Iterator<Item = Claim> {
    Claim::ALL.into_iter().filter(|c| c.requirement() == super::Requirement::NetworkAllowlist)
}

/// The shell prelude finding an `nc` (busybox's will do) as `$NC`.
const FIND_NC: &str = "if command -v nc >/dev/null 2>&1; then NC=nc; \
     elif command -v busybox >/dev/null 2>&1 && busybox nc --help >/dev/null 2>&1; then NC='busybox nc'; \
     else echo no-nc; exit 0; fi";

/// The shell prelude for wget: one try where it is GNU wget.
const WGET: &str = "T=; wget --help 2>&1 | grep -q -- --tries && T='-t 1'; \
     command -v wget >/dev/null 2>&1 || { echo no-wget; exit 0; }";

/// The name (or address) a decision was about.
fn about<'a>(d: &'a Decision, name: &str) -> bool {
    d.name.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(name.trim_matches(|c| c == '[' || c == ']')))
}

fn show(d: &Decision) -> String {
    let what = match d.decision {
        Decided::Allowed => "allowed",
        Decided::Refused => "refused",
    };
    let method = match d.method {
        Method::Connect => "CONNECT",
        Method::Http => "HTTP",
    };
    format!("{method} {}:{} {what} ({})", d.name.as_deref().unwrap_or("?"), d.port.unwrap_or(0), d.reason)
}

/// What a fetch in the box printed: wget's status and the body.
struct Fetch {
    missing: bool,
    rc: Option<i32>,
    body: String,
    stderr: String,
}

fn fetched(out: &Output) -> Fetch {
    let missing = out.stdout.lines().any(|l| l == "no-wget");
    let rc = out.stdout.lines().rev().find_map(|l| l.strip_prefix("rc=")?.parse().ok());
    let body = out.stdout.lines().filter(|l| !l.starts_with("rc=")).collect::<Vec<_>>().join("\n");
    Fetch { missing, rc, body: body.trim().to_owned(), stderr: out.stderr_line() }
}

impl Kit<'_> {
    /// Every allowlist claim: probed in a box of their own when there is a
    /// target, else SKIPPED saying what is missing.
    pub(super) async fn allowlist(&mut self, source: Option<WorkspaceSource>, target: Option<&EgressTarget>) {
        let Some(target) = target else {
            let why = "no egress target: these claims need test services of the caller's, named with --egress-target FILE (docs/specs/conformance.md)";
            for claim in claims() {
                self.record(claim, Status::Skipped, why, None);
            }
            return;
        };
        let resolver = tinybox_core::paths::egress_resolver().ok().flatten();
        if resolver != Some(target.dns) {
            let why = format!(
                "the egress target's DNS server is {}, but proxies resolve with {}: run the kit with {}={}",
                target.dns,
                resolver.map_or_else(|| "the system's resolver".to_owned(), |r| r.to_string()),
                tinybox_core::paths::EGRESS_RESOLVER_VAR,
                target.dns
            );
            for claim in claims() {
                self.record(claim, Status::Skipped, why.clone(), None);
            }
            return;
        }
        let mut spec = self.spec(source);
        spec.network = Some(NetworkPolicy::Allowlist);
        spec.allow_hosts = target.entries();
        let t = Instant::now();
        let id = match self.create("create (allowlist)", spec).await {
            Ok(id) => id,
            Err(e) => {
                let why = format!("a box with the allowlist {} could not be made: {e}", target.entries().join(", "));
                for claim in claims() {
                    self.record(claim, Status::Fail, why.clone(), Some(t.elapsed()));
                }
                return;
            }
        };
        let mut reached = false;
        for claim in claims() {
            let t = Instant::now();
            let verdict = match self.allowlist_probe(claim, &id, target, reached).await {
                Ok(v) => v,
                Err(e) => (Status::Fail, format!("the probe could not run: {e}")),
            };
            if claim == Claim::AllowlistHttpsConnect {
                reached = verdict.0 == Status::Pass;
            }
            self.record(claim, verdict.0, verdict.1, Some(t.elapsed()));
        }
        self.remove("rm (allowlist)", &id).await;
    }

    async fn allowlist_probe(
        &self,
        claim: Claim,
        id: &BoxId,
        target: &EgressTarget,
        tunnel_works: bool,
    ) -> tinybox_core::Result<Verdict> {
        let t = target;
        Ok(match claim {
            Claim::AllowlistListedNameReached => {
                let (f, log) = self.fetch(id, &t.url(&t.allowed_name, "/"), &t.allowed_name).await?;
                reached_verdict(&f, &log, &t.allowed_name)
            }
            Claim::AllowlistUnlistedNameRefused => {
                let (f, log) = self.fetch(id, &t.url(&t.refused_name, "/"), &t.refused_name).await?;
                refused_verdict(&f, &log, &t.refused_name, "an unlisted name")
            }
            Claim::AllowlistAddressLiteralRefused => {
                let literal = match t.unlisted_address {
                    IpAddr::V4(a) => a.to_string(),
                    IpAddr::V6(a) => format!("[{a}]"),
                };
                let (f, log) = self.fetch(id, &t.url(&literal, "/"), &literal).await?;
                refused_verdict(&f, &log, &literal, "an unlisted address literal")
            }
            Claim::AllowlistRebindingRefused => {
                let (f, log) = self.fetch(id, &t.url(&t.rebind_name, "/"), &t.rebind_name).await?;
                refused_verdict(&f, &log, &t.rebind_name, "a listed name resolving to a private or loopback address")
            }
            Claim::AllowlistNoDirectConnection => self.direct(id, t).await?,
            Claim::AllowlistNoProxyFails => self.without_proxy(id, t).await?,
            Claim::AllowlistNoDns => self.no_dns(id, t).await?,
            Claim::AllowlistHttpsConnect => self.tunnel(id, t, &t.allowed_name, None).await?,
            Claim::AllowlistSniMismatchRefused => self.tunnel(id, t, &t.refused_name, Some(tunnel_works)).await?,
            Claim::AllowlistRedirectRefused => self.redirect(id, t).await?,
            other => (Status::Skipped, format!("{other} is not an allowlist claim")),
        })
    }

    async fn sh(&self, id: &BoxId, script: &str) -> tinybox_core::Result<Output> {
        run(self.tb, id, &["sh", "-c", script], &[], std::future::pending()).await
    }

    fn decisions(&self, id: &BoxId) -> Vec<Decision> {
        self.tb.network_log(id).unwrap_or_default()
    }

    /// The decisions logged after the first `before`, once one is about
    /// `name` (or [`LOG_WAIT`] has passed).
    async fn decisions_after(&self, id: &BoxId, before: usize, name: &str) -> Vec<Decision> {
        let deadline = Instant::now() + LOG_WAIT;
        loop {
            let all = self.decisions(id);
            let new: Vec<Decision> = all.into_iter().skip(before).collect();
            if new.iter().any(|d| about(d, name)) || Instant::now() >= deadline {
                return new;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// wget of `url` through the box's proxy settings, and what the proxy
    /// logged about `name` meanwhile.
    async fn fetch(&self, id: &BoxId, url: &str, name: &str) -> tinybox_core::Result<(Fetch, Vec<Decision>)> {
        let before = self.decisions(id).len();
        let out = self.sh(id, &format!("{WGET}; wget -q $T -T 10 -O - '{url}'; rc=$?; echo; echo rc=$rc")).await?;
        let f = fetched(&out);
        let log = if f.missing { Vec::new() } else { self.decisions_after(id, before, name).await };
        Ok((f, log))
    }

    /// A TCP connection straight to the test host, around the proxy.
    async fn direct(&self, id: &BoxId, t: &EgressTarget) -> tinybox_core::Result<Verdict> {
        let host = t.test_host;
        let mut reached = Vec::new();
        for port in [t.http_port, t.https_port] {
            let script = format!(
                "{FIND_NC}; printf 'GET / HTTP/1.0\\r\\n\\r\\n' | $NC -w 5 {host} {port} 2>/dev/null | head -c 64; echo; echo rc=$?"
            );
            let out = self.sh(id, &script).await?;
            if out.stdout.contains("no-nc") {
                return Ok((Status::Skipped, "the box has no nc (nor busybox nc) to connect with".into()));
            }
            let got = out.stdout.lines().filter(|l| !l.starts_with("rc=")).collect::<String>();
            if !got.trim().is_empty() {
                reached.push(format!("{host}:{port} answered {:?}", got.trim()));
            }
        }
        Ok(if reached.is_empty() {
            (Status::Pass, format!("nc to {host}:{} and :{} from the box got nothing", t.http_port, t.https_port))
        } else {
            (Status::Fail, format!("a direct connection around the proxy got through: {}", reached.join("; ")))
        })
    }

    /// wget with every proxy variable unset, by name and by address.
    async fn without_proxy(&self, id: &BoxId, t: &EgressTarget) -> tinybox_core::Result<Verdict> {
        let host = match t.test_host {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
        };
        let mut got = Vec::new();
        for url in [t.url(&t.allowed_name, "/"), t.url(&host, "/")] {
            let script = format!(
                "{WGET}; env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u no_proxy -u NO_PROXY \
                 wget -q $T -T 10 -O - '{url}'; rc=$?; echo; echo rc=$rc"
            );
            let f = fetched(&self.sh(id, &script).await?);
            if f.missing {
                return Ok((Status::Skipped, "the box has no wget".into()));
            }
            if f.rc == Some(0) || !f.body.is_empty() {
                got.push(format!("{url} answered {:?}", f.body));
            }
        }
        Ok(if got.is_empty() {
            (Status::Pass, format!("wget without proxy settings failed for {} and {host}", t.allowed_name))
        } else {
            (Status::Fail, format!("without the proxy the box still got out: {}", got.join("; ")))
        })
    }

    /// DNS straight to the target's server (its port and 53), TCP and UDP.
    async fn no_dns(&self, id: &BoxId, t: &EgressTarget) -> tinybox_core::Result<Verdict> {
        let (ip, port) = (t.dns.ip(), t.dns.port());
        let query: String = dns_query(&t.allowed_name).iter().map(|b| format!("{b:02x}")).collect();
        let script = format!(
            "{FIND_NC}; for p in 53 {port}; do if $NC -w 3 {ip} $p </dev/null >/dev/null 2>&1; then echo tcp$p=connected; else echo tcp$p=failed; fi; done; \
             if command -v python3 >/dev/null 2>&1; then python3 -c '{UDP}' {ip} {port} {query}; else echo udp=untested; fi"
        );
        let out = self.sh(id, &script).await?;
        if out.stdout.contains("no-nc") {
            return Ok((Status::Skipped, "the box has no nc (nor busybox nc) to connect with".into()));
        }
        let reached: Vec<&str> =
            out.stdout.lines().filter(|l| l.ends_with("=connected") || l.ends_with("=answered")).collect();
        let seen: Vec<&str> = out.stdout.lines().filter(|l| l.contains('=')).collect();
        Ok(if !reached.is_empty() {
            (Status::Fail, format!("the box reached the DNS server {ip}: {}", reached.join(", ")))
        } else if out.stdout.contains("udp=untested") {
            (
                Status::Skipped,
                format!("TCP to {ip} failed ({}), but the box has no python3 to try UDP", seen.join(", ")),
            )
        } else if seen.len() < 4 {
            (
                Status::Fail,
                format!("the probe did not finish ({}): {} {}", out.status, seen.join(", "), out.stderr_line()),
            )
        } else {
            (Status::Pass, format!("no DNS server reached from the box: {}", seen.join(", ")))
        })
    }

    /// CONNECT to the allowed name's TLS port, then a ClientHello naming
    /// `sni`. `mismatch` is `None` for the claim that the tunnel works, and
    /// says whether it did for the claim that a foreign SNI is refused.
    async fn tunnel(
        &self,
        id: &BoxId,
        t: &EgressTarget,
        sni: &str,
        mismatch: Option<bool>,
    ) -> tinybox_core::Result<Verdict> {
        let authority = format!("{}:{}", t.allowed_name, t.https_port);
        let hello = printf_octal(&client_hello(sni));
        let script = format!(
            "{FIND_NC}; [ -n \"$https_proxy\" ] || {{ echo no-proxy; exit 0; }}; h=${{https_proxy#*://}}; h=${{h%%/*}}; p=${{h##*:}}; h=${{h%:*}}; \
             {{ printf 'CONNECT {authority} HTTP/1.1\\r\\nHost: {authority}\\r\\n\\r\\n'; printf '{hello}'; }} | $NC -w 10 \"$h\" \"$p\" | od -An -v -tx1 | tr -d ' \\n'; echo"
        );
        let before = self.decisions(id).len();
        let out = self.sh(id, &script).await?;
        if out.stdout.contains("no-nc") {
            return Ok((Status::Skipped, "the box has no nc (nor busybox nc) to send the ClientHello with".into()));
        }
        if out.stdout.contains("no-proxy") {
            return Ok((Status::Fail, "the box's environment has no https_proxy".into()));
        }
        let reply = unhex(out.stdout.trim());
        let log = self.decisions_after(id, before, &t.allowed_name).await;
        Ok(tunnel_verdict(&reply, &log, &authority, sni, mismatch))
    }

    /// A redirect from the allowed host to the refused name.
    async fn redirect(&self, id: &BoxId, t: &EgressTarget) -> tinybox_core::Result<Verdict> {
        let (f, log) = self.fetch(id, &t.url(&t.allowed_name, &t.redirect_path), &t.refused_name).await?;
        if f.missing {
            return Ok((Status::Skipped, "the box has no wget".into()));
        }
        let first = log.iter().find(|d| about(d, &t.allowed_name));
        let second: Vec<&Decision> = log.iter().filter(|d| about(d, &t.refused_name)).collect();
        let shown: Vec<String> = log.iter().map(show).collect();
        Ok(match (first, second.as_slice()) {
            (_, s) if s.iter().any(|d| d.decision == Decided::Allowed) => {
                (Status::Fail, format!("the redirect to {} was let through: {}", t.refused_name, shown.join("; ")))
            }
            (Some(a), [r, ..]) if a.decision == Decided::Allowed && f.rc != Some(0) => {
                (Status::Pass, format!("the first request was allowed, the redirected one refused ({})", r.reason))
            }
            (Some(a), []) if a.decision == Decided::Allowed => (
                Status::Skipped,
                format!("wget did not follow the redirect to {} (status {:?}): inconclusive", t.refused_name, f.rc),
            ),
            _ => (
                Status::Skipped,
                format!("the first request, to {}, was not allowed: {}", t.allowed_name, shown.join("; ")),
            ),
        })
    }
}

/// The python3 program trying UDP DNS to argv[1] on port 53 and argv[2].
const UDP: &str = "import socket,sys\nq=bytes.fromhex(sys.argv[3])\nfor p in (53,int(sys.argv[2])):\n try:\n  a=socket.getaddrinfo(sys.argv[1],p,type=socket.SOCK_DGRAM)[0]\n  s=socket.socket(a[0],a[1]);s.settimeout(3);s.sendto(q,a[4]);s.recvfrom(512);print(\"udp%d=answered\"%p)\n except Exception:\n  print(\"udp%d=failed\"%p)\n";

/// An A query for `name`.
fn dns_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x4b, 0x42, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(u8::try_from(label.len()).unwrap_or(63));
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

fn unhex(s: &str) -> Vec<u8> {
    s.as_bytes()
        .chunks(2)
        .filter_map(|p| std::str::from_utf8(p).ok().and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

/// What came back after the proxy's `200` answer to CONNECT, if it said 200.
fn after_established(reply: &[u8]) -> Option<&[u8]> {
    let end = reply.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&reply[..end]).ok()?;
    let status = head.lines().next()?.split_whitespace().nth(1)?;
    (status == "200").then_some(&reply[end + 4..])
}

fn reached_verdict(f: &Fetch, log: &[Decision], name: &str) -> Verdict {
    if f.missing {
        return (Status::Skipped, "the box has no wget".into());
    }
    let allowed = log.iter().find(|d| about(d, name) && d.decision == Decided::Allowed);
    match (f.rc, allowed) {
        (Some(0), Some(d)) if !f.body.is_empty() => (
            Status::Pass,
            format!(
                "{} bytes from {name} through the proxy ({}, {})",
                f.body.len(),
                show(d),
                d.address.map_or_else(String::new, |a| a.to_string())
            ),
        ),
        _ => (
            Status::Fail,
            format!(
                "the listed name {name} was not reached through the proxy (wget status {:?}: {}; decisions: {})",
                f.rc,
                f.stderr,
                log.iter().map(show).collect::<Vec<_>>().join("; ")
            ),
        ),
    }
}

fn refused_verdict(f: &Fetch, log: &[Decision], name: &str, what: &str) -> Verdict {
    if f.missing {
        return (Status::Skipped, "the box has no wget".into());
    }
    let mine: Vec<&Decision> = log.iter().filter(|d| about(d, name)).collect();
    if f.rc == Some(0) || mine.iter().any(|d| d.decision == Decided::Allowed) {
        return (Status::Fail, format!("{what}, {name}, was let through (wget status {:?}, body {:?})", f.rc, f.body));
    }
    match mine.first() {
        Some(d) => (Status::Pass, format!("{what}, {name}, was refused by the proxy: {}", d.reason)),
        None => (
            Status::Fail,
            format!("the proxy decided nothing about {what}, {name} (wget status {:?}: {})", f.rc, f.stderr),
        ),
    }
}

fn tunnel_verdict(reply: &[u8], log: &[Decision], authority: &str, sni: &str, mismatch: Option<bool>) -> Verdict {
    let tls = after_established(reply);
    let answered = tls.is_some_and(is_server_hello);
    let connects: Vec<&Decision> = log.iter().filter(|d| d.method == Method::Connect).collect();
    let shown = connects.iter().map(|d| show(d)).collect::<Vec<_>>().join("; ");
    match mismatch {
        None => match (answered, connects.iter().find(|d| d.decision == Decided::Allowed)) {
            (true, Some(_)) => (
                Status::Pass,
                format!("CONNECT {authority}, SNI {sni}: the TLS server's ServerHello came back ({shown})"),
            ),
            _ => (
                Status::Fail,
                format!(
                    "CONNECT {authority} with SNI {sni} did not reach the TLS server ({} reply bytes; decisions: {shown})",
                    reply.len()
                ),
            ),
        },
        Some(_) if answered => (
            Status::Fail,
            format!(
                "a tunnel to {authority} carried a ClientHello naming {sni} to the TLS server: the proxy does not check SNI ({shown})"
            ),
        ),
        Some(works) => match connects.iter().find(|d| d.decision == Decided::Refused && d.reason.starts_with("sni")) {
            Some(d) => (Status::Pass, format!("CONNECT {authority} with SNI {sni} was refused: {}", d.reason)),
            None if !works => (
                Status::Skipped,
                format!("inconclusive: a tunnel to {authority} does not work even with the right SNI ({shown})"),
            ),
            None => (
                Status::Fail,
                format!("the proxy logged no SNI refusal for CONNECT {authority} with SNI {sni} ({shown})"),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> EgressTarget {
        EgressTarget {
            dns: "127.0.0.1:5353".parse().unwrap(),
            test_host: "10.254.1.2".parse().unwrap(),
            allowed_name: "allowed.test".into(),
            http_port: 8080,
            https_port: 8443,
            refused_name: "other.test".into(),
            rebind_name: "rebind.test".into(),
            unlisted_address: "10.254.1.1".parse().unwrap(),
            redirect_path: "/redirect".into(),
        }
    }

    fn decision(method: Method, name: &str, decision: Decided, reason: &str) -> Decision {
        Decision {
            time_ms: 1,
            method,
            name: Some(name.into()),
            port: Some(8443),
            address: None,
            decision,
            reason: reason.into(),
            bytes_up: 0,
            bytes_down: 0,
        }
    }

    #[test]
    fn a_target_file_round_trips_and_bad_names_are_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("target.json");
        std::fs::write(&path, serde_json::to_string(&target()).unwrap()).unwrap();
        assert_eq!(EgressTarget::from_file(&path).unwrap(), target());
        assert_eq!(target().entries()[3], "10.254.1.2:8080");
        let mut bad = target();
        bad.allowed_name = "a.test'; rm -rf /".into();
        std::fs::write(&path, serde_json::to_string(&bad).unwrap()).unwrap();
        let e = EgressTarget::from_file(&path).unwrap_err().to_string();
        assert!(e.contains("allowed_name") && !e.contains('\n'), "{e}");
        std::fs::write(&path, "{\"dns\": 1}").unwrap();
        assert!(EgressTarget::from_file(&path).is_err());
    }

    #[test]
    fn a_tunnel_is_judged_by_the_server_hello_and_the_sni_refusal() {
        let mut reply = b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec();
        let closed = reply.clone();
        reply.extend([0x16, 0x03, 0x03, 0x00, 0x7a, 0x02, 0x00]);
        let allowed = [decision(Method::Connect, "allowed.test", Decided::Allowed, "allowed.test:8443")];
        assert_eq!(tunnel_verdict(&reply, &allowed, "allowed.test:8443", "allowed.test", None).0, Status::Pass);
        assert_eq!(tunnel_verdict(&closed, &allowed, "allowed.test:8443", "allowed.test", None).0, Status::Fail);
        // A foreign SNI that reaches the server fails, whatever was logged.
        assert_eq!(tunnel_verdict(&reply, &allowed, "allowed.test:8443", "other.test", Some(true)).0, Status::Fail);
        let refused =
            [decision(Method::Connect, "allowed.test", Decided::Refused, "sni \"other.test\" does not match")];
        assert_eq!(tunnel_verdict(&closed, &refused, "allowed.test:8443", "other.test", Some(true)).0, Status::Pass);
        assert_eq!(tunnel_verdict(&closed, &[], "allowed.test:8443", "other.test", Some(true)).0, Status::Fail);
        assert_eq!(tunnel_verdict(&closed, &[], "allowed.test:8443", "other.test", Some(false)).0, Status::Skipped);
    }

    #[test]
    fn a_refusal_needs_the_proxys_decision_and_nothing_through() {
        let f = |rc: i32, body: &str| Fetch { missing: false, rc: Some(rc), body: body.into(), stderr: String::new() };
        let refused = [decision(Method::Http, "other.test", Decided::Refused, "not on the allowlist")];
        assert_eq!(refused_verdict(&f(8, ""), &refused, "other.test", "x").0, Status::Pass);
        assert_eq!(refused_verdict(&f(0, "hello"), &refused, "other.test", "x").0, Status::Fail);
        assert_eq!(refused_verdict(&f(4, ""), &[], "other.test", "x").0, Status::Fail);
        let literal = [decision(Method::Http, "10.254.1.1", Decided::Refused, "not on the allowlist")];
        assert_eq!(refused_verdict(&f(8, ""), &literal, "10.254.1.1", "x").0, Status::Pass);
        let allowed = [decision(Method::Http, "allowed.test", Decided::Allowed, "allowed.test:8080")];
        assert_eq!(reached_verdict(&f(0, "hello"), &allowed, "allowed.test").0, Status::Pass);
        assert_eq!(reached_verdict(&f(0, "hello"), &[], "allowed.test").0, Status::Fail);
    }

    #[test]
    fn the_dns_query_names_the_host() {
        let q = dns_query("allowed.test");
        assert_eq!(&q[12..], b"\x07allowed\x04test\x00\x00\x01\x00\x01");
        assert_eq!(unhex("485454500a"), b"HTTP\n");
    }
}
