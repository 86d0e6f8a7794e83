//! One live probe per claim. Each returns the verdict and what it saw; an
//! `Err` is an engine failure (the probe could not run at all), which the
//! kit reports as a FAIL of that claim.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tinybox_sdk::model::{BoxId, WorkspaceSource};

use super::{CAP_CPUS, CAP_MEMORY, CAP_PIDS, Kit, Status, run};
use crate::error::Result;
use crate::model::BoxSpec;

type Verdict = (Status, String);

/// The port the port-forward probe listens on inside the box.
pub const GUEST_PORT: u16 = 8080;

/// Variables a sandbox's base environment may share with the caller's
/// without anything having leaked: values every login sets alike.
const ENV_ALLOWED: &[&str] =
    &["PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "TERM", "USER", "LOGNAME", "SHELL", "HOSTNAME", "TMPDIR", "TZ", "_"];

fn env_allowed(name: &str) -> bool {
    ENV_ALLOWED.contains(&name) || name == "LANG" || name == "LANGUAGE" || name.starts_with("LC_")
}

/// A process of the caller's that the box must not reach; killed on drop.
struct Bystander(std::process::Child);

impl Bystander {
    fn start() -> Result<Bystander> {
        let child = std::process::Command::new("sleep")
            .arg("600")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| crate::Error::io("cannot start a bystander process (sleep) for the probe", e))?;
        Ok(Bystander(child))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `rc=N` line a probe script prints, when it printed one.
fn rc_of(stdout: &str) -> Option<i32> {
    stdout.lines().find_map(|l| l.trim().strip_prefix("rc=")?.parse().ok())
}

pub(super) async fn probe(kit: &mut Kit<'_>, name: &str, id: &BoxId, spec: &BoxSpec) -> Result<Verdict> {
    match name {
        "isolation.process.cannot_signal_caller" => cannot_signal(kit, id).await,
        "isolation.kernel.host_processes" => host_processes(kit, id).await,
        "isolation.kernel.env_clean" => env_clean(kit, id).await,
        "isolation.kernel.only_stdio_fds" => only_stdio_fds(kit, id).await,
        "isolation.hardware.own_kernel" => own_kernel(kit, id).await,
        "limit.cpu" => cpu(kit, id).await,
        "limit.memory" => memory(kit, id).await,
        "limit.pids" => pids(kit, id).await,
        "limit.disk" => Ok((Status::Skipped, "the kit has no disk-quota probe yet".into())),
        "network.deny" => network_deny(kit, id).await,
        "snapshot.filesystem" => snapshot(kit, id, spec).await,
        "feature.pause_resume" => Ok((Status::Skipped, "core has no pause/resume operation to probe".into())),
        other => Ok((Status::Skipped, format!("no probe for {other}"))),
    }
}

async fn sh(kit: &Kit<'_>, id: &BoxId, script: &str) -> Result<super::Output> {
    run(kit.tb, id, &["sh", "-c", script], &[], std::future::pending()).await
}

/// Process: `kill -0` from the box on a process of the caller's must fail.
async fn cannot_signal(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let by = Bystander::start()?;
    let out = sh(kit, id, &format!("kill -0 {} 2>/dev/null; echo rc=$?", by.pid())).await?;
    Ok(match rc_of(&out.stdout) {
        None => (Status::Fail, format!("the probe printed nothing ({}): {}", out.status, out.stderr_line())),
        Some(0) => (Status::Fail, format!("the box signalled the caller's process {} (kill -0 succeeded)", by.pid())),
        Some(rc) => (Status::Pass, format!("kill -0 {} from the box failed (status {rc})", by.pid())),
    })
}

/// Kernel: the caller's process is neither in the box's /proc nor signalable.
async fn host_processes(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let by = Bystander::start()?;
    let pid = by.pid();
    let script = format!(
        "if [ -e /proc/{pid}/cmdline ] && grep -q sleep /proc/{pid}/cmdline 2>/dev/null; then echo visible; else echo hidden; fi; kill -0 {pid} 2>/dev/null; echo rc=$?"
    );
    let out = sh(kit, id, &script).await?;
    let visible = out.stdout.lines().any(|l| l.trim() == "visible");
    Ok(match rc_of(&out.stdout) {
        None => (Status::Fail, format!("the probe printed nothing ({}): {}", out.status, out.stderr_line())),
        Some(0) => (Status::Fail, format!("the caller's process {pid} is signalable from the box (kill -0 succeeded)")),
        Some(_) if visible => (Status::Fail, format!("the caller's process {pid} is visible in the box's /proc")),
        Some(_) => {
            (Status::Pass, format!("the caller's process {pid} is absent from the box's /proc and kill -0 fails"))
        }
    })
}

/// Kernel: no caller variable reaches the box, beyond a small allowlist of
/// base variables (PATH, HOME, LANG, ...) a box may legitimately share.
async fn env_clean(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let marker = format!("m{}", std::process::id());
    let out = run(kit.tb, id, &["env"], &[("TINYBOX_VERIFY_MARKER", &marker)], std::future::pending()).await?;
    let seen: BTreeMap<&str, &str> = out.stdout.lines().filter_map(|l| l.split_once('=')).collect();
    if !out.status.success() || seen.get("TINYBOX_VERIFY_MARKER") != Some(&marker.as_str()) {
        return Ok((
            Status::Fail,
            format!(
                "`env` in the box did not show the variable the command set ({}): {}",
                out.status,
                out.stderr_line()
            ),
        ));
    }
    let mut leaked: Vec<String> = std::env::vars()
        .filter(|(k, v)| !env_allowed(k) && seen.get(k.as_str()) == Some(&v.as_str()))
        .map(|(k, _)| k)
        .collect();
    leaked.sort();
    Ok(if leaked.is_empty() {
        (Status::Pass, format!("{} variables in the box, none inherited from the caller", seen.len()))
    } else {
        let shown: Vec<&str> = leaked.iter().take(5).map(String::as_str).collect();
        (
            Status::Fail,
            format!(
                "{} of the caller's variables leaked into the box: {}{}",
                leaked.len(),
                shown.join(", "),
                if leaked.len() > 5 { ", ..." } else { "" }
            ),
        )
    })
}

/// Kernel: a command in the box holds descriptors 0-2 and nothing else.
async fn only_stdio_fds(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let out = run(kit.tb, id, &["ls", "-l", "/proc/self/fd"], &[], std::future::pending()).await?;
    if !out.status.success() {
        return Ok((Status::Fail, format!("`ls -l /proc/self/fd` failed ({}): {}", out.status, out.stderr_line())));
    }
    let mut extra = Vec::new();
    for line in out.stdout.lines() {
        let Some((left, target)) = line.split_once(" -> ") else { continue };
        let Some(fd) = left.split_whitespace().last() else { continue };
        // ls's own handle on the directory it lists.
        if target.starts_with("/proc/") && target.trim_end().ends_with("/fd") {
            continue;
        }
        if !["0", "1", "2"].contains(&fd) {
            extra.push(format!("{fd} -> {}", target.trim()));
        }
    }
    Ok(if extra.is_empty() {
        (Status::Pass, "only descriptors 0, 1 and 2 are open".into())
    } else {
        (Status::Fail, format!("descriptors beyond stdio are open in the box: {}", extra.join(", ")))
    })
}

/// Hardware: the box's kernel release differs from the host's.
async fn own_kernel(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
    let out = run(kit.tb, id, &["uname", "-r"], &[], std::future::pending()).await?;
    let guest = out.stdout.trim();
    Ok(if !out.status.success() || guest.is_empty() {
        (Status::Fail, format!("`uname -r` failed in the box ({}): {}", out.status, out.stderr_line()))
    } else if guest == host {
        (Status::Fail, format!("the box runs the host's kernel ({host})"))
    } else {
        (Status::Pass, format!("box kernel {guest}, host kernel {host}"))
    })
}

/// cpu: the quota the box's cgroup files show matches the cap asked for.
async fn cpu(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let script = "if [ -r /sys/fs/cgroup/cpu.max ]; then cat /sys/fs/cgroup/cpu.max; \
                  elif [ -r /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then \
                  echo \"$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)\"; fi";
    let out = sh(kit, id, script).await?;
    let line = out.stdout.trim();
    if line.is_empty() {
        return Ok((Status::Skipped, "no cgroup cpu quota file is visible in the box to read the quota from".into()));
    }
    let mut words = line.split_whitespace();
    let (quota, period) = (words.next().unwrap_or(""), words.next().and_then(|p| p.parse::<f64>().ok()));
    let quota = quota.parse::<f64>().ok().filter(|q| *q > 0.0);
    Ok(match (quota, period) {
        (Some(q), Some(p)) if p > 0.0 && (q / p - CAP_CPUS).abs() < 0.011 => {
            (Status::Pass, format!("cgroup quota {q}/{p} = {:.2} cpus, as asked ({CAP_CPUS})", q / p))
        }
        (Some(q), Some(p)) if p > 0.0 => {
            (Status::Fail, format!("cgroup quota {q}/{p} = {:.2} cpus, but {CAP_CPUS} was asked", q / p))
        }
        _ => (Status::Fail, format!("no cpu quota in force in the box's cgroup (it reads {line:?})")),
    })
}

/// memory: allocating well over the cap is refused or killed, while a
/// small allocation with the same tools succeeds.
async fn memory(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let hold = |n: u64| format!("head -c {n} /dev/zero | tail -c {n} | wc -c");
    let small = 1024 * 1024;
    let control = sh(kit, id, &hold(small)).await?;
    if control.stdout.trim() != small.to_string() {
        return Ok((
            Status::Skipped,
            format!(
                "the box cannot run the probe's tools (head, tail, wc) even under the cap ({}): {}",
                control.status,
                control.stderr_line()
            ),
        ));
    }
    let big = CAP_MEMORY * 4;
    let out = sh(kit, id, &hold(big)).await?;
    Ok(if out.stdout.trim() == big.to_string() {
        (Status::Fail, format!("the box held {big} bytes in memory under a cap of {CAP_MEMORY}"))
    } else {
        let held = out.stdout.trim();
        let held = if held.is_empty() { "nothing" } else { held };
        (Status::Pass, format!("holding {big} bytes under a cap of {CAP_MEMORY} was stopped (the pipe passed {held})"))
    })
}

/// pids: starting twice the cap's processes fails before the last.
async fn pids(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let want = CAP_PIDS * 2;
    // The inner shell starts sleepers until a fork fails (which ends it);
    // the outer one then stops its whole process group, sleepers included.
    let script = format!(
        "sh -c 'i=0; while [ $i -lt {want} ]; do sleep 60 </dev/null >/dev/null 2>&1 & i=$((i+1)); echo n=$i; done' 2>/dev/null; echo done; kill -KILL 0"
    );
    let out = sh(kit, id, &script).await?;
    let started = out.stdout.lines().filter_map(|l| l.trim().strip_prefix("n=")?.parse::<u64>().ok()).max();
    if !out.stdout.lines().any(|l| l.trim() == "done") {
        return Ok((Status::Fail, format!("the probe did not finish ({}): {}", out.status, out.stderr_line())));
    }
    Ok(match started {
        Some(n) if n >= want => (Status::Fail, format!("the box started {n} processes under a cap of {CAP_PIDS}")),
        Some(n) => (Status::Pass, format!("forking stopped after {n} processes under a cap of {CAP_PIDS}")),
        None => (Status::Pass, format!("not even one process could be started under a cap of {CAP_PIDS}")),
    })
}

/// network deny: the box sees no interface but loopback.
async fn network_deny(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let out = run(kit.tb, id, &["cat", "/proc/net/dev"], &[], std::future::pending()).await?;
    if !out.status.success() {
        return Ok((
            Status::Fail,
            format!("cannot read /proc/net/dev in the box ({}): {}", out.status, out.stderr_line()),
        ));
    }
    let ifaces: Vec<&str> = out.stdout.lines().filter_map(|l| Some(l.split_once(':')?.0.trim())).collect();
    let others: Vec<&str> = ifaces.iter().copied().filter(|i| *i != "lo").collect();
    Ok(if others.is_empty() {
        (Status::Pass, "only lo in the box's /proc/net/dev".into())
    } else {
        (Status::Fail, format!("the box sees interfaces beyond loopback: {}", others.join(", ")))
    })
}

const FILE_A: &str = "tinybox-verify-before";
const FILE_B: &str = "tinybox-verify-after";

/// Which of the probe files a box has, as "a b" flags.
async fn files_in(kit: &Kit<'_>, id: &BoxId) -> Result<(bool, bool)> {
    let out = sh(kit, id, &format!("test -e {FILE_A} && echo a; test -e {FILE_B} && echo b; true")).await?;
    Ok((out.stdout.lines().any(|l| l == "a"), out.stdout.lines().any(|l| l == "b")))
}

/// Filesystem snapshot: a file written before the snapshot is in a box
/// started from it; one written after is not.
async fn snapshot(kit: &mut Kit<'_>, id: &BoxId, spec: &BoxSpec) -> Result<Verdict> {
    let w = sh(kit, id, &format!("echo before > {FILE_A}")).await?;
    if !w.status.success() {
        return Ok((Status::Fail, format!("cannot write a file in the box ({}): {}", w.status, w.stderr_line())));
    }
    let t = Instant::now();
    let snap = kit.tb.snapshot(id).await;
    kit.op("snapshot", t.elapsed(), snap.is_ok());
    let snap = snap?;
    sh(kit, id, &format!("echo after > {FILE_B}")).await?;
    let mut from = spec.clone();
    from.source = Some(WorkspaceSource::Snapshot { id: snap.id.clone() });
    let copy = kit.create("create (from snapshot)", from).await?;
    let seen = files_in(kit, &copy).await;
    kit.remove("rm (from snapshot)", &copy).await;
    Ok(match seen? {
        (true, false) => {
            (Status::Pass, format!("snapshot {} holds the file written before it and not the one after", snap.id))
        }
        (false, _) => (Status::Fail, format!("a box from snapshot {} lacks the file written before it", snap.id)),
        (true, true) => (Status::Fail, format!("a box from snapshot {} has a file written after it", snap.id)),
    })
}

/// Fork: the new box has the source box's files as they are now.
async fn fork_probe(kit: &mut Kit<'_>, id: &BoxId) -> Result<Verdict> {
    sh(kit, id, &format!("echo before > {FILE_A}; echo after > {FILE_B}")).await?;
    let t = Instant::now();
    let forked = kit.tb.fork(id).await;
    kit.op("fork", t.elapsed(), forked.is_ok());
    let forked = forked?.id;
    let seen = files_in(kit, &forked).await;
    kit.remove("rm (fork)", &forked).await;
    Ok(match seen? {
        (true, true) => (Status::Pass, format!("fork {forked} has the source box's files")),
        _ => (Status::Fail, format!("fork {forked} lacks files its source box had when forked")),
    })
}

pub(super) async fn fork(kit: &mut Kit<'_>, id: &BoxId) -> Result<Verdict> {
    fork_probe(kit, id).await
}

/// PortForward: a server in the box answers on the published host port.
pub(super) async fn port_forward(kit: &Kit<'_>, id: &BoxId, host_port: u16) -> Result<Verdict> {
    let marker = format!("tinybox-verify-{}", std::process::id());
    let script = format!(
        "command -v nc >/dev/null 2>&1 || exit 127; echo {marker} | nc -l -p {GUEST_PORT} 2>/dev/null || echo {marker} | nc -l {GUEST_PORT}"
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let argv = ["sh", "-c", script.as_str()];
    let server = run(kit.tb, id, &argv, &[], async move {
        let _ = stop_rx.await;
    });
    tokio::pin!(server);
    let m = marker.clone();
    let client = tokio::task::spawn_blocking(move || fetch(host_port, &m, Duration::from_secs(20)));
    tokio::pin!(client);
    let (got, served) = tokio::select! {
        served = &mut server => {
            let served = served?;
            if served.status.code == Some(127) {
                client.abort();
                return Ok((Status::Skipped, "the box has no nc to listen with".into()));
            }
            (client.await.unwrap_or(false), Some(served))
        }
        got = &mut client => {
            let _ = stop_tx.send(());
            let _ = (&mut server).await;
            (got.unwrap_or(false), None)
        }
    };
    Ok(if got {
        (Status::Pass, format!("127.0.0.1:{host_port} on the host answered from the box's port {GUEST_PORT}"))
    } else {
        let how = served.map(|s| format!(" (the server ended: {})", s.status)).unwrap_or_default();
        (
            Status::Fail,
            format!("127.0.0.1:{host_port} on the host never answered from the box's port {GUEST_PORT}{how}"),
        )
    })
}

/// Connects to the port until it answers with `marker`, or `within` passes.
fn fetch(port: u16, marker: &str, within: Duration) -> bool {
    use std::io::Read;
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = String::new();
            let _ = s.read_to_string(&mut buf);
            if buf.contains(marker) {
                return true;
            }
        }
        // Polling a port that is not open yet: nothing to wait on instead.
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
