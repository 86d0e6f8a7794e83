//! What the microvm sandbox refuses, live: a box without working KVM unless
//! emulation is asked for, a box placed on another machine, more vCPUs than
//! the host has, and a comma in a path that would rewrite QEMU's options.

use super::*;

#[test]
fn without_working_kvm_a_box_is_refused_unless_emulation_is_asked_for() {
    need_microvm!("microvm_box::refusals::without_working_kvm_a_box_is_refused_unless_emulation_is_asked_for");
    let principals =
        Principal::all("microvm_box::refusals::without_working_kvm_a_box_is_refused_unless_emulation_is_asked_for");
    // The unprivileged user cannot open /dev/kvm here, so KVM is unusable
    // for it on any machine; for this user it depends on the machine.
    for who in principals {
        let (env, _reaper) = env_for(&who);
        let drivers: serde_json::Value = serde_json::from_str(&run_ok(&env, &["drivers", "--json"])).unwrap();
        let vm = drivers.as_array().unwrap().iter().find(|d| d["name"] == "microvm").unwrap().clone();
        let detail = vm["health"]["detail"].as_str().unwrap_or_default().to_owned();
        if detail.starts_with("KVM:") {
            assert_eq!(vm["capabilities"]["isolation"], "hardware", "{vm}");
            continue;
        }
        // Known to fail, or not probed yet (a handshake never probes; the
        // first create that needs KVM does).
        assert!(
            (detail.contains("no KVM") || detail.contains("KVM not yet probed")) && detail.contains("--accel tcg"),
            "{}: {detail}",
            who.label()
        );
        assert_eq!(vm["capabilities"]["isolation"], "kernel", "without KVM the driver never declares hardware: {vm}");
        let ws = env.workspace.path().to_str().unwrap().to_owned();
        for extra in [&[][..], &["--accel", "kvm"][..]] {
            let mut args = vec!["create", "--sandbox", "microvm", "--workspace", &ws];
            args.extend_from_slice(extra);
            let out = env.run(&args);
            let err = text(&out.stderr);
            assert!(!out.status.success(), "{}: {args:?} made a box without KVM", who.label());
            assert_eq!(err.lines().count(), 1, "{}: one clear line: {err}", who.label());
            assert!(err.contains("kvm") || err.contains("KVM"), "{err}");
            if extra.is_empty() {
                assert!(err.contains("--accel tcg"), "the error says how to opt in: {err}");
            }
            assert_eq!(run_ok(&env, &["--json", "ls"]).trim(), "[]", "a refused create leaves no box");
            assert_eq!(vm_dirs(&env), Vec::<PathBuf>::new());
        }
        // An image boots from this store's images (ADR 0036), pulled first when
        // missing: one that cannot be had is refused by name.
        let out =
            env.run(&["create", "--sandbox", "microvm", "--accel", "tcg", "--image", "127.0.0.1:9/nowhere/busybox:1"]);
        assert!(!out.status.success());
        assert!(text(&out.stderr).contains("cannot reach registry 127.0.0.1:9"), "{}", text(&out.stderr));
        assert_eq!(vm_dirs(&env), Vec::<PathBuf>::new());
        let out = env.run(&["create", "--sandbox", "microvm", "--accel", "tcg", "--cpus", "0.5", "--workspace", &ws]);
        assert!(!out.status.success());
        assert!(text(&out.stderr).contains("not a whole number of vCPUs"), "{}", text(&out.stderr));

        // The operator's opt-in can live in the driver's configuration instead.
        let config = env.store.path().join("drivers/microvm/config.json");
        std::fs::write(&config, r#"{"accel": "fast"}"#).unwrap();
        who.own(&config);
        let drivers: serde_json::Value = serde_json::from_str(&run_ok(&env, &["drivers", "--json"])).unwrap();
        let vm = drivers.as_array().unwrap().iter().find(|d| d["name"] == "microvm").unwrap().clone();
        assert_eq!(vm["health"]["ok"], false, "{vm}");
        let why = vm["health"]["detail"].as_str().unwrap_or_default();
        assert!(why.contains("config.json") && why.contains("\"fast\" is not kvm or tcg"), "{why}");
        std::fs::write(&config, r#"{"accel": "tcg"}"#).unwrap();
        let id = env.create(&["--sandbox", "microvm", "--cpus", "1", "--memory", "256M"]);
        let inspect = run_ok(&env, &["--json", "inspect", &id]);
        assert!(inspect.contains("EMULATED (TCG)"), "{inspect}");
        remove_and_check_clean(&env, &id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_placed_on_another_machine_is_refused_not_run_here() {
    need_microvm!("microvm_box::refusals::a_box_placed_on_another_machine_is_refused_not_run_here");
    use std::sync::Arc;
    use tinybox_core::Tinybox;
    use tinybox_core::clock::ManualClock;
    use tinybox_core::hosts::HostEntry;
    use tinybox_core::model::{BoxSpec, HostName, Placement, SandboxName};
    use tinybox_core::store::MemoryStore;

    let drivers = tempfile::tempdir().unwrap();
    tinybox_tests::install_test_driver(drivers.path(), "elsewhere");
    let state = tempfile::tempdir().unwrap();
    let _reaper = Reaper(state.path().to_owned());
    let mut config = tinybox_tests::driver_config(&[drivers.path().to_owned()], tinybox_tests::short_timeouts());
    config.state_dir = Some(state.path().join("drivers"));
    config.hosts.insert(
        HostName::new("far").unwrap(),
        HostEntry { driver: "elsewhere".into(), config: serde_json::Value::Null, inner: None },
    );
    let store = Arc::new(MemoryStore::new());
    let tb = Tinybox::with_parts(store, None, Arc::new(ManualClock::new(1_000)), config).unwrap();
    let mut spec = BoxSpec::new(Placement::new(HostName::new("far").unwrap(), SandboxName::new("microvm").unwrap()));
    spec.options.insert("accel".into(), "tcg".into());
    let err = tb.create(spec).await.unwrap_err();
    assert!(err.to_string().contains("this box's host is another machine"), "{err}");
    assert!(tb.list().unwrap().is_empty(), "a refused create leaves no box");
    assert_eq!(processes_under(state.path()), vec![], "no VM was started here for a box placed elsewhere");
    tb.close().await;
}

#[test]
fn a_comma_in_the_workspace_or_store_path_never_rewrites_qemu_s_options() {
    need_microvm!("microvm_box::refusals::a_comma_in_the_workspace_or_store_path_never_rewrites_qemu_s_options");
    for who in
        Principal::all("microvm_box::refusals::a_comma_in_the_workspace_or_store_path_never_rewrites_qemu_s_options")
    {
        // Two siblings: the workspace asked for, named `a,path=<other>`, and
        // <other>, holding a secret. Unescaped, QEMU read the name as two
        // `path=` keys and shared the last: <other>.
        let parent = tempfile::Builder::new().prefix("tbx-comma").tempdir().unwrap();
        let other = parent.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("B"), "secret\n").unwrap();
        let ws = PathBuf::from(format!("{}/a,path={}", parent.path().display(), other.display()));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("A"), "asked for\n").unwrap();
        who.own_tree(parent.path());
        // Then the store's path holds a comma too: every socket, log and pid
        // file of the VM is under it.
        for store_prefix in ["tbx-store", "st,path=x"] {
            let store = tempfile::Builder::new().prefix(store_prefix).tempdir().unwrap();
            who.own(store.path());
            let env = BoxEnv { who: who.clone(), store, workspace: tempfile::tempdir().unwrap() };
            let _reaper = Reaper(env.store.path().to_owned());
            let label = format!("{} with store {}", who.label(), env.store.path().display());

            let mut create = vec!["create", "--workspace", ws.to_str().unwrap()];
            create.extend_from_slice(TCG);
            let id = run_ok(&env, &create).trim().to_owned();
            assert_eq!(exec_ok(&env, &id, &["ls", "/workspace"]), "A\n", "{label}: the box got another directory");
            assert_eq!(exec_ok(&env, &id, &["cat", "/workspace/A"]), "asked for\n");
            exec_ok(&env, &id, &["sh", "-c", "echo from the box > /workspace/C"]);
            assert_eq!(std::fs::read_to_string(ws.join("C")).unwrap(), "from the box\n");
            assert!(!other.join("C").exists(), "{label}: the box wrote into the other directory");
            remove_and_check_clean(&env, &id);
            std::fs::remove_file(ws.join("C")).unwrap();
        }
    }
}

#[test]
fn more_vcpus_than_the_host_has_are_refused_under_emulation_at_once() {
    need_microvm!("microvm_box::refusals::more_vcpus_than_the_host_has_are_refused_under_emulation_at_once");
    let (env, _reaper) = env_for(&Principal::Me);
    let host = std::thread::available_parallelism().map_or(1, usize::from);
    let cpus = (host + 1).max(64).to_string();
    let started = Instant::now();
    let out = env.run(&["create", "--sandbox", "microvm", "--accel", "tcg", "--cpus", &cpus, "--memory", "256M"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{cpus} vCPUs on a {host}-CPU host were accepted");
    assert!(err.contains(&format!("cpu limit {cpus} is more than the {host} CPUs this host has")), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A bound on a refusal, not a speed claim: accepted, such a box took 80 s to boot.
    assert!(started.elapsed() < Duration::from_secs(30), "the refusal took {:?}", started.elapsed());
    assert_eq!(run_ok(&env, &["--json", "ls"]).trim(), "[]");
    assert_eq!(vm_dirs(&env), Vec::<PathBuf>::new());
    assert_eq!(processes_under(env.store.path()), vec![]);
}
