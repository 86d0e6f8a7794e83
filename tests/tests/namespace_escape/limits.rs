//! A namespace box's limits, live: they hold as root, an unprivileged
//! caller with no delegated cgroup declares none (a limit asked for is
//! refused by name), and one given a delegated cgroup gets them there.

use super::*;

#[test]
fn limits_hold_as_root_and_an_unprivileged_caller_declares_none() {
    const TEST: &str = "namespace_escape::limits::limits_hold_as_root_and_an_unprivileged_caller_declares_none";
    for who in principals(TEST) {
        let env = BoxEnv::new(&who);
        if who != Principal::Me || !rustix::process::geteuid().is_root() {
            // No cgroup is delegated to it: asking for a limit is refused by name.
            let ws = env.workspace.path().to_str().unwrap().to_owned();
            let out = env.run(&["create", "--workspace", &ws, "--sandbox", "namespace", "--pids", "64"]);
            assert!(!out.status.success(), "{}: a pids limit was accepted", who.label());
            assert!(text(&out.stderr).contains("pids"), "{}: {}", who.label(), text(&out.stderr));
            continue;
        }
        let id = env.create(&["--sandbox", "namespace", "--pids", "64", "--memory", "64M"]);
        let cgroups = limits_hold(&env, &id);
        assert!(env.run(&["rm", &id]).status.success());
        for dir in &cgroups {
            assert!(!dir.exists(), "{} outlived the box", dir.display());
        }
    }
}

/// As root, hands a cgroup per controller (v1) to the test user, as an
/// administrator would, and names it as `cgroup_parent` in the user's
/// store: the user's boxes get their cgroups there, and the limits hold.
#[test]
fn limits_hold_for_an_unprivileged_caller_given_a_delegated_cgroup() {
    const TEST: &str = "namespace_escape::limits::limits_hold_for_an_unprivileged_caller_given_a_delegated_cgroup";
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
    }
    // Principal::all says, visibly, why there is no test user.
    let Some((user, uid, gid)) = Principal::all(TEST).into_iter().find_map(|p| match p {
        Principal::User { uid, gid, .. } => Some((p.clone(), uid, gid)),
        Principal::Me => None,
    }) else {
        return;
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let name = format!("tinybox-test-delegated-{}-{nanos}", std::process::id());
    let parent = match DelegatedCgroup::make(&name, &["pids", "memory", "cpu"], uid, gid) {
        Ok(p) => p,
        Err(why) => return skip(TEST, &format!("cannot delegate a cgroup v1 directory to the test user: {why}")),
    };
    let env = BoxEnv::new(&user);
    let config = env.store.path().join("drivers/namespace");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.json"), format!(r#"{{"cgroup_parent": "{}"}}"#, parent.path)).unwrap();
    user.own_tree(&env.store.path().join("drivers"));

    // The driver declares what the delegated cgroup allows.
    let drivers = text(&env.run(&["drivers"]).stdout);
    let row = drivers.lines().find(|l| l.starts_with("namespace ")).unwrap_or_else(|| panic!("{drivers}"));
    assert!(row.contains("cpu,memory,pids"), "{row}");

    let id = env.create(&["--sandbox", "namespace", "--pids", "64", "--memory", "64M"]);
    let cgroups = limits_hold(&env, &id);
    assert!(cgroups.len() >= 2, "a pids and a memory cgroup at least: {cgroups:?}");
    for dir in &cgroups {
        assert!(
            parent.dirs.iter().any(|p| dir.parent() == Some(p.as_path())),
            "{} is not under the delegated cgroup {:?}",
            dir.display(),
            parent.dirs
        );
    }
    let memory = cgroups.iter().find(|d| d.join("memory.limit_in_bytes").is_file()).expect("a memory cgroup");
    assert_eq!(std::fs::read_to_string(memory.join("memory.limit_in_bytes")).unwrap().trim(), "67108864");

    assert!(env.run(&["rm", &id]).status.success());
    for dir in &cgroups {
        assert!(!dir.exists(), "{} outlived the box", dir.display());
    }
    let children = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect()
    };
    for dir in &parent.dirs {
        assert!(children(dir).is_empty(), "rm left {:?} in {}", children(dir), dir.display());
    }

    // With no cgroup_parent, a caller whose own cgroup is the delegated one
    // (root moves the create's shell there before it becomes the user)
    // gets its box cgroups beneath it.
    std::fs::remove_file(config.join("config.json")).unwrap();
    let ws = env.workspace.path().to_str().unwrap().to_owned();
    let create = env.cli(&["create", "--workspace", &ws, "--sandbox", "namespace", "--pids", "64"]);
    let enter = r#"for d in "$@"; do [ "$d" = -- ] && break; echo $$ > "$d/cgroup.procs" || exit 125; shift; done; shift; exec "$@""#;
    let mut inside = std::process::Command::new("sh");
    inside.args(["-c", enter, "sh"]).args(&parent.dirs).arg("--").arg(create.get_program()).args(create.get_args());
    for (key, value) in create.get_envs() {
        match value {
            Some(v) => inside.env(key, v),
            None => inside.env_remove(key),
        };
    }
    let out = inside.stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "create inside the delegated cgroup: {}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_owned();
    let pids_parent = parent.dirs.iter().find(|d| d.starts_with("/sys/fs/cgroup/pids")).unwrap();
    let made = children(pids_parent);
    assert_eq!(made.len(), 1, "one box cgroup under its own cgroup: {made:?}");
    assert_eq!(std::fs::read_to_string(made[0].join("pids.max")).unwrap().trim(), "64");
    let out = env.run(&["exec", &id, "--", "cat", "/sys/fs/cgroup/pids/pids.max"]);
    assert_eq!(text(&out.stdout).trim(), "64", "the box reads its own limit: {}", text(&out.stderr));
    assert!(env.run(&["rm", &id]).status.success());
    assert!(!made[0].exists(), "{} outlived the box", made[0].display());
}

