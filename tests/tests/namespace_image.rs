//! Namespace boxes made from an image (docs/adr/0029-namespace-image-boxes.md),
//! live with bwrap, as root and rootless: the box is a place (what one exec
//! writes anywhere, and what it leaves running, is there for the next),
//! every joined command is confined like the first, the box cannot point
//! the host at another socket, `rm` leaves nothing, and bad input changes
//! nothing. Probes run inside the box and are checked from outside.

use std::path::{Path, PathBuf};
use std::process::Output;

use tinybox_core::images::minimal::{busybox_layer, save_archive};
use tinybox_tests::boxes::{BoxEnv, Principal};
use tinybox_tests::dns::DnsServer;
use tinybox_tests::egress::{answer, fetch_script, in_box, kill_proxy, proxy_dir, proxy_pid, running};
use tinybox_tests::netns::{HTTP_PORT, Service, TestHost};
use tinybox_tests::{have, skip};

const APPLETS: &[&str] = &[
    "sh", "cat", "echo", "sleep", "kill", "ls", "env", "grep", "chmod", "rm", "ln", "stat", "pwd", "id", "touch", "nc",
    "printf",
];

fn need(test: &str) -> bool {
    if !have("bwrap") {
        skip(test, "bwrap is not installed (bubblewrap)");
        return false;
    }
    if busybox_layer(&[]).is_none() {
        skip(test, "no static /bin/busybox here to build the test image from (busybox-static)");
        return false;
    }
    true
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Imports the test image as `tbtest/bb:1` into `env`'s store.
fn import(env: &BoxEnv) {
    let layer = busybox_layer(APPLETS).expect("checked");
    let config = serde_json::json!({
        "Env": ["PATH=/bin", "GREETING=from-the-image"],
        "WorkingDir": "/tmp",
        "Cmd": ["/bin/sh"],
    });
    let archive = env.store.path().join("bb.tar");
    std::fs::write(&archive, save_archive("tbtest/bb:1", &[layer], config)).expect("write archive");
    env.who.own(&archive);
    let out = env.run(&["image", "import", archive.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{} import: {}", env.who.label(), text(&out).1);
}

fn create(env: &BoxEnv, extra: &[&str]) -> String {
    let mut args = vec!["create", "--sandbox", "namespace", "--image", "tbtest/bb:1"];
    args.extend_from_slice(extra);
    let out = env.run(&args);
    assert!(out.status.success(), "{} create: {}", env.who.label(), text(&out).1);
    text(&out).0.trim().to_owned()
}

fn exec(env: &BoxEnv, id: &str, script: &str) -> (i32, String, String) {
    let out = env.run(&["exec", id, "--", "sh", "-c", script]);
    let (o, e) = text(&out);
    (out.status.code().unwrap_or(-1), o, e)
}

/// The box's own directory in the store: where its layer and socket are.
fn box_dir(env: &BoxEnv, id: &str) -> PathBuf {
    let base = env.store.path().join("drivers/namespace/workspaces");
    let found: Vec<PathBuf> = std::fs::read_dir(&base)
        .expect("workspaces dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(&format!("-{id}"))))
        .collect();
    assert_eq!(found.len(), 1, "one directory for {id} in {}: {found:?}", base.display());
    found.into_iter().next().expect("one")
}

/// Host processes whose command line names `dir`.
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    tinybox_tests::processes().into_iter().map(|(_, _, cmd)| cmd).filter(|c| c.contains(&needle)).collect()
}

#[test]
fn an_image_box_keeps_its_files_and_its_processes_between_execs_and_rm_leaves_nothing() {
    const TEST: &str =
        "namespace_image::an_image_box_keeps_its_files_and_its_processes_between_execs_and_rm_leaves_nothing";
    if !need(TEST) {
        return;
    }
    for who in Principal::all(TEST) {
        let env = BoxEnv::new(&who);
        import(&env);
        let id = create(&env, &[]);
        let label = who.label();

        // The image's config shapes the command: its Env and WorkingDir.
        let (code, out, err) = exec(&env, &id, "echo $GREETING; pwd; id -u");
        assert_eq!(code, 0, "{label}: {err}");
        assert_eq!(out.lines().collect::<Vec<_>>(), ["from-the-image", "/tmp", "0"], "{label}");

        // Written anywhere, a background process left running.
        let (code, _, err) =
            exec(&env, &id, "echo kept > /etc/written && sleep 1000 >/dev/null 2>&1 & echo $! > /root/sleeper");
        assert_eq!(code, 0, "{label}: {err}");
        let (code, out, err) = exec(&env, &id, "cat /etc/written && kill -0 $(cat /root/sleeper) && echo alive");
        assert_eq!(code, 0, "{label}: {err}");
        assert_eq!(out.lines().collect::<Vec<_>>(), ["kept", "alive"], "{label}");

        // From outside: the write is in the box's own layer, not the image's nor the host's.
        let dir = box_dir(&env, &id);
        assert_eq!(std::fs::read_to_string(dir.join("upper/etc/written")).expect("in the box's layer"), "kept\n");
        assert!(!Path::new("/etc/written").exists(), "{label}: the host's /etc is untouched");
        let sleepers: Vec<String> =
            tinybox_tests::processes().into_iter().map(|(_, _, c)| c).filter(|c| c.trim() == "sleep 1000").collect();
        assert!(!sleepers.is_empty(), "{label}: the box's sleep runs on the host");
        assert!(!processes_naming(&dir).is_empty(), "{label}: the box's bwrap holds it");

        let out = env.run(&["rm", &id]);
        assert!(out.status.success(), "{label} rm: {}", text(&out).1);
        assert!(!dir.exists(), "{label}: rm removes the box's directory, layer and all");
        assert_eq!(processes_naming(&dir), Vec::<String>::new(), "{label}: no process of the box is left");
    }
}

#[test]
fn every_joined_command_is_confined_like_the_first() {
    const TEST: &str = "namespace_image::every_joined_command_is_confined_like_the_first";
    if !need(TEST) {
        return;
    }
    for who in Principal::all(TEST) {
        let env = BoxEnv::new(&who);
        import(&env);
        let id = create(&env, &["--env", "BOXVAR=given"]);
        let label = who.label();
        // A first command, then a second that joins the same box.
        for round in 0..2 {
            let (code, out, err) = exec(&env, &id, "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status");
            assert_eq!(code, 0, "{label} round {round}: {err}");
            let fields: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
            assert!(fields.contains(&vec!["NoNewPrivs:", "1"]), "{label}: {out}");
            assert!(fields.contains(&vec!["Seccomp:", "2"]), "{label}: {out}");
            assert!(fields.contains(&vec!["CapEff:", "0000000000000000"]), "{label}: {out}");
            assert!(fields.contains(&vec!["CapBnd:", "0000000000000000"]), "{label}: {out}");
            // The environment is the image's, the box's and nothing of the agent's or the host's.
            let (_, out, _) = exec(&env, &id, "env");
            let names: std::collections::BTreeSet<&str> =
                out.lines().filter_map(|l| l.split_once('=')).map(|(k, _)| k).collect();
            let allowed: std::collections::BTreeSet<&str> =
                ["PATH", "GREETING", "BOXVAR", "PWD", "SHLVL", "HOME"].into();
            assert!(names.is_subset(&allowed), "{label}: unexpected variables {:?}", names.difference(&allowed));
            assert!(names.contains("BOXVAR") && names.contains("GREETING"), "{label}: {out}");
        }
        // The seccomp program refuses a setuid bit: nothing privileged lands in the box's layer.
        let (code, _, _) = exec(&env, &id, "touch /root/suid && chmod 4755 /root/suid");
        assert_ne!(code, 0, "{label}: chmod u+s must be refused");
        let dir = box_dir(&env, &id);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join("upper/root/suid")).expect("the file is in the layer").permissions(),
        );
        assert_eq!(mode & 0o6000, 0, "{label}: mode {mode:o}");
        env.run(&["rm", &id]);
    }
}

#[test]
fn a_box_cannot_point_the_host_at_another_socket() {
    const TEST: &str = "namespace_image::a_box_cannot_point_the_host_at_another_socket";
    if !need(TEST) {
        return;
    }
    let env = BoxEnv::new(&Principal::Me);
    import(&env);
    let id = create(&env, &[]);
    // A socket of the host's the box cannot see, but whose path it can write into a link.
    let host_dir = tempfile::tempdir().expect("temp dir");
    let decoy = host_dir.path().join("decoy.sock");
    let listener = std::os::unix::net::UnixListener::bind(&decoy).expect("bind decoy");
    listener.set_nonblocking(true).expect("non-blocking");
    let plant = format!("rm -f /run/tinybox/ctl/agent.sock && ln -s {} /run/tinybox/ctl/agent.sock", decoy.display());
    let (code, _, err) = exec(&env, &id, &plant);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = exec(&env, &id, "echo reached");
    assert_ne!(code, 0, "the exec must not reach anything through the link");
    assert!(err.contains("not a socket") || err.contains("cannot reach the box's agent"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host connected to the decoy: {other:?}"),
    }
    let out = env.run(&["rm", &id]);
    assert!(out.status.success(), "rm: {}", text(&out).1);
}

#[test]
fn an_unknown_image_is_one_line_and_changes_nothing() {
    const TEST: &str = "namespace_image::an_unknown_image_is_one_line_and_changes_nothing";
    if !need(TEST) {
        return;
    }
    let env = BoxEnv::new(&Principal::Me);
    import(&env);
    let listed = || text(&env.run(&["--json", "ls"])).0;
    let before = listed();
    // A local registry port nothing listens on: the pull is refused at once.
    let out = env.run(&["create", "--sandbox", "namespace", "--image", "127.0.0.1:9/tbtest/none:1"]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("127.0.0.1:9"), "names the image: {err}");
    assert_eq!(before, listed(), "no box recorded");
    let ws = env.store.path().join("drivers/namespace/workspaces");
    let left: Vec<_> = std::fs::read_dir(&ws)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(left, Vec::<PathBuf>::new(), "no box directory made");
}

#[test]
fn fork_stop_and_resume_carry_the_box_s_layer_and_a_box_without_an_image_is_refused_before_dispatch() {
    const TEST: &str = "namespace_image::fork_stop_and_resume_carry_the_box_s_layer_and_a_box_without_an_image_is_refused_before_dispatch";
    if !need(TEST) {
        return;
    }
    for who in Principal::all(TEST) {
        let env = BoxEnv::new(&who);
        import(&env);
        let label = who.label();
        let id = create(&env, &["--persistent"]);
        let (code, _, err) =
            exec(&env, &id, "echo kept > /etc/kept && rm /etc/passwd && mkdir -p /d && echo deep > /d/f");
        assert_eq!(code, 0, "{label}: {err}");

        // A fork has the layer as it is now, deletions included, and goes its own way.
        let out = env.run(&["fork", &id]);
        assert!(out.status.success(), "{label} fork: {}", text(&out).1);
        let fork = text(&out).0.trim().to_owned();
        let (code, out, err) =
            exec(&env, &fork, "cat /etc/kept /d/f; test -e /etc/passwd && echo passwd; echo fork > /etc/kept");
        assert_eq!(code, 0, "{label}: {err}");
        assert_eq!(out.lines().collect::<Vec<_>>(), ["kept", "deep"], "{label}: the whiteout came along");
        let (_, out, _) = exec(&env, &id, "cat /etc/kept");
        assert_eq!(out.trim(), "kept", "{label}: the fork's write is its own");

        // Stop and resume: the layer survives; the processes do not (a filesystem snapshot).
        let out = env.run(&["stop", &id]);
        assert!(out.status.success(), "{label} stop: {}", text(&out).1);
        assert!(processes_naming(&box_dir_gone_or(&env, &id)).is_empty(), "{label}: a stopped box runs nothing");
        let out = env.run(&["resume", &id]);
        assert!(out.status.success(), "{label} resume: {}", text(&out).1);
        let (code, out, err) = exec(&env, &id, "cat /etc/kept /d/f; test -e /etc/passwd || echo no-passwd");
        assert_eq!(code, 0, "{label}: {err}");
        assert_eq!(out.lines().collect::<Vec<_>>(), ["kept", "deep", "no-passwd"], "{label}");
        for b in [&id, &fork] {
            assert!(env.run(&["rm", b]).status.success(), "{label}: rm {b}");
        }
        // Their snapshots outlive them, and hold the image they were taken over.
        let out = env.run(&["image", "rm", "tbtest/bb:1"]);
        assert!(!out.status.success(), "{label}: an image a snapshot holds was removed");
        let out = env.run(&["prune"]);
        assert!(out.status.success(), "{label} prune: {}", text(&out).1);
        let out = env.run(&["image", "rm", "tbtest/bb:1"]);
        assert!(out.status.success(), "{label}: once no snapshot holds it, it goes: {}", text(&out).1);
        import(&env);

        // A box made without an image keeps nothing to take: refused by core, one line, nothing changed.
        let plain = {
            let out = env.run(&["create", "--sandbox", "namespace", "--persistent"]);
            assert!(out.status.success(), "{label}: {}", text(&out).1);
            text(&out).0.trim().to_owned()
        };
        let before = text(&env.run(&["--json", "snapshot", "ls"])).0;
        let out = env.run(&["snapshot", &plain]);
        let (_, err) = text(&out);
        assert!(!out.status.success(), "{label}: a plain namespace box took a snapshot");
        assert_eq!(err.trim().lines().count(), 1, "{label}: one line: {err}");
        assert!(err.contains("make the box from an image"), "{label}: says what to do: {err}");
        assert_eq!(before, text(&env.run(&["--json", "snapshot", "ls"])).0, "{label}: no snapshot recorded");
        env.run(&["rm", &plain]);
    }
}

/// The box's directory while it runs; after a stop, the path it had.
fn box_dir_gone_or(env: &BoxEnv, id: &str) -> PathBuf {
    let base = env.store.path().join("drivers/namespace/workspaces");
    std::fs::read_dir(&base)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(&format!("-{id}"))))
        .unwrap_or_else(|| base.join(format!("gone-{id}")))
}

