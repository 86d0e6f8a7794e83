//! The limit probes: a box asked for the kit's caps on CPUs, memory and
//! processes is pushed past each, and what stopped it is the verdict.

use tinybox_sdk::model::BoxId;

use tinybox_core::Result;

use super::probe_tools::sh;
use super::{CAP_CPUS, CAP_MEMORY, CAP_PIDS, Kit, Status};

type Verdict = (Status, String);

/// cpu: the quota the box's cgroup files show matches the cap asked for.
/// With no quota in force (no such file, or it reads `max`), the cap can
/// only be the number of CPUs the box may use (a microVM's vCPUs, a
/// cpuset): that count must be the cap, on a host with more CPUs than that.
pub(super) async fn cpu(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let script = "if [ -r /sys/fs/cgroup/cpu.max ]; then echo \"quota=$(cat /sys/fs/cgroup/cpu.max)\"; \
                  elif [ -r /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then \
                  echo \"quota=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)\"; fi; \
                  unset OMP_NUM_THREADS OMP_THREAD_LIMIT; echo \"nproc=$(nproc 2>/dev/null)\"; \
                  echo \"online=$(cat /sys/devices/system/cpu/online 2>/dev/null)\"; cat /proc/self/status 2>/dev/null; true";
    let out = sh(kit, id, script).await?;
    let host = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    Ok(cpu_verdict(&out.stdout, host))
}

/// The cpu probe's verdict from what the box printed and the host's CPU count.
fn cpu_verdict(stdout: &str, host: usize) -> Verdict {
    let field = |name: &str| stdout.lines().find_map(|l| l.trim().strip_prefix(name)).map(str::trim);
    let quota_line = field("quota=").unwrap_or("");
    let mut words = quota_line.split_whitespace();
    let (quota, period) = (words.next().unwrap_or(""), words.next().and_then(|p| p.parse::<f64>().ok()));
    let quota = quota.parse::<f64>().ok().filter(|q| *q > 0.0);
    match (quota, period) {
        (Some(q), Some(p)) if p > 0.0 && (q / p - CAP_CPUS).abs() < 0.011 => {
            return (Status::Pass, format!("cgroup quota {q}/{p} = {:.2} cpus, as asked ({CAP_CPUS})", q / p));
        }
        (Some(q), Some(p)) if p > 0.0 => {
            return (Status::Fail, format!("cgroup quota {q}/{p} = {:.2} cpus, but {CAP_CPUS} was asked", q / p));
        }
        _ => {}
    }
    let no_quota = if quota_line.is_empty() {
        "no cgroup cpu quota file is visible in the box".to_owned()
    } else {
        format!("the box's cgroup sets no cpu quota (it reads {quota_line:?})")
    };
    // The CPUs the box may use: what `nproc` says (its affinity), and the
    // kernel's own account, the allowed CPUs that are online.
    let nproc = field("nproc=").and_then(|n| n.parse::<usize>().ok());
    let allowed = field("Cpus_allowed_list:").and_then(cpu_list);
    let online = field("online=").and_then(cpu_list);
    let listed = allowed.map(|a| match &online {
        Some(on) => a.intersection(on).count(),
        None => a.len(),
    });
    let mut seen = Vec::new();
    if let Some(n) = nproc {
        seen.push(format!("nproc {n}"));
    }
    if let Some(n) = listed {
        seen.push(format!("{n} in Cpus_allowed_list and online"));
    }
    let Some(count) = nproc.into_iter().chain(listed).max() else {
        return (
            Status::Skipped,
            format!("{no_quota}, and the box's CPUs cannot be counted (no nproc, no Cpus_allowed_list)"),
        );
    };
    let seen = seen.join(", ");
    let count_f = count as f64;
    if count_f > CAP_CPUS + 0.011 {
        (Status::Fail, format!("{no_quota}, and the box can use {count} CPUs ({seen}), over the cap of {CAP_CPUS}"))
    } else if host <= count {
        (
            Status::Skipped,
            format!(
                "{no_quota}; the box can use {count} CPU ({seen}), but this host has only {host}, so the count shows no cap (inconclusive)"
            ),
        )
    } else if (count_f - CAP_CPUS).abs() < 0.011 {
        (
            Status::Pass,
            format!(
                "{no_quota}; the cap is the CPU count: the box can use {count} of the host's {host} CPUs ({seen}), as asked ({CAP_CPUS})"
            ),
        )
    } else {
        (Status::Fail, format!("{no_quota}, and the box can use {count} CPUs ({seen}), but {CAP_CPUS} was asked"))
    }
}

