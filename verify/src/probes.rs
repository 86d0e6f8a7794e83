//! One live probe per claim. Each returns the verdict and what it saw; an
//! `Err` is an engine failure (the probe could not run at all), which the
//! kit reports as a FAIL of that claim.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tinybox_sdk::model::{BoxId, WorkspaceSource};

use tinybox_core::Result;
use tinybox_core::model::BoxSpec;

use super::probe_tools::{Bystander, sh};
use super::{Claim, Kit, Status, levels, limits, privilege, run, terminal, terminal_feature};

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

/// The `rc=N` line a probe script prints, when it printed one.
fn rc_of(stdout: &str) -> Option<i32> {
    stdout.lines().find_map(|l| l.trim().strip_prefix("rc=")?.parse().ok())
}

/// Runs the probe of property claim `claim`. The env round trip, fork and
/// port forwarding, which need boxes of their own, and the protocol claims
/// run elsewhere.
pub(super) async fn probe(kit: &mut Kit<'_>, claim: Claim, id: &BoxId, spec: &BoxSpec) -> Result<Verdict> {
    match claim {
        Claim::ProcessCannotSignalCaller => cannot_signal(kit, id).await,
        Claim::ProcessCannotPtraceCaller => levels::cannot_ptrace(kit, id).await,
        Claim::ProcessCannotReadCallerFiles => levels::cannot_read(kit, id).await,
        Claim::ProcessCannotWriteCallerFiles => levels::cannot_write(kit, id).await,
        Claim::KernelHostFilesHidden => levels::host_files_hidden(kit, id).await,
        Claim::KernelNoHostDevices => levels::no_host_devices(kit, id).await,
        Claim::KernelMountsStayInside => levels::mounts_stay_inside(kit, id).await,
        Claim::KernelNothingPrivilegedWritten => privilege::nothing_privileged(kit, id, spec).await,
        Claim::KernelNoTerminalInjection => terminal::no_terminal_injection(kit, id).await,
        Claim::NetworkNoRouteToHost => levels::no_route_to_host(kit, id).await,
        Claim::NetworkNoHostSockets => levels::no_host_sockets(kit, id).await,
        Claim::KernelHostProcesses => host_processes(kit, id).await,
        Claim::KernelEnvClean => env_clean(kit, id).await,
        Claim::KernelOnlyStdioFds => only_stdio_fds(kit, id).await,
        Claim::HardwareOwnKernel => own_kernel(kit, id).await,
        Claim::LimitCpu => limits::cpu(kit, id).await,
        Claim::LimitMemory => limits::memory(kit, id).await,
        Claim::LimitPids => limits::pids(kit, id).await,
        Claim::LimitDisk => Ok((Status::Skipped, "the kit has no disk-quota probe yet".into())),
        Claim::NetworkDeny => network_deny(kit, id).await,
        Claim::SnapshotFilesystem => snapshot(kit, id, spec).await,
        Claim::FeaturePauseResume => Ok((Status::Skipped, "core has no pause/resume operation to probe".into())),
        Claim::FeatureTerminal => terminal_feature::terminal(kit, id).await,
        Claim::ProcessEnvRoundTrip
        | Claim::FeatureFork
        | Claim::FeaturePortForward
        | Claim::AllowlistListedNameReached
        | Claim::AllowlistUnlistedNameRefused
        | Claim::AllowlistAddressLiteralRefused
        | Claim::AllowlistNoDirectConnection
        | Claim::AllowlistNoProxyFails
        | Claim::AllowlistRebindingRefused
        | Claim::AllowlistNoDns
        | Claim::AllowlistHttpsConnect
        | Claim::AllowlistSniMismatchRefused
        | Claim::AllowlistRedirectRefused
        | Claim::AllowlistHostUnreachable
        | Claim::EgressFenceHostUnreachable
        | Claim::EgressFencePrivateUnreachable
        | Claim::ProtocolCallBeforeHandshake
        | Claim::ProtocolIncompatibleVersion
        | Claim::ProtocolUnknownMethod
        | Claim::ProtocolInvalidParams
        | Claim::ProtocolConcurrentCalls
        | Claim::ProtocolLargeBinaryStream
        | Claim::ProtocolCancellation => Ok((Status::Skipped, format!("{claim} has no probe of its own"))),
    }
}

/// What the box sees at the bystander's pid: `seen` when `/proc/<pid>` in
/// the box shows a `sleep` (the bystander is visible), `comm` the name of
/// whatever process has that pid there, and `kill -0`'s status.
struct Reach {
    seen: bool,
    comm: Option<String>,
    rc: Option<i32>,
}

impl Reach {
    /// `kill -0` reached a process that is demonstrably not the caller's:
    /// one of the box's own, which happens to have the same number in the
    /// box's pid space (a VM's kernel threads have small pids, and so does
    /// a host whose pids have wrapped).
    fn someone_else(&self) -> Option<&str> {
        self.comm.as_deref().filter(|c| !self.seen && *c != "sleep")
    }
}

