//! The microvm sandbox, live: real QEMU guests booted from the initramfs the
//! driver builds, under emulation (these machines' KVM cannot run a guest;
//! where it can, the same boxes run under KVM). Every check runs a command
//! inside the VM and checks its effect from outside.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::microvm::{Reaper, TCG, processes_under, vm_dirs};
use tinybox_tests::{need_microvm, read_line_within, skip};

const GUARD: Duration = Duration::from_secs(120);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run_ok(env: &BoxEnv, args: &[&str]) -> String {
    let out = env.run(args);
    assert!(out.status.success(), "{} {args:?}: {}", env.who.label(), text(&out.stderr));
    text(&out.stdout)
}

fn exec(env: &BoxEnv, id: &str, argv: &[&str]) -> Output {
    let mut args = vec!["exec", id, "--"];
    args.extend_from_slice(argv);
    env.run(&args)
}

fn exec_ok(env: &BoxEnv, id: &str, argv: &[&str]) -> String {
    let out = exec(env, id, argv);
    assert!(out.status.success(), "{} {argv:?} ended with {:?}: {}", env.who.label(), out.status, text(&out.stderr));
    text(&out.stdout)
}

/// The runtime directory of box `id`'s VM, from its record.
fn vm_dir(env: &BoxEnv, id: &str) -> PathBuf {
    let inspect: serde_json::Value = serde_json::from_str(&run_ok(env, &["--json", "inspect", id])).unwrap();
    PathBuf::from(inspect["workspace"]["handle"]["dir"].as_str().expect("the box record names its VM directory"))
}

/// Removes `id` and checks nothing of its VM is left: no process, no directory.
fn remove_and_check_clean(env: &BoxEnv, id: &str) {
    let dir = vm_dir(env, id);
    assert!(dir.is_dir(), "{}", dir.display());
    run_ok(env, &["rm", id]);
    assert!(!dir.exists(), "{}: rm left {}", env.who.label(), dir.display());
    assert_eq!(processes_under(&dir), vec![], "{}: rm left processes of {}", env.who.label(), dir.display());
}

fn env_for(who: &Principal) -> (BoxEnv, Reaper) {
    let env = BoxEnv::new(who);
    let reaper = Reaper(env.store.path().to_owned());
    (env, reaper)
}