#[test]
fn an_egress_image_box_sets_its_network_up_once_and_keeps_it_between_execs() {
    const TEST: &str = "namespace_image::an_egress_image_box_sets_its_network_up_once_and_keeps_it_between_execs";
    if !need(TEST) {
        return;
    }
    if !have("slirp4netns") {
        return skip(TEST, "slirp4netns is not installed");
    }
    let env = BoxEnv::new(&Principal::Me);
    import(&env);
    let id = create(&env, &["--network", "egress"]);
    // One network namespace for the box: the same one on every exec, with slirp4netns's tap in it.
    let netns = |env: &BoxEnv| {
        let (code, out, err) = exec(
            env,
            &id,
            "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | grep -c tap0; stat -L -c %i /proc/self/ns/net",
        );
        assert_eq!(code, 0, "{err}");
        out
    };
    let first = netns(&env);
    assert!(first.lines().any(|l| l.trim() == "1"), "the box has its tap device: {first}");
    assert_eq!(first, netns(&env), "a second exec joins the same network namespace");
    let dir = box_dir(&env, &id);
    assert!(env.run(&["rm", &id]).status.success());
    assert_eq!(processes_naming(&dir), Vec::<String>::new(), "nothing of the egress box is left");
}

#[test]
fn an_allowlist_image_box_reaches_what_it_lists_through_its_agent_and_sees_only_its_proxy_s_socket() {
    const TEST: &str = "namespace_image::an_allowlist_image_box_reaches_what_it_lists_through_its_agent_and_sees_only_its_proxy_s_socket";
    if !need(TEST) {
        return;
    }
    let Some(peer) = TestHost::serving("iallow", Service::Http) else {
        return skip(TEST, "cannot create a network namespace here (needs root and iproute2)");
    };
    let dns =
        DnsServer::start(&[("allowed.test", peer.addr.parse().unwrap()), ("other.test", peer.addr.parse().unwrap())]);
    for who in Principal::all(TEST) {
        let label = who.label();
        let env = BoxEnv::new(&who);
        import(&env);
        let allowed = format!("allowed.test:{HTTP_PORT}");
        // The test host's address is private: a name entry alone never reaches it (ADR 0020).
        let listed = format!("{}:{HTTP_PORT}", peer.addr);
        let args = [
            "create",
            "--sandbox",
            "namespace",
            "--image",
            "tbtest/bb:1",
            "--persistent",
            "--allow-host",
            &allowed,
            "--allow-host",
            &listed,
        ];
        let out = tinybox_tests::egress::run(&env, &dns, &args);
        assert!(out.status.success(), "{label} create: {}", text(&out).1);
        let id = text(&out).0.trim().to_owned();
        let fetch = |authority: &str| in_box(&env, &dns, &id, &fetch_script(authority, "/hello"));

        // No network but loopback; the allowed name through the agent's relay.
        let devices = in_box(&env, &dns, &id, "grep : /proc/net/dev");
        assert_eq!(devices.lines().count(), 1, "{label}: loopback only: {devices}");
        assert!(devices.trim_start().starts_with("lo:"), "{label}: {devices}");
        let got = fetch(&allowed);
        assert_eq!(
            answer(&got),
            ("HTTP/1.0 200 OK", "hello from the test host: GET /hello HTTP/1.1\n"),
            "{label}: {got}"
        );
        let other = fetch(&format!("other.test:{HTTP_PORT}"));
        assert!(other.starts_with("HTTP/1.1 403 "), "{label}: an unlisted name: {other}");
        // Of the proxy's directory the box sees its socket alone (not its lock, policy or logs).
        assert_eq!(in_box(&env, &dns, &id, "ls -A /run/tinybox/egress"), "proxy.sock\n", "{label}");

        // A proxy killed is started again by the next command, and the box
        // (which lives on) reaches the new one at the same path.
        let dir = proxy_dir(&env);
        let first = proxy_pid(&dir);
        kill_proxy(first);
        let got = fetch(&allowed);
        assert!(got.ends_with("hello from the test host: GET /hello HTTP/1.1\n"), "{label}: after the kill: {got}");
        let second = proxy_pid(&dir);
        assert_ne!(first, second, "{label}: a new proxy");

        // Stopped and resumed: the same list, through a new holder.
        for verb in ["stop", "resume"] {
            let out = tinybox_tests::egress::run(&env, &dns, &[verb, &id]);
            assert!(out.status.success(), "{label} {verb}: {}", text(&out).1);
        }
        let got = fetch(&allowed);
        assert!(got.ends_with("hello from the test host: GET /hello HTTP/1.1\n"), "{label}: after resume: {got}");

        let boxdir = box_dir(&env, &id);
        let proxy = proxy_pid(&dir);
        let out = env.run(&["rm", &id]);
        assert!(out.status.success(), "{label} rm: {}", text(&out).1);
        assert!(!running(proxy), "{label}: the proxy outlived rm");
        assert!(!dir.exists(), "{label}: rm left {}", dir.display());
        assert_eq!(processes_naming(&boxdir), Vec::<String>::new(), "{label}: no process of the box is left");
    }
}