async fn reach(kit: &Kit<'_>, id: &BoxId, pid: u32) -> Result<(Reach, super::Output)> {
    let script = format!(
        "if grep -q sleep /proc/{pid}/cmdline 2>/dev/null; then echo visible; fi; \
         c=$(cat /proc/{pid}/comm 2>/dev/null) && echo \"comm=$c\"; kill -0 {pid} 2>/dev/null; echo rc=$?"
    );
    let out = sh(kit, id, &script).await?;
    let comm = out.stdout.lines().find_map(|l| l.strip_prefix("comm=")).map(|c| c.trim().to_owned());
    let r = Reach {
        seen: out.stdout.lines().any(|l| l.trim() == "visible"),
        comm: comm.filter(|c| !c.is_empty()),
        rc: rc_of(&out.stdout),
    };
    Ok((r, out))
}

/// Process: `kill -0` from the box on a process of the caller's must fail.
async fn cannot_signal(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let by = Bystander::start()?;
    let pid = by.pid();
    let (r, out) = reach(kit, id, pid).await?;
    Ok(match r.rc {
        None => (Status::Fail, format!("the probe printed nothing ({}): {}", out.status, out.stderr_line())),
        Some(0) => match r.someone_else() {
            Some(comm) => (
                Status::Pass,
                format!(
                    "pid {pid} in the box is the box's own process {comm:?}, not the caller's sleep: the box cannot name the caller's process"
                ),
            ),
            None => (Status::Fail, format!("the box signalled the caller's process {pid} (kill -0 succeeded)")),
        },
        Some(rc) => (Status::Pass, format!("kill -0 {pid} from the box failed (status {rc})")),
    })
}

/// Kernel: the caller's process is neither in the box's /proc nor signalable.
async fn host_processes(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let by = Bystander::start()?;
    let pid = by.pid();
    let (r, out) = reach(kit, id, pid).await?;
    Ok(match r.rc {
        None => (Status::Fail, format!("the probe printed nothing ({}): {}", out.status, out.stderr_line())),
        Some(0) if r.someone_else().is_none() => {
            (Status::Fail, format!("the caller's process {pid} is signalable from the box (kill -0 succeeded)"))
        }
        Some(_) if r.seen => (Status::Fail, format!("the caller's process {pid} is visible in the box's /proc")),
        Some(0) => (
            Status::Pass,
            format!(
                "the caller's process {pid} is absent from the box's /proc; pid {pid} there is the box's own {:?}",
                r.comm.as_deref().unwrap_or_default()
            ),
        ),
        Some(_) => {
            (Status::Pass, format!("the caller's process {pid} is absent from the box's /proc and kill -0 fails"))
        }
    })
}

/// The variable the env round trip's box carries in its environment (the
/// box's `env`), with a value no shell, option parser or quoting may alter.
pub const BOX_ENV: (&str, &str) = ("TINYBOX_VERIFY_BOX", "box: a  b='c' \"d\" $HOME `id` \\e *=f -- ☃");
/// The variable the env probe's command sets, likewise.
const COMMAND_ENV: (&str, &str) = ("TINYBOX_VERIFY_COMMAND", "-- command: x=y 'q' \"w\" $(id) ; \\n ☃");

/// Process: a variable set on the command, and one set on the box (`id`
/// was made with [`BOX_ENV`]), arrive in the box exactly, and the command
/// runs (a sandbox that turns them into words of a command line breaks on
/// the first value a parser reads).
pub(super) async fn env_round_trip(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let out = run(kit.tb, id, &["env"], &[COMMAND_ENV], std::future::pending()).await?;
    Ok(env_verdict(&out))
}