/// Checks box `id`, made with `--pids 64 --memory 64M`, from outside: its
/// pids cgroup says 64, a fork bomb is held there while the host stays
/// responsive, and it cannot hold 200M. Returns its cgroup directories.
fn limits_hold(env: &BoxEnv, id: &str) -> Vec<std::path::PathBuf> {
    let detail = text(&env.run(&["inspect", id]).stdout);
    let cgroups: Vec<std::path::PathBuf> = detail
        .split([' ', ',', ';'])
        .filter(|w| w.starts_with("/sys/fs/cgroup/"))
        .map(std::path::PathBuf::from)
        .collect();
    let pids = cgroups.iter().find(|d| d.join("pids.max").is_file()).expect("a pids cgroup").clone();
    assert_eq!(std::fs::read_to_string(pids.join("pids.max")).unwrap().trim(), "64");

    // The bomb runs while the exec's shell waits on stdin; the shell forks
    // once, before the bomb exists, so it never races it for a pid.
    let bomb = "(f() { f | f & }; f) >/dev/null 2>&1 </dev/null & echo lit; read x";
    let mut child = tinybox_tests::KillOnDrop(
        env.cli(&["exec", id, "--", "sh", "-c", bomb]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "lit\n");
    let read = |f: &str| std::fs::read_to_string(pids.join(f)).unwrap_or_default();
    let refused = |events: &str| events.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    let start = Instant::now();
    while refused(&read("pids.events")) == 0 {
        assert!(start.elapsed() < GUARD, "no fork was ever refused at the cap");
        let current: u64 = read("pids.current").trim().parse().unwrap_or(0);
        assert!(current <= 64, "{current} processes in a box capped at 64");
        std::thread::yield_now();
    }
    let t = Instant::now();
    assert!(std::process::Command::new("true").status().unwrap().success());
    assert!(t.elapsed() < Duration::from_secs(5), "the host took {:?} to run `true`", t.elapsed());
    drop(child.0.stdin.take());
    child.0.wait().unwrap();

    // 200M held in a pipe under a 64M cap is stopped; 1M is not.
    let hold =
        |n: &str| env.run(&["exec", id, "--", "sh", "-c", &format!("head -c {n} /dev/zero | tail -c {n} | wc -c")]);
    assert_eq!(text(&hold("1M").stdout).trim(), "1048576");
    let big = hold("200M");
    assert_ne!(text(&big.stdout).trim(), "209715200", "the box held 200M under a 64M cap");
    cgroups
}