/// The CPUs of a kernel cpu list such as `0-3,8,10-11`.
fn cpu_list(s: &str) -> Option<std::collections::BTreeSet<u32>> {
    let mut cpus = std::collections::BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        if hi < lo || hi - lo > 65536 {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// memory: allocating well over the cap is refused or killed, while a
/// small allocation with the same tools succeeds.
pub(super) async fn memory(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
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
    settle(kit, id).await;
    Ok(if out.stdout.trim() == big.to_string() {
        (Status::Fail, format!("the box held {big} bytes in memory under a cap of {CAP_MEMORY}"))
    } else {
        let held = out.stdout.trim();
        let held = if held.is_empty() { "nothing" } else { held };
        (Status::Pass, format!("holding {big} bytes under a cap of {CAP_MEMORY} was stopped (the pipe passed {held})"))
    })
}

/// Waits (bounded) until the box can start processes again. What a limit
/// probe pushed over its cap (sleepers killed, a command the OOM killer
/// took) still counts against the box's pids cap until the kernel has
/// finished with it, which on a sandbox with a cgroup per box (namespace)
/// lands after the command has answered; a probe run in that window would
/// fail for a reason that is not its own.
async fn settle(kit: &Kit<'_>, id: &BoxId) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        match sh(kit, id, "true & true & true & true & wait").await {
            Ok(out) if out.status.success() => return,
            _ => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
}

/// pids: starting twice the cap's processes fails before the last.
pub(super) async fn pids(kit: &Kit<'_>, id: &BoxId) -> Result<Verdict> {
    let want = CAP_PIDS * 2;
    // The inner shell starts sleepers until a fork fails (which ends it);
    // the outer one then stops its whole process group, sleepers included.
    let script = format!(
        "sh -c 'i=0; while [ $i -lt {want} ]; do sleep 60 </dev/null >/dev/null 2>&1 & i=$((i+1)); echo n=$i; done' 2>/dev/null; echo done; kill -KILL 0"
    );
    let out = sh(kit, id, &script).await?;
    settle(kit, id).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What the cpu probe's script prints in a box.
    fn printed(quota: Option<&str>, nproc: &str, online: &str, allowed: &str) -> String {
        let quota = quota.map(|q| format!("quota={q}\n")).unwrap_or_default();
        format!("{quota}nproc={nproc}\nonline={online}\nName:\tcat\nCpus_allowed_list:\t{allowed}\nVmRSS:\t1 kB\n")
    }

    #[test]
    fn a_cgroup_quota_is_judged_by_its_ratio() {
        let (status, detail) = cpu_verdict(&printed(Some("100000 100000"), "8", "0-7", "0-7"), 8);
        assert_eq!(status, Status::Pass, "{detail}");
        let (status, detail) = cpu_verdict(&printed(Some("50000 100000"), "8", "0-7", "0-7"), 8);
        assert_eq!(status, Status::Fail, "{detail}");
        assert!(detail.contains("0.50 cpus, but 1 was asked"), "{detail}");
    }

    #[test]
    fn without_a_quota_the_cpu_count_is_the_cap() {
        // A one-vCPU guest on a bigger host: the count is the cap.
        for quota in [None, Some("max 100000"), Some("-1 100000")] {
            let (status, detail) = cpu_verdict(&printed(quota, "1", "0", "0"), 2);
            assert_eq!(status, Status::Pass, "{quota:?}: {detail}");
            assert!(detail.contains("the box can use 1 of the host's 2 CPUs"), "{detail}");
        }
        // On a host with one CPU, seeing one proves nothing.
        let (status, detail) = cpu_verdict(&printed(None, "1", "0", "0"), 1);
        assert_eq!(status, Status::Skipped, "{detail}");
        assert!(detail.contains("inconclusive"), "{detail}");
        // Seeing more than the cap, with no quota, is a failed cap.
        let (status, detail) = cpu_verdict(&printed(Some("max 100000"), "4", "0-3", "0-3"), 4);
        assert_eq!(status, Status::Fail, "{detail}");
        assert!(detail.contains("can use 4 CPUs") && detail.contains("over the cap of 1"), "{detail}");
    }

    #[test]
    fn the_cpu_count_takes_the_larger_account_and_survives_a_missing_nproc() {
        // nproc absent: the allowed CPUs that are online.
        let (status, detail) = cpu_verdict(&printed(None, "", "0", "0-63"), 4);
        assert_eq!(status, Status::Pass, "{detail}");
        let (status, detail) = cpu_verdict(&printed(None, "", "0-1", "0-63"), 4);
        assert_eq!(status, Status::Fail, "{detail}");
        // nproc understating what the kernel allows does not hide it.
        let (status, detail) = cpu_verdict(&printed(None, "1", "0-3", "0-3"), 4);
        assert_eq!(status, Status::Fail, "{detail}");
        // Nothing to count with.
        let (status, detail) = cpu_verdict("nproc=\nonline=\n", 4);
        assert_eq!(status, Status::Skipped, "{detail}");
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        let l = |s: &str| cpu_list(s).map(|c| c.into_iter().collect::<Vec<_>>());
        assert_eq!(l("0"), Some(vec![0]));
        assert_eq!(l("0-3,8,10-11\n"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(l(""), None);
        assert_eq!(l("3-1"), None);
        assert_eq!(l("x"), None);
    }
}