#[test]
fn commands_run_byte_exact_with_their_status_streams_environment_and_directory() {
    need_microvm!("microvm_box::commands_run_byte_exact_with_their_status_streams_environment_and_directory");
    for who in
        Principal::all("microvm_box::commands_run_byte_exact_with_their_status_streams_environment_and_directory")
    {
        let (env, _reaper) = env_for(&who);
        let mut create = TCG.to_vec();
        create.extend(["-e", "BOX_VAR=from-the-box"]);
        let id = env.create(&create);

        // argv arrives byte for byte, with no shell in between.
        let tricky = ["a b", "'q'", ";", "$(id)", "new\nline", "", "ü"];
        let mut argv = vec!["printf", "%s|"];
        argv.extend(tricky);
        assert_eq!(exec_ok(&env, &id, &argv), "a b|'q'|;|$(id)|new\nline||ü|", "{}", who.label());

        // The environment is exactly the box's and the command's.
        let out = env.run(&["exec", "-e", "CMD_VAR=x y", &id, "--", "env"]);
        let mut vars: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
        vars.sort();
        assert_eq!(vars, ["BOX_VAR=from-the-box", "CMD_VAR=x y"], "{}: {}", who.label(), text(&out.stderr));

        // Exit codes and signals come back as the command's own.
        assert_eq!(exec(&env, &id, &["sh", "-c", "exit 7"]).status.code(), Some(7));
        let killed = exec(&env, &id, &["sh", "-c", "kill -9 $$"]);
        assert_eq!(killed.status.code(), Some(137), "{}: {}", who.label(), text(&killed.stderr));
        let missing = exec(&env, &id, &["no-such-program"]);
        assert_eq!(missing.status.code(), Some(127));
        assert!(text(&missing.stderr).contains("no-such-program"), "{}", text(&missing.stderr));

        // The working directory: /workspace, or --cwd; the workspace is shared both ways.
        assert_eq!(exec_ok(&env, &id, &["pwd"]), "/workspace\n");
        std::fs::create_dir(env.workspace.path().join("sub")).unwrap();
        who.own(&env.workspace.path().join("sub"));
        std::fs::write(env.workspace.path().join("sub/from-host"), "written on the host\n").unwrap();
        let out = env.run(&[
            "exec",
            "--cwd",
            "sub",
            &id,
            "--",
            "sh",
            "-c",
            "pwd; cat from-host; echo from the guest > made-inside",
        ]);
        assert_eq!(
            text(&out.stdout),
            "/workspace/sub\nwritten on the host\n",
            "{}: {}",
            who.label(),
            text(&out.stderr)
        );
        assert_eq!(std::fs::read_to_string(env.workspace.path().join("sub/made-inside")).unwrap(), "from the guest\n");

        // stdin: a binary stream through cat comes back identical.
        let input: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut child =
            env.cli(&["exec", &id, "--", "cat"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feed = input.clone();
        let writer = std::thread::spawn(move || stdin.write_all(&feed));
        let mut echoed = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut echoed).unwrap();
        writer.join().unwrap().unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(echoed.len(), input.len(), "{}", who.label());
        assert!(echoed == input, "{}: cat changed the bytes", who.label());

        // Output streams while the command runs: the first line arrives
        // before the command can end (it waits for a line we send after).
        let mut child = env
            .cli(&["exec", &id, "--", "sh", "-c", "echo first; read reply; echo got $reply"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (line, mut rest) = read_line_within(std::io::BufReader::new(child.stdout.take().unwrap()), GUARD);
        assert_eq!(line, "first\n");
        child.stdin.take().unwrap().write_all(b"second\n").unwrap();
        let mut tail = String::new();
        rest.read_to_string(&mut tail).unwrap();
        assert_eq!(tail, "got second\n");
        assert!(child.wait().unwrap().success());

        // Denied network: no interface but loopback. Limits: what the guest sees.
        assert_eq!(exec_ok(&env, &id, &["ls", "/sys/class/net"]), "lo\n", "{}", who.label());
        let meminfo = exec_ok(&env, &id, &["cat", "/proc/meminfo"]);
        let total_kib: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("MemTotal");
        assert!(
            total_kib <= 256 * 1024,
            "{}: the guest sees {total_kib} KiB, more than the 256 MiB asked",
            who.label()
        );
        assert!(total_kib > 128 * 1024, "{}: the guest sees only {total_kib} KiB", who.label());
        assert_eq!(exec_ok(&env, &id, &["nproc"]), "1\n");
        // A command that holds more than the guest has is what the OOM
        // killer stops; the agent serves the next command at once.
        let out = env.run(&["exec", &id, "--", "sh", "-c", "head -c 600000000 /dev/zero | tail -c 600000000 | wc -c"]);
        assert_ne!(text(&out.stdout).trim(), "600000000", "{}: held more than the guest has", who.label());
        assert_eq!(exec_ok(&env, &id, &["cat", "/proc/self/oom_score_adj"]), "0\n", "commands are killable");
        let console = std::fs::read_to_string(vm_dir(&env, &id).join("console.log")).unwrap();
        assert!(!console.contains("the agent exited"), "{}: the OOM killer took the agent: {console}", who.label());
        assert_eq!(exec_ok(&env, &id, &["cat", "/sys/fs/cgroup/box/pids.max"]), "512\n", "the default pids cap");

        // The record says what this box is: emulated, so never Hardware.
        let inspect: serde_json::Value = serde_json::from_str(&run_ok(&env, &["--json", "inspect", &id])).unwrap();
        assert_eq!(inspect["workspace"]["isolation"], "kernel", "{inspect}");
        assert!(inspect.to_string().contains("EMULATED (TCG)"), "{inspect}");

        remove_and_check_clean(&env, &id);
        assert_eq!(vm_dirs(&env), Vec::<PathBuf>::new());
    }
}

#[test]
fn several_boxes_run_at_once_and_nothing_outside_the_workspace_survives_the_vm() {
    need_microvm!("microvm_box::several_boxes_run_at_once_and_nothing_outside_the_workspace_survives_the_vm");
    let (env, _reaper) = env_for(&Principal::Me);
    let ids: Vec<String> = std::thread::scope(|s| {
        let makers: Vec<_> = (0..2).map(|_| s.spawn(|| env.create(TCG))).collect();
        makers.into_iter().map(|m| m.join().unwrap()).collect()
    });
    assert_ne!(ids[0], ids[1]);
    // Each writes outside /workspace at once; each reads back only its own.
    std::thread::scope(|s| {
        for id in &ids {
            let env = &env;
            s.spawn(move || {
                let out = exec_ok(env, id, &["sh", "-c", "echo $0 > /root/who; cat /root/who", id]);
                assert_eq!(out, format!("{id}\n"));
            });
        }
    });
    remove_and_check_clean(&env, &ids[0]);
    let again = env.create(TCG);
    let out = exec(&env, &again, &["cat", "/root/who"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a file written outside /workspace survived rm + create: {}",
        text(&out.stdout)
    );
    assert_eq!(exec_ok(&env, &ids[1], &["cat", "/root/who"]), format!("{}\n", ids[1]), "the other VM is untouched");
    for id in [&again, &ids[1]] {
        remove_and_check_clean(&env, id);
    }
    assert_eq!(processes_under(env.store.path()), vec![]);
}

#[test]
fn a_killed_cli_leaves_the_vm_usable_and_a_vm_killed_behind_tinybox_s_back_is_reported_and_removable() {
    need_microvm!(
        "microvm_box::a_killed_cli_leaves_the_vm_usable_and_a_vm_killed_behind_tinybox_s_back_is_reported_and_removable"
    );
    let (env, _reaper) = env_for(&Principal::Me);
    let id = env.create(TCG);
    let mut child = env
        .cli(&["exec", &id, "--", "sh", "-c", "echo started; exec sleep 1000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, _rest) = read_line_within(std::io::BufReader::new(child.stdout.take().unwrap()), GUARD);
    assert_eq!(line, "started\n");
    child.kill().unwrap();
    child.wait().unwrap();
    // The guest ends the orphaned command once its session is gone; poll (bounded) until it has.
    let deadline = Instant::now() + GUARD;
    loop {
        let out = exec_ok(&env, &id, &["sh", "-c", "pgrep -x sleep || echo none"]);
        if out == "none\n" {
            break;
        }
        assert!(Instant::now() < deadline, "the command of the killed CLI still runs in the guest: {out}");
    }
    assert_eq!(exec_ok(&env, &id, &["echo", "still usable"]), "still usable\n");

    // Now the VM dies behind tinybox's back.
    let dirs = vm_dirs(&env);
    assert_eq!(dirs.len(), 1);
    let pid: i32 = std::fs::read_to_string(dirs[0].join("qemu.pid")).unwrap().trim().parse().unwrap();
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), rustix::process::Signal::KILL).unwrap();
    let deadline = Instant::now() + GUARD;
    while !processes_under(&dirs[0]).is_empty() {
        assert!(Instant::now() < deadline, "QEMU survived SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
    let inspect: serde_json::Value = serde_json::from_str(&run_ok(&env, &["--json", "inspect", &id])).unwrap();
    assert_eq!(inspect["state"], "gone", "{inspect}");
    let out = exec(&env, &id, &["true"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("is not running"), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr).lines().count(), 1, "one clear line: {}", text(&out.stderr));
    remove_and_check_clean(&env, &id);
    assert_eq!(run_ok(&env, &["--json", "ls"]).trim(), "[]");
}

#[path = "microvm_box/egress.rs"]
mod egress;
#[path = "microvm_box/ports.rs"]
mod ports;
#[path = "microvm_box/privilege.rs"]
mod privilege;
#[path = "microvm_box/refusals.rs"]
mod refusals;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reaper_destroys_an_expired_vm_and_everything_it_ran() {
    need_microvm!("microvm_box::the_reaper_destroys_an_expired_vm_and_everything_it_ran");
    use std::sync::Arc;
    use tinybox_core::Tinybox;
    use tinybox_core::clock::ManualClock;
    use tinybox_core::driver::Timeouts;
    use tinybox_core::model::{BoxSpec, HostName, Lifecycle, Placement, SandboxName};
    use tinybox_core::store::MemoryStore;

    let state = tempfile::tempdir().unwrap();
    let _reaper = Reaper(state.path().to_owned());
    let mut config = tinybox_tests::driver_config(
        &[],
        Timeouts { handshake: Duration::from_secs(10), operation: GUARD, cancel: Duration::from_secs(10) },
    );
    config.state_dir = Some(state.path().join("drivers"));
    let clock = Arc::new(ManualClock::new(1_000));
    let tb = Tinybox::with_parts(Arc::new(MemoryStore::new()), None, clock.clone(), config).unwrap();
    let placement = Placement::new(HostName::local(), SandboxName::new("microvm").unwrap());
    let mut spec = BoxSpec::new(placement);
    spec.options.insert("accel".into(), "tcg".into());
    spec.resources.cpus = Some(1.0);
    spec.resources.memory_bytes = Some(256 << 20);
    spec.lifecycle = Lifecycle::ephemeral(Duration::from_secs(60));
    let info = tb.create(spec).await.unwrap();
    assert_eq!(processes_under(state.path()).len(), 1, "one QEMU for the box");

    clock.advance(59);
    assert!(tb.reap().await.unwrap().is_empty(), "nothing expires early");
    assert_eq!(processes_under(state.path()).len(), 1);
    clock.advance(2);
    let reaped = tb.reap().await.unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].id, info.id);
    assert_eq!(reaped[0].error, None);
    assert_eq!(processes_under(state.path()), vec![], "the expired VM is stopped");
    let vms = state.path().join("drivers/microvm/vms");
    assert_eq!(std::fs::read_dir(&vms).unwrap().count(), 0, "its runtime files are gone");
    assert!(tb.list().unwrap().is_empty());
    tb.close().await;
}

#[test]
fn escape_probes_in_the_guest_find_no_host_secret_descriptor_file_or_process_and_cannot_kill_the_vm() {
    need_microvm!(
        "microvm_box::escape_probes_in_the_guest_find_no_host_secret_descriptor_file_or_process_and_cannot_kill_the_vm"
    );
    let (env, _reaper) = env_for(&Principal::Me);
    env.install_probe();
    let id = env.create(TCG);
    let probe = |args: &[&str]| -> Output {
        let mut argv = vec!["/workspace/escape"];
        argv.extend_from_slice(args);
        exec(&env, &id, &argv)
    };
    let value = |out: &Output, name: &str| tinybox_tests::boxes::probe_value(&out.stdout, name);

    // The caller's environment holds a token; nothing in the guest sees it.
    let (head, tail) = ("tbx-secret-", "4f1d9c");
    let out = env
        .cli(&["exec", &id, "--", "/workspace/escape", "secret", head, tail])
        .env("TINYBOX_TEST_TOKEN", format!("{head}{tail}"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(value(&out, "secret").as_deref(), Some("absent"), "{}", text(&out.stdout));

    // Only the command's own stdio: none of the agent's ports or files.
    assert_eq!(value(&probe(&["fds"]), "fds").as_deref(), Some("0,1,2,"));

    // Its own kernel: another boot, and none of the host's files.
    let host_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let guest_boot = exec_ok(&env, &id, &["cat", "/proc/sys/kernel/random/boot_id"]);
    assert_ne!(guest_boot, host_boot, "the guest runs the host's kernel");
    let marker = tempfile::NamedTempFile::new().unwrap();
    let out = exec(&env, &id, &["ls", marker.path().to_str().unwrap()]);
    assert!(!out.status.success(), "a host file outside the workspace is visible in the guest");
    let mounts = exec_ok(&env, &id, &["cat", "/proc/mounts"]);
    let shared: Vec<&str> = mounts.lines().filter(|l| l.contains(" 9p ")).collect();
    assert_eq!(shared.len(), 1, "{mounts}");
    assert!(shared[0].starts_with("ws /workspace 9p "), "{mounts}");

    // The guest's root kills every process it can; the host's are untouched
    // and the VM still answers (its init starts the agent again).
    let mut sentinel = tinybox_tests::KillOnDrop(
        std::process::Command::new("sleep").arg("600").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap(),
    );
    let host_pid = sentinel.0.id().to_string();
    let out = probe(&["signal", &host_pid]);
    assert_ne!(value(&out, "kill0").as_deref(), Some("ok"), "{}", text(&out.stdout));
    let _ = probe(&["killall"]);
    assert!(sentinel.0.try_wait().unwrap().is_none(), "a host process died when the guest killed everything");
    let deadline = Instant::now() + GUARD;
    loop {
        let out = exec(&env, &id, &["echo", "alive"]);
        if out.status.success() {
            assert_eq!(text(&out.stdout), "alive\n");
            break;
        }
        assert!(Instant::now() < deadline, "the VM never answered again: {}", text(&out.stderr));
    }
    let console = std::fs::read_to_string(vm_dir(&env, &id).join("console.log")).unwrap();
    assert!(console.contains("the agent exited"), "the probe did not reach the agent: {console}");
    drop(sentinel);
    remove_and_check_clean(&env, &id);
}

#[test]
fn listing_drivers_writes_nothing_in_the_cache_or_the_store() {
    need_microvm!("microvm_box::listing_drivers_writes_nothing_in_the_cache_or_the_store");
    let tmp = tempfile::tempdir().unwrap();
    let (home, cache, store) = (tmp.path().join("home"), tmp.path().join("cache"), tmp.path().join("store"));
    std::fs::create_dir(&home).unwrap();
    let out = std::process::Command::new(tinybox_tests::bin("tinybox"))
        .arg("--store")
        .arg(&store)
        .args(["--json", "drivers"])
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", &cache)
        .env_remove("TINYBOX_CACHE_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", tmp.path())
        .env("TINYBOX_DRIVER_PATH", "")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let drivers: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let vm = drivers.as_array().unwrap().iter().find(|d| d["name"] == "microvm").unwrap().clone();
    assert_eq!(vm["health"]["ok"], true, "{vm}");
    // No verdict was recorded in this cache, so nothing proves KVM: never claim it.
    assert_eq!(vm["capabilities"]["isolation"], "kernel", "{vm}");
    assert!(!cache.exists(), "the handshake made {}", cache.display());
    // Core makes each driver's (empty) state directory before its handshake
    // (driver protocol 5.1); no file may appear anywhere.
    let mut files = Vec::new();
    let mut todo = vec![tmp.path().to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                todo.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    assert_eq!(files, Vec::<PathBuf>::new(), "a listing wrote files");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_killed_midway_leaves_a_vm_the_driver_finds_from_the_box_id_alone() {
    need_microvm!("microvm_box::a_create_killed_midway_leaves_a_vm_the_driver_finds_from_the_box_id_alone");
    use tinybox_core::driver::{Drivers, Timeouts};
    use tinybox_core::model::{BoxId, HostName, SandboxName};
    use tinybox_sdk::protocol::BoxRef;

    let (env, _reaper) = env_for(&Principal::Me);
    let mut create = vec!["create"];
    create.extend_from_slice(TCG);
    let mut child =
        tinybox_tests::KillOnDrop(env.cli(&create).stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap());
    // Killed once a QEMU of the box runs.
    let deadline = Instant::now() + GUARD;
    let dir = loop {
        if let Some(dir) = vm_dirs(&env).into_iter().find(|d| !processes_under(d).is_empty()) {
            break dir;
        }
        assert!(child.0.try_wait().unwrap().is_none(), "the create ended before its VM started");
        assert!(Instant::now() < deadline, "no VM directory with a QEMU within {GUARD:?}");
        tokio::task::yield_now().await;
    };
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(!processes_under(&dir).is_empty(), "QEMU outlives the killed create: {}", dir.display());
    let ls: serde_json::Value = serde_json::from_str(&run_ok(&env, &["--json", "ls"])).unwrap();
    assert_eq!(ls[0]["phase"], "creating", "{ls}");
    assert!(ls[0]["workspace"].is_null(), "an interrupted create's record has no handle: {ls}");
    assert_eq!(dir.file_name().unwrap(), "box-0", "the VM directory is named after the box");

    // What `tinybox rm` needs of the driver: destroy from the identifier, with no handle.
    let mut config = tinybox_tests::driver_config(
        &[],
        Timeouts { handshake: Duration::from_secs(10), operation: GUARD, cancel: Duration::from_secs(10) },
    );
    config.state_dir = Some(env.store.path().join("drivers"));
    let drivers = Drivers::new(config);
    let link = drivers.sandbox(&SandboxName::new("microvm").unwrap(), &HostName::local()).await.unwrap();
    link.destroy(BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: serde_json::Value::Null }).await.unwrap();
    drivers.close().await;
    assert_eq!(processes_under(&dir), vec![], "QEMU of the interrupted create still runs");
    assert!(!dir.exists(), "{} is still there", dir.display());
    run_ok(&env, &["rm", "box-0"]);
    assert_eq!(run_ok(&env, &["--json", "ls"]).trim(), "[]");
}