/// The env probe's verdict from what `env` printed in the box.
fn env_verdict(out: &super::Output) -> Verdict {
    if !out.status.success() {
        return (
            Status::Fail,
            format!("`env` with a variable set failed in the box ({}): {}", out.status, out.stderr_line()),
        );
    }
    let seen: BTreeMap<&str, &str> = out.stdout.lines().filter_map(|l| l.split_once('=')).collect();
    let mut wrong = Vec::new();
    for (what, (name, value)) in [("the command's", COMMAND_ENV), ("the box's", BOX_ENV)] {
        match seen.get(name) {
            Some(got) if *got == value => {}
            Some(got) => wrong.push(format!("{what} {name} arrived as {got:?}, not {value:?}")),
            None => wrong.push(format!("{what} {name} is missing")),
        }
    }
    if wrong.is_empty() {
        (Status::Pass, format!("{} and {} arrived byte for byte", COMMAND_ENV.0, BOX_ENV.0))
    } else {
        (Status::Fail, wrong.join("; "))
    }
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

/// Hardware: the box runs another kernel — its boot id (fresh at every
/// boot) is not the host's; a box that shows none is judged by its kernel
/// release instead.
async fn own_kernel(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default().trim().to_owned();
    let (host, host_boot) = (read("/proc/sys/kernel/osrelease"), read("/proc/sys/kernel/random/boot_id"));
    let out =
        sh(kit, id, "echo \"release=$(uname -r)\"; echo \"boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\"")
            .await?;
    Ok(own_kernel_verdict(&out, &host, &host_boot))
}

fn own_kernel_verdict(out: &super::Output, host: &str, host_boot: &str) -> Verdict {
    let field = |name: &str| out.stdout.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or("");
    let (guest, boot) = (field("release="), field("boot="));
    if !out.status.success() || guest.is_empty() {
        (Status::Fail, format!("`uname -r` failed in the box ({}): {}", out.status, out.stderr_line()))
    } else if !boot.is_empty() && !host_boot.is_empty() {
        if boot == host_boot {
            (Status::Fail, format!("the box runs the host's kernel (the same boot id {boot}, release {guest})"))
        } else {
            (Status::Pass, format!("box kernel {guest} booted as {boot}; host kernel {host} booted as {host_boot}"))
        }
    } else if guest == host {
        (Status::Fail, format!("the box runs the host's kernel ({host})"))
    } else {
        (Status::Pass, format!("box kernel {guest}, host kernel {host} (no boot id to compare)"))
    }
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
    let copy = kit.create("create (from snapshot)", from).await;
    let seen = match &copy {
        Ok(copy) => files_in(kit, copy).await,
        Err(_) => Ok((false, false)),
    };
    if let Ok(copy) = &copy {
        kit.remove("rm (from snapshot)", copy).await;
    }
    kit.remove_snapshot(&snap.id).await;
    copy?;
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
    let forked = forked?;
    let snapshot = match &forked.spec.source {
        Some(WorkspaceSource::Snapshot { id }) => Some(id.clone()),
        _ => None,
    };
    let forked = forked.id;
    let seen = files_in(kit, &forked).await;
    kit.remove("rm (fork)", &forked).await;
    // The snapshot the fork was made from is the kit's too.
    if let Some(snapshot) = &snapshot {
        kit.remove_snapshot(snapshot).await;
    }
    let from = snapshot.map_or_else(|| "none".to_owned(), |s| s.to_string());
    Ok(match seen? {
        (true, true) => (Status::Pass, format!("fork {forked} (from snapshot {from}) has the source box's files")),
        _ => (Status::Fail, format!("fork {forked} (from snapshot {from}) lacks files its source box had when forked")),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env_printed(stdout: &str, code: i32) -> crate::Output {
        crate::Output {
            status: tinybox_core::model::ExitStatus::code(code),
            stdout: stdout.into(),
            stderr: if code == 0 { String::new() } else { "env: '--': No such file or directory\n".into() },
            elapsed: Duration::ZERO,
            cancelled: false,
        }
    }

    #[test]
    fn the_env_round_trip_needs_both_values_exactly() {
        let both = format!("PATH=/bin\n{}={}\n{}={}\n", COMMAND_ENV.0, COMMAND_ENV.1, BOX_ENV.0, BOX_ENV.1);
        let (status, detail) = env_verdict(&env_printed(&both, 0));
        assert_eq!(status, Status::Pass, "{detail}");
        // What GNU env does with `env K=V -- CMD`: exit 127, nothing printed.
        let (status, detail) = env_verdict(&env_printed("", 127));
        assert_eq!(status, Status::Fail, "{detail}");
        assert!(detail.contains("No such file"), "the box's stderr is quoted: {detail}");
        // A value a shell expanded, and a box variable that never arrived.
        let expanded = format!("{}=-- command: x=y 'q' \"w\" uid=0 ; \\n ☃\n", COMMAND_ENV.0);
        let (status, detail) = env_verdict(&env_printed(&expanded, 0));
        assert_eq!(status, Status::Fail, "{detail}");
        assert!(detail.contains("arrived as") && detail.contains(&format!("{} is missing", BOX_ENV.0)), "{detail}");
    }

    #[test]
    fn another_kernel_is_another_boot_not_only_another_release() {
        let out = |stdout: &str| env_printed(stdout, 0);
        let v = |stdout: &str, boot: &str| own_kernel_verdict(&out(stdout), "6.1.0", boot).0;
        // A guest built from the host's own kernel release still boots apart.
        assert_eq!(v("release=6.1.0\nboot=g\n", "h"), Status::Pass);
        assert_eq!(v("release=6.9.0\nboot=h\n", "h"), Status::Fail);
        // Without a boot id on either side, the release decides.
        assert_eq!(v("release=6.1.0\nboot=\n", "h"), Status::Fail);
        assert_eq!(v("release=6.9.0\nboot=\n", "h"), Status::Pass);
        assert_eq!(v("boot=g\n", "h"), Status::Fail, "no release printed");
    }

    #[test]
    fn a_pid_of_the_boxs_own_is_not_the_callers_process() {
        let r = |seen, comm: Option<&str>| Reach { seen, comm: comm.map(str::to_owned), rc: Some(0) };
        assert_eq!(r(false, Some("kworker/0:1")).someone_else(), Some("kworker/0:1"));
        // A sleep, or a process whose name cannot be read, may be the caller's.
        assert_eq!(r(false, Some("sleep")).someone_else(), None);
        assert_eq!(r(false, None).someone_else(), None);
        assert_eq!(r(true, Some("sh")).someone_else(), None);
    }
}
