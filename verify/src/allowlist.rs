//! The allowlist claims (`network.allowlist.*`): for a sandbox declaring
//! `network_allowlist`, a box of the kit's with an allowlist attacks its
//! own egress proxy, and each attempt is judged from the host by what the
//! client in the box got and by what the proxy logged (core's
//! `network_log`, what `tinybox logs --network` prints).
//!
//! The kit cannot invent the internet it probes against: the caller names
//! test services of its own in an [`EgressTarget`] (`--egress-target FILE`).
//! Without one every allowlist claim is SKIPPED, saying so.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use tinybox_core::egress::{Decision, Method, Verdict as Decided};
use tinybox_sdk::model::{BoxId, NetworkPolicy, WorkspaceSource};

use super::client_hello::{client_hello, is_server_hello, printf_octal};
use super::egress_target::EgressTarget;
use super::{Claim, Kit, Output, Status, run};

type Verdict = (Status, String);

/// How long the kit waits for the proxy to log a connection the box's
/// client has finished with (a tunnel's decision is written when it ends).
const LOG_WAIT: Duration = Duration::from_secs(10);

const NO_WGET: &str = "the box has no wget";

/// The allowlist claims, in report order.
pub fn claims() -> impl Iterator<Item = Claim> {
    Claim::ALL.into_iter().filter(|c| c.requirement() == super::Requirement::NetworkAllowlist)
}

/// The shell prelude finding an `nc` (busybox's will do) as `$NC`.
pub(super) const FIND_NC: &str = "if command -v nc >/dev/null 2>&1; then NC=nc; \
     elif command -v busybox >/dev/null 2>&1 && busybox nc --help >/dev/null 2>&1; then NC='busybox nc'; \
     else echo no-nc; exit 0; fi";

/// The shell prelude for wget as `$W`: one try and a 10 s timeout where
/// it is GNU wget. Busybox's `-T` is not used: Debian 12's static busybox
/// wget dies of SIGSEGV whenever it is given (a microVM guest's userland is
/// that busybox); `timeout` bounds it instead, where there is one.
const WGET: &str = "command -v wget >/dev/null 2>&1 || { echo no-wget; exit 0; }; \
     if wget --help 2>&1 | grep -q -- --tries; then W='wget -t 1 -T 10'; \
     elif command -v timeout >/dev/null 2>&1; then W='timeout 20 wget'; else W=wget; fi";

