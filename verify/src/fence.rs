//! The egress fence claims (`network.egress_fence.*`), for a sandbox
//! declaring `egress_fence`: a box of the kit's with plain egress tries to
//! reach the kit's own listener on every one of the host's addresses, and
//! (given an egress target) a private test host, which it must reach once
//! that one address is listed as an exception.
//!
//! A machine where the sandbox cannot make an egress box at all (its
//! driver answers `unavailable`: no slirp4netns, no iptables) has no box
//! the fence could fail to hold; both claims are SKIPPED there, saying so,
//! and do not count against the verdict.

use std::time::Instant;

use tinybox_core::ErrorKind;
use tinybox_sdk::model::{BoxId, NetworkPolicy, WorkspaceSource};

use super::allowlist::FIND_NC;
use super::egress_target::EgressTarget;
use super::{Claim, Kit, Status, levels, run};

type Verdict = (Status, String);

const CLAIMS: [Claim; 2] = [Claim::EgressFenceHostUnreachable, Claim::EgressFencePrivateUnreachable];

impl Kit<'_> {
    /// Both fence claims, in boxes of their own.
    pub(super) async fn egress_fence(&mut self, source: Option<WorkspaceSource>, target: Option<&EgressTarget>) {
        let mut spec = self.spec(source.clone());
        spec.network = Some(NetworkPolicy::Egress);
        let t = Instant::now();
        let id = match self.create("create (egress)", spec).await {
            Ok(id) => id,
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                for claim in CLAIMS {
                    self.record_excused(claim, format!("no egress box can be made here, so none to fence: {e}"));
                }
                return;
            }
            Err(e) => {
                for claim in CLAIMS {
                    self.record(claim, Status::Fail, format!("a box with egress could not be made: {e}"), None);
                }
                return;
            }
        };
        let verdict = match self.host_unreachable(&id).await {
            Ok(v) => v,
            Err(e) => (Status::Fail, format!("the probe could not run: {e}")),
        };
        self.record(Claim::EgressFenceHostUnreachable, verdict.0, verdict.1, Some(t.elapsed()));
        let t = Instant::now();
        let verdict = match target {
            None => (
                Status::Skipped,
                "no egress target: this claim needs a private test host of the caller's, named with --egress-target FILE (docs/specs/conformance.md)".to_owned(),
            ),
            Some(target) => self.private_unreachable(source, &id, target).await,
        };
        let untargeted = target.is_none();
        match untargeted {
            true => self.record_excused(Claim::EgressFencePrivateUnreachable, verdict.1),
            false => self.record(Claim::EgressFencePrivateUnreachable, verdict.0, verdict.1, Some(t.elapsed())),
        }
        self.remove("rm (egress)", &id).await;
    }

    /// The kit listens on 0.0.0.0; the box tries each of the host's
    /// addresses and the user-mode gateways that stand for the host
    /// (slirp4netns's 10.0.2.2); the listener must accept nothing.
    async fn host_unreachable(&self, id: &BoxId) -> tinybox_core::Result<Verdict> {
        let bound = std::net::TcpListener::bind("0.0.0.0:0").and_then(|l| l.set_nonblocking(true).map(|()| l));
        let listener = bound.map_err(|e| tinybox_core::Error::io("listen on a host port for the fence probe", e))?;
        let port = listener.local_addr().map_err(|e| tinybox_core::Error::io("read the probe's port", e))?.port();
        let mut addrs = levels::host_addresses();
        addrs.push("10.0.2.2".into());
        let each = |a: &str| format!("$NC -w 2 {a} {port} </dev/null >/dev/null 2>&1 && echo reached={a};");
        let script = format!("{FIND_NC}; {}echo done", levels::each_address(&addrs, each));
        let out = run(self.tb, id, &["sh", "-c", &script], &[], std::future::pending()).await?;
        let accepted = listener.accept().is_ok();
        Ok(host_verdict(&out.stdout, accepted, &addrs, port))
    }

    /// The test host's HTTP port, from the fenced box (must fail) and from
    /// a box listing exactly that address and port (must answer).
    async fn private_unreachable(
        &mut self,
        source: Option<WorkspaceSource>,
        fenced: &BoxId,
        t: &EgressTarget,
    ) -> Verdict {
        let addr = t.test_host.to_string();
        let blocked = match self.http_head(fenced, &addr, t.http_port).await {
            Ok(got) => got,
            Err(e) => return (Status::Fail, format!("the probe could not run: {e}")),
        };
        if let Some(line) = blocked.as_deref().and_then(answered) {
            return (
                Status::Fail,
                format!("plain egress reached the private test host {addr}:{}: {line}", t.http_port),
            );
        }
        if blocked.is_none() {
            return (Status::Skipped, "the box has no nc (nor busybox nc) to connect with".into());
        }
        let mut spec = self.spec(source);
        spec.network = Some(NetworkPolicy::Egress);
        let listed = match t.test_host {
            std::net::IpAddr::V4(a) => format!("{a}:{}", t.http_port),
            std::net::IpAddr::V6(a) => format!("[{a}]:{}", t.http_port),
        };
        spec.allow_hosts = vec![listed.clone()];
        let id = match self.create("create (egress, one exception)", spec).await {
            Ok(id) => id,
            Err(e) => return (Status::Fail, format!("a box listing {listed} could not be made: {e}")),
        };
        let through = self.http_head(&id, &addr, t.http_port).await;
        self.remove("rm (egress, one exception)", &id).await;
        match through {
            Ok(Some(out)) if answered(&out).is_some() => (
                Status::Pass,
                format!("plain egress did not reach the private test host {listed}; a box listing it did"),
            ),
            Ok(out) => (
                Status::Fail,
                format!(
                    "a box listing {listed} did not reach it either ({}), so the fence was not shown to let an exception through",
                    out.unwrap_or_default().trim()
                ),
            ),
            Err(e) => (Status::Fail, format!("the probe could not run: {e}")),
        }
    }

    /// What an HTTP request to `addr:port` from box `id` got back; `None`
    /// when the box has no nc. The request's write side stays open a few
    /// seconds: busybox nc half-closes at the end of its input, and Debian
    /// 12's passt (a microVM's egress) sometimes never delivers the reply to
    /// a guest that half-closed at once (ADR 0006).
    async fn http_head(&self, id: &BoxId, addr: &str, port: u16) -> tinybox_core::Result<Option<String>> {
        let script = format!(
            "{FIND_NC}; {{ printf 'GET / HTTP/1.0\\r\\nHost: {addr}\\r\\n\\r\\n'; sleep 3; }} | $NC -w 3 {addr} {port} 2>&1 | head -c 200; echo; echo done"
        );
        let out = run(self.tb, id, &["sh", "-c", &script], &[], std::future::pending()).await?;
        Ok(match out.stdout.lines().any(|l| l == "no-nc") {
            true => None,
            false => Some(out.stdout),
        })
    }
}

