//! A docker box's limits, live: memory and CPU enforced by the kernel, a
//! fork bomb stopped at the pids cap with the host still responsive, and a
//! pids cap too small for a box refused before any container.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_cpu_limits_are_enforced_by_the_kernel() {
    need_docker!("docker_box::limits::memory_and_cpu_limits_are_enforced_by_the_kernel");
    let ns = Namespace::new("limits");
    let (tb, _dir) = docker::engine(Arc::new(SystemClock));
    let mut spec = docker::spec(&ns);
    spec.resources.memory_bytes = Some(32 << 20);
    spec.resources.cpus = Some(0.5);
    let info = tb.create(spec).await.unwrap();
    let ws = info.workspace.as_ref().unwrap();
    assert_eq!(
        (ws.limits.cpus, ws.limits.memory_bytes, ws.limits.pids, ws.limits.disk_bytes),
        (Some(0.5), Some(32 << 20), Some(512), None)
    );

    // cpu: the quota is in the container's own cgroup (v1 here; v2 elsewhere).
    let quota = run_ok(
        &tb,
        &info.id,
        &["sh", "-c", "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us"],
    )
    .await;
    let nums: Vec<f64> = quota.split_whitespace().filter_map(|n| n.parse().ok()).collect();
    assert_eq!(nums.len(), 2, "{quota}");
    assert_eq!(nums[0] / nums[1], 0.5, "quota/period: {quota}");

    // memory: the cap is set, swap included, and going past it is fatal.
    let limit = run_ok(
        &tb,
        &info.id,
        &["sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"],
    )
    .await;
    assert_eq!(limit.trim(), (32u64 << 20).to_string());
    let hog = run(&tb, &info.id, &["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"]).await;
    assert_eq!(hog.status.shell_code(), 137, "64 MiB in a 32 MiB box must be OOM-killed: {hog:?}");
    // The box itself survives its command's death.
    assert_eq!(run_ok(&tb, &info.id, &["echo", "still here"]).await, "still here\n");
    tb.remove(&info.id).await.unwrap();
    tb.close().await;
}

/// The box's pids cgroup as the host sees it.
fn host_pids_cgroup(container: &str) -> std::path::PathBuf {
    let id = docker_ok(&["inspect", "--format", "{{.Id}}", container]);
    let candidates = [
        format!("/sys/fs/cgroup/pids/docker/{id}"),
        format!("/sys/fs/cgroup/docker/{id}"),
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope"),
    ];
    let found = candidates.iter().map(std::path::PathBuf::from).find(|p| p.join("pids.max").is_file());
    found.unwrap_or_else(|| panic!("no pids cgroup for {container} among {candidates:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stops_at_the_pids_cap_and_the_host_stays_responsive() {
    need_docker!("docker_box::limits::a_fork_bomb_stops_at_the_pids_cap_and_the_host_stays_responsive");
    let ns = Namespace::new("forkbomb");
    let (tb, _dir) = docker::engine(Arc::new(SystemClock));
    let mut spec = docker::spec(&ns);
    spec.resources.pids = Some(64);
    spec.resources.cpus = Some(0.5);
    let info = tb.create(spec).await.unwrap();
    let cgroup = host_pids_cgroup(&ns.container(info.id.as_str()));
    assert_eq!(std::fs::read_to_string(cgroup.join("pids.max")).unwrap().trim(), "64");

    // The bomb detaches from the exec, which returns at once. The exec's own
    // shell forks exactly once, before the bomb exists: forking each side of
    // `f | f` from it would race the bomb for the last free pid.
    let bomb = ["sh", "-c", "(f() { f | f & }; f) >/dev/null 2>&1 </dev/null & echo lit"];
    assert_eq!(run_ok(&tb, &info.id, &bomb).await, "lit\n");
    let read = |f: &str| std::fs::read_to_string(cgroup.join(f)).unwrap_or_default();
    let refused = |events: &str| events.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    let deadline = Instant::now() + GUARD;
    // Bounded poll until the kernel has refused forks at the cap.
    while refused(&read("pids.events")) == 0 {
        assert!(Instant::now() < deadline, "no fork was ever refused at the cap");
        std::thread::sleep(Duration::from_millis(10));
    }
    // pids.max caps forks, not processes moved into the cgroup: `docker
    // exec` moves its runtime and our exec's lifeline watcher in from
    // outside, so while they start the count (and pids.peak) may pass the
    // cap (CI saw a peak of 69). Once none of them is left, only the
    // bomb's own forks remain, and those never pass the cap.
    let entered_from_outside = || {
        read("cgroup.procs").lines().any(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            cmdline.contains("runc") || cmdline.contains("read -r w")
        })
    };
    while entered_from_outside() {
        assert!(Instant::now() < deadline, "the exec's runtime or lifeline never left the box");
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..50 {
        let current: u64 = read("pids.current").trim().parse().unwrap_or(0);
        assert!(current <= 64, "{current} processes in a box capped at 64");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The host still starts processes promptly while the bomb runs.
    let start = Instant::now();
    assert!(std::process::Command::new("true").status().unwrap().success());
    assert!(start.elapsed() < Duration::from_secs(5), "the host took {:?} to run `true`", start.elapsed());
    tokio::time::timeout(GUARD, tb.remove(&info.id)).await.expect("rm ends the bomb").unwrap();
    assert_ne!(docker(&["container", "inspect", &ns.container(info.id.as_str())]).0, 0);
    tb.close().await;
}

#[test]
fn a_pids_limit_too_small_to_start_a_box_is_refused_naming_the_minimum_and_leaves_nothing() {
    need_docker!(
        "docker_box::limits::a_pids_limit_too_small_to_start_a_box_is_refused_naming_the_minimum_and_leaves_nothing"
    );
    let ns = Namespace::new("fewpids");
    let cli = Cli::new();
    let (code, out, err) = cli.run(&["create", "--sandbox", "docker", "--namespace", ns.name.as_str(), "--pids", "1"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("tinybox: ") && err.contains("a pids limit of 1 is below the 16"), "{err:?}");
    assert!(err.trim_end().ends_with("ask for at least 16"), "{err:?}");
    let label = format!("label=tinybox.namespace={}", ns.name);
    assert_eq!(docker_ok(&["ps", "-aq", "--filter", &label]), "", "a refused create leaves no container");
    assert!(cli.run(&["ls"]).2.contains("no boxes"), "nor a box");

    // The minimum itself makes a box that runs commands, a pipeline included.
    let id = docker_box(&cli, &ns, &["--pids", "16"]);
    let (code, out, err) = cli.run(&["exec", &id, "--", "sh", "-c", "echo piped | cat"]);
    assert_eq!((code, out.as_str()), (0, "piped\n"), "{err}");
}