/// The name (or address) a decision was about.
fn about(d: &Decision, name: &str) -> bool {
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
                let (f, log) = self.fetch(id, &t.url(&t.allowed_name, "/"), &[&t.allowed_name]).await?;
                reached_verdict(&f, &log, &t.allowed_name)
            }
            Claim::AllowlistUnlistedNameRefused => {
                let (f, log) = self.fetch(id, &t.url(&t.refused_name, "/"), &[&t.refused_name]).await?;
                refused_verdict(&f, &log, &t.refused_name, "an unlisted name")
            }
            Claim::AllowlistAddressLiteralRefused => {
                let literal = match t.unlisted_address {
                    IpAddr::V4(a) => a.to_string(),
                    IpAddr::V6(a) => format!("[{a}]"),
                };
                let (f, log) = self.fetch(id, &t.url(&literal, "/"), &[&literal]).await?;
                refused_verdict(&f, &log, &literal, "an unlisted address literal")
            }
            Claim::AllowlistRebindingRefused => {
                let (f, log) = self.fetch(id, &t.url(&t.rebind_name, "/"), &[&t.rebind_name]).await?;
                refused_verdict(&f, &log, &t.rebind_name, "a listed name resolving to a private or loopback address")
            }
            Claim::AllowlistNoDirectConnection => self.direct(id, t).await?,
            Claim::AllowlistNoProxyFails => self.without_proxy(id, t).await?,
            Claim::AllowlistNoDns => self.no_dns(id, t).await?,
            Claim::AllowlistHttpsConnect => self.tunnel(id, t, &t.allowed_name, None).await?,
            Claim::AllowlistSniMismatchRefused => self.tunnel(id, t, &t.refused_name, Some(tunnel_works)).await?,
            Claim::AllowlistRedirectRefused => self.redirect(id, t).await?,
            Claim::AllowlistHostUnreachable => self.host_unreachable_listed(id).await?,
            other => (Status::Skipped, format!("{other} is not an allowlist claim")),
        })
    }

    async fn sh(&self, id: &BoxId, script: &str) -> tinybox_core::Result<Output> {
        run(self.tb, id, &["sh", "-c", script], &[], std::future::pending()).await
    }

    fn decisions(&self, id: &BoxId) -> Vec<Decision> {
        self.tb.network_log(id).unwrap_or_default()
    }

    /// The decisions logged after the first `before`, once there is one
    /// about each of `names` (or [`LOG_WAIT`] has passed). The proxy logs a
    /// request when its connection ends, so a redirect's first request can
    /// be logged after the second: waiting for the later one alone would
    /// read a log that does not have the earlier one yet.
    async fn decisions_after(&self, id: &BoxId, before: usize, names: &[&str]) -> Vec<Decision> {
        let deadline = Instant::now() + LOG_WAIT;
        loop {
            let all = self.decisions(id);
            let new: Vec<Decision> = all.into_iter().skip(before).collect();
            if covers(&new, names) || Instant::now() >= deadline {
                return new;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// wget of `url` through the box's proxy settings, and what the proxy
    /// logged meanwhile (waiting for a decision about each of `names`).
    async fn fetch(&self, id: &BoxId, url: &str, names: &[&str]) -> tinybox_core::Result<(Fetch, Vec<Decision>)> {
        let before = self.decisions(id).len();
        let out = self.sh(id, &format!("{WGET}; $W -q -O - '{url}'; rc=$?; echo; echo rc=$rc")).await?;
        let f = fetched(&out);
        let log = if f.missing { Vec::new() } else { self.decisions_after(id, before, names).await };
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
                 $W -q -O - '{url}'; rc=$?; echo; echo rc=$rc"
            );
            let f = fetched(&self.sh(id, &script).await?);
            if f.missing {
                return Ok((Status::Skipped, NO_WGET.into()));
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
        let name = &t.allowed_name;
        // Busybox's nslookup (UDP only) takes the server as IP:PORT, and
        // prints `Server:` only once a server answered (NXDOMAIN included).
        let server = match ip {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
        };
        let nslookup = format!(
            "for p in 53 {port}; do if nslookup {name} {server}:$p 2>&1 | grep -q '^Server:'; then echo udp$p=answered; else echo udp$p=failed; fi; done"
        );
        let script = format!(
            "{FIND_NC}; for p in 53 {port}; do if $NC -w 3 {ip} $p </dev/null >/dev/null 2>&1; then echo tcp$p=connected; else echo tcp$p=failed; fi; done; \
             if command -v python3 >/dev/null 2>&1; then python3 -c '{UDP}' {ip} {port} {query}; \
             elif nslookup 2>&1 | grep -q BusyBox; then {nslookup}; else echo udp=untested; fi"
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
                format!(
                    "TCP to {ip} failed ({}), but the box has neither python3 nor busybox's nslookup to try UDP",
                    seen.join(", ")
                ),
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
        let log = self.decisions_after(id, before, &[&t.allowed_name]).await;
        Ok(tunnel_verdict(&reply, &log, &authority, sni, mismatch))
    }

    /// The kit listens on every address of the host (`[::]`, so IPv4 and
    /// IPv6 alike, as a service on 0.0.0.0 does); the box tries each of
    /// the host's addresses, IPv6 ones included, straight with nc and
    /// through its proxy settings with wget. The listener must accept
    /// nothing.
    async fn host_unreachable_listed(&self, id: &BoxId) -> tinybox_core::Result<Verdict> {
        let bound = std::net::TcpListener::bind("[::]:0")
            .or_else(|_| std::net::TcpListener::bind("0.0.0.0:0"))
            .and_then(|l| l.set_nonblocking(true).map(|()| l));
        let listener = bound.map_err(|e| tinybox_core::Error::io("listen on a host port for the host probe", e))?;
        let port = listener.local_addr().map_err(|e| tinybox_core::Error::io("read the probe's port", e))?.port();
        let mut addrs = super::levels::host_addresses();
        addrs.push("10.0.2.2".into());
        addrs.extend(host_addresses_v6());
        let each = |a: &str| {
            let url = if a.contains(':') { format!("http://[{a}]:{port}/") } else { format!("http://{a}:{port}/") };
            format!(
                "$NC -w 2 {a} {port} </dev/null >/dev/null 2>&1 && echo reached={a}; \
                 $W -q -O /dev/null '{url}' >/dev/null 2>&1 && echo reached={a}-through-the-proxy;"
            )
        };
        let script = format!("{FIND_NC}; {WGET}; {}echo done", super::levels::each_address(&addrs, each));
        let out = self.sh(id, &script).await?;
        let accepted = listener.accept().is_ok();
        let unfinished = format!("the probe did not finish ({}): {}", out.status, out.stderr_line());
        Ok(listed_host_verdict(&out.stdout, accepted, &addrs, port, unfinished))
    }

    /// A redirect from the allowed host to the refused name. A run that
    /// cannot tell (wget did not get as far as the second request, seen
    /// once in five under a loaded machine's four parallel kits; or the
    /// log lacked a request within [`LOG_WAIT`]) is tried once more; a
    /// let-through redirect fails at once.
    async fn redirect(&self, id: &BoxId, t: &EgressTarget) -> tinybox_core::Result<Verdict> {
        let first = self.redirect_once(id, t).await?;
        if first.0 == Status::Skipped && first.1 != NO_WGET {
            return self.redirect_once(id, t).await;
        }
        Ok(first)
    }

    async fn redirect_once(&self, id: &BoxId, t: &EgressTarget) -> tinybox_core::Result<Verdict> {
        let names = [t.allowed_name.as_str(), t.refused_name.as_str()];
        let (f, log) = self.fetch(id, &t.url(&t.allowed_name, &t.redirect_path), &names).await?;
        if f.missing {
            return Ok((Status::Skipped, NO_WGET.into()));
        }
        Ok(redirect_verdict(&f, &log, t))
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
        return (Status::Skipped, NO_WGET.into());
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
        return (Status::Skipped, NO_WGET.into());
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
#[path = "allowlist_tests.rs"]
mod tests;

/// The redirect claim's verdict from wget's result and the proxy's log:
/// the first request (to the allowed name) allowed and the redirected one
/// (to the refused name) refused, in whichever order the proxy logged them.
fn redirect_verdict(f: &Fetch, log: &[Decision], t: &EgressTarget) -> Verdict {
    let first = log.iter().find(|d| about(d, &t.allowed_name));
    let second: Vec<&Decision> = log.iter().filter(|d| about(d, &t.refused_name)).collect();
    let shown: Vec<String> = log.iter().map(show).collect();
    match (first, second.as_slice()) {
        (_, s) if s.iter().any(|d| d.decision == Decided::Allowed) => {
            (Status::Fail, format!("the redirect to {} was let through: {}", t.refused_name, shown.join("; ")))
        }
        (Some(a), [r, ..]) if a.decision == Decided::Allowed && f.rc != Some(0) => {
            (Status::Pass, format!("the first request was allowed, the redirected one refused ({})", r.reason))
        }
        (Some(a), []) if a.decision == Decided::Allowed => (
            Status::Skipped,
            format!(
                "wget did not follow the redirect to {} (status {:?}: {}; decisions: {}): inconclusive",
                t.refused_name,
                f.rc,
                f.stderr,
                shown.join("; ")
            ),
        ),
        _ => (
            Status::Skipped,
            format!("the first request, to {}, was not allowed: {}", t.allowed_name, shown.join("; ")),
        ),
    }
}

/// Whether `log` holds a decision about each of `names`.
fn covers(log: &[Decision], names: &[&str]) -> bool {
    names.iter().all(|n| log.iter().any(|d| about(d, n)))
}

/// What the host probe of an allowlist box saw: `reached=ADDR` lines, and
/// whether the kit's listener accepted a connection.
fn listed_host_verdict(stdout: &str, accepted: bool, addrs: &[String], port: u16, unfinished: String) -> Verdict {
    let reached: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("reached=")).collect();
    if stdout.lines().any(|l| l == "no-nc") {
        (Status::Skipped, "the box has no nc (nor busybox nc) to connect with".into())
    } else if accepted || !reached.is_empty() {
        let via =
            if reached.is_empty() { "a connection its output did not show".to_owned() } else { reached.join(", ") };
        (Status::Fail, format!("an allowlist box reached the kit's listener on port {port} of the host (via {via})"))
    } else if !stdout.lines().any(|l| l == "done") {
        (Status::Fail, unfinished)
    } else {
        (
            Status::Pass,
            format!(
                "an allowlist box reached none of the host's {} on port {port}, directly or through its proxy",
                addrs.join(", ")
            ),
        )
    }
}

/// The host's own IPv6 addresses (`/proc/net/if_inet6`), loopback first.
fn host_addresses_v6() -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default();
    let mut addrs: Vec<String> = table
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|hex| u128::from_str_radix(hex, 16).ok())
        .map(|n| std::net::Ipv6Addr::from(n).to_string())
        .collect();
    addrs.sort_by_key(|a| a != "::1");
    addrs.dedup();
    addrs
}