fn host_verdict(stdout: &str, accepted: bool, addrs: &[String], port: u16) -> Verdict {
    let reached: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("reached=")).collect();
    if stdout.lines().any(|l| l == "no-nc") {
        return (Status::Skipped, "the box has no nc (nor busybox nc) to connect with".into());
    }
    if accepted || !reached.is_empty() {
        return (
            Status::Fail,
            format!(
                "a box with egress reached the kit's listener on port {port} of the host (via {})",
                reached.join(", ")
            ),
        );
    }
    if !stdout.lines().any(|l| l == "done") {
        return (Status::Fail, "the probe did not finish".into());
    }
    (Status::Pass, format!("a box with egress reached none of the host's {} on port {port}", addrs.join(", ")))
}

/// The status line of an HTTP answer in what a probe printed.
fn answered(out: &str) -> Option<&str> {
    out.lines().find(|l| l.starts_with("HTTP/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_verdict_fails_on_any_reach_and_passes_only_a_finished_probe() {
        let addrs = ["127.0.0.1".to_owned(), "10.0.2.2".to_owned()];
        assert_eq!(host_verdict("done\n", false, &addrs, 9).0, Status::Pass);
        assert_eq!(host_verdict("done\n", true, &addrs, 9).0, Status::Fail);
        let (status, detail) = host_verdict("reached=10.0.2.2\ndone\n", false, &addrs, 9);
        assert_eq!((status, detail.contains("via 10.0.2.2")), (Status::Fail, true));
        assert_eq!(host_verdict("", false, &addrs, 9).0, Status::Fail);
        assert_eq!(host_verdict("no-nc\n", false, &addrs, 9).0, Status::Skipped);
    }

    #[test]
    fn only_an_http_status_line_counts_as_reached() {
        assert_eq!(answered("HTTP/1.0 200 OK\r\nbody\ndone\n"), Some("HTTP/1.0 200 OK"));
        assert_eq!(answered("nc: connect: Connection refused\n\ndone\n"), None);
        assert_eq!(answered("\ndone\n"), None);
    }
}
