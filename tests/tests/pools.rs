//! Warm pools, live: boxes made ahead on namespace, docker, microvm (under
//! emulation) and an ssh host, handed out once each, bound at hand-out,
//! hidden from `ls` while they wait, refilled by the daemon.

use std::time::{Duration, Instant};

use tinybox_tests::docker::{self, Namespace, docker};
use tinybox_tests::sshd::Sshd;
use tinybox_tests::{Cli, have, skip};

const GUARD: Duration = Duration::from_secs(120);

fn ok(cli: &Cli, args: &[&str]) -> (String, String) {
    let (code, out, err) = cli.run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    (out, err)
}

fn ids(cli: &Cli, all: bool) -> Vec<String> {
    let args: &[&str] = if all { &["--json", "ls", "--all"] } else { &["--json", "ls"] };
    let boxes: Vec<serde_json::Value> = serde_json::from_str(&ok(cli, args).0).unwrap();
    boxes.iter().map(|b| b["id"].as_str().unwrap().to_owned()).collect()
}

fn pool(cli: &Cli, name: &str) -> serde_json::Value {
    let pools: Vec<serde_json::Value> = serde_json::from_str(&ok(cli, &["--json", "pool", "ls"]).0).unwrap();
    pools.into_iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no pool {name}"))
}

/// Takes a box from `name`, checks it runs commands with the taker's env,
/// and returns it.
fn take_and_use(cli: &Cli, name: &str) -> String {
    let (code, out, err) = cli.run(&["create", "--pool", name, "--env", "TAKER=yes", "--ttl", "30m"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("taken from pool {name}")), "{err}");
    let id = out.trim().to_owned();
    let (out, _) = ok(cli, &["exec", &id, "--", "sh", "-c", "echo $TAKER"]);
    assert_eq!(out, "yes\n");
    id
}

#[test]
fn a_namespace_pool_hands_each_box_out_once_bound_then_and_hidden_until() {
    if !have("bwrap") {
        return skip("pools::a_namespace_pool_hands_each_box_out_once_bound_then_and_hidden_until", "needs bwrap");
    }
    let cli = Cli::new();
    let (_, err) = ok(&cli, &["pool", "create", "ns", "--size", "2", "--sandbox", "namespace", "--pids", "64"]);
    assert!(err.contains("pool ns: made 2"), "{err}");
    assert!(ids(&cli, false).is_empty(), "waiting boxes are nobody's: {:?}", ids(&cli, false));
    let waiting = ids(&cli, true);
    assert_eq!(waiting.len(), 2);
    assert_eq!((pool(&cli, "ns")["ready"].as_u64(), pool(&cli, "ns")["filling"].as_u64()), (Some(2), Some(0)));

    // Four takers at once for two boxes: two get one each, two are made cold.
    let takers: Vec<_> = (0..4)
        .map(|_| {
            cli.cmd(&["create", "--pool", "ns"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut taken = Vec::new();
    let mut cold = Vec::new();
    for t in takers {
        let out = t.wait_with_output().unwrap();
        let (id, err) = (String::from_utf8_lossy(&out.stdout).trim().to_owned(), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{err}");
        if err.contains("taken from pool ns") {
            taken.push(id);
        } else {
            assert!(err.contains("pool ns had no box ready: created cold"), "{err}");
            cold.push(id);
        }
    }
    taken.sort();
    assert_eq!(taken, waiting, "each waiting box handed out exactly once");
    assert_eq!(cold.len(), 2);
    assert_eq!(ids(&cli, false).len(), 4);

    // Bound at hand-out: a box taken now has the taker's ttl and env, and
    // a cold one for this pool has the pool's limits.
    let (_, _) = ok(&cli, &["pool", "fill"]);
    let id = take_and_use(&cli, "ns");
    let info: serde_json::Value = serde_json::from_str(&ok(&cli, &["--json", "inspect", &id]).0).unwrap();
    let record = if info.get("box").is_some() { &info["box"] } else { &info };
    let text = record.to_string();
    assert!(text.contains("\"ttl_secs\":1800"), "the taker's ttl: {text}");
    let cold_info = ok(&cli, &["--json", "inspect", &cold[0]]).0;
    assert!(cold_info.contains("\"pids\": 64") || cold_info.contains("\"pids\":64"), "{cold_info}");
}

#[test]
fn a_request_that_differs_from_the_pool_or_an_empty_pool_is_refused_with_pool_only_and_changes_nothing() {
    let cli = Cli::new();
    ok(&cli, &["pool", "create", "p", "--size", "1", "--sandbox", "passthrough", "--no-fill"]);
    let before = cli.store_bytes();
    let (code, out, err) = cli.run(&["create", "--pool", "p", "--pool-only"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.contains("pool p has no box ready") && err.contains("tinybox daemon start"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(cli.store_bytes(), before, "a refused take changed the store");

    ok(&cli, &["pool", "fill", "p"]);
    let (code, _, err) = cli.run(&["create", "--pool", "p", "--pool-only", "--pids", "32", "--network", "egress"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("differs from pool p's in network, pids"), "{err}");
    let (code, out, err) = cli.run(&["create", "--pool", "p", "--namespace", "elsewhere"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("differs from pool p's in namespace: created cold"), "{err}");
    assert_eq!(pool(&cli, "p")["ready"], 1, "a cold create took a pooled box");
    assert!(ids(&cli, false).contains(&out.trim().to_owned()));

    let (code, _, err) = cli.run(&["create", "--pool", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("no pool named nope"), "{err}");
    let (code, _, err) = cli.run(&["pool", "create", "q", "--size", "0", "--sandbox", "passthrough"]);
    assert_eq!(code, 1);
    assert!(err.contains("size is 1 to 64, not 0"), "{err}");
    let (code, _, err) = cli.run(&["pool", "create", "q", "--size", "1", "--persistent"]);
    assert_eq!(code, 1);
    assert!(err.contains("pools serve ephemeral boxes"), "{err}");

    // pool rm takes the waiting box with it; boxes handed out stay.
    let (_, err) = ok(&cli, &["pool", "rm", "p"]);
    assert!(err.contains("with 1 waiting boxes"), "{err}");
    assert_eq!(ids(&cli, true), ids(&cli, false));
}

#[test]
fn each_hand_out_says_how_many_boxes_are_left() {
    let cli = Cli::new();
    ok(&cli, &["pool", "create", "p", "--size", "3", "--sandbox", "passthrough"]);
    for left in [2, 1, 0] {
        let (_, err) = ok(&cli, &["create", "--pool", "p"]);
        assert!(err.contains(&format!("taken from pool p ({left} left; no daemon refills it")), "{err}");
    }
    let (_, err) = ok(&cli, &["create", "--pool", "p"]);
    assert!(err.contains("pool p had no box ready: created cold"), "{err}");
}

#[test]
fn every_create_from_a_pool_says_in_its_json_what_it_got_and_that_no_daemon_refills_it() {
    let cli = Cli::new();
    ok(&cli, &["pool", "create", "j", "--size", "1", "--sandbox", "passthrough"]);
    let from_pool = |cli: &Cli| {
        let (out, err) = ok(cli, &["--json", "create", "--pool", "j"]);
        assert!(err.is_empty(), "--json says it in the document, not on stderr: {err}");
        let created: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(created["id"].is_string(), "{created}");
        created["from_pool"].clone()
    };
    let taken = from_pool(&cli);
    assert_eq!(
        (&taken["result"], &taken["pool"], &taken["left"], &taken["refilled"]),
        (&"taken".into(), &"j".into(), &0.into(), &false.into()),
        "{taken}"
    );
    let cold = from_pool(&cli);
    assert_eq!((&cold["result"], &cold["refilled"]), (&"empty".into(), &false.into()), "{cold}");
    let note = cold["note"].as_str().unwrap();
    assert!(
        note.contains("created cold") && note.contains("no daemon refills it") && note.contains("tinybox pool fill j"),
        "{note}"
    );
}

#[test]
fn a_box_waiting_in_a_pool_takes_no_exec_or_copy_until_it_is_handed_out() {
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    ok(&cli, &["pool", "create", "w", "--size", "1", "--sandbox", "passthrough"]);
    let waiting = ids(&cli, true).pop().expect("a waiting box");
    let planted = dir.path().join("planted");
    std::fs::write(&planted, "from before the hand-out").unwrap();
    let before = cli.store_bytes();
    let target = format!("{waiting}:/tmp/tinybox-planted-{}", std::process::id());
    for args in [
        vec!["exec", waiting.as_str(), "--", "true"],
        vec!["cp", planted.to_str().unwrap(), target.as_str()],
        vec!["cp", target.as_str(), dir.path().to_str().unwrap()],
    ] {
        let (code, out, err) = cli.run(&args);
        assert_ne!(code, 0, "{args:?} reached a pooled box: {out}");
        assert!(
            err.contains(&format!("box {waiting} is waiting in pool w")) && err.contains("create --pool w"),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert_eq!(cli.store_bytes(), before, "a refused use changed the store");
    assert!(!std::path::Path::new(&target[waiting.len() + 1..]).exists(), "the copy in reached the box");
    // Handed out, the same box is anyone's who took it.
    let (out, _) = ok(&cli, &["create", "--pool", "w"]);
    assert_eq!(out.trim(), waiting);
    ok(&cli, &["exec", &waiting, "--", "true"]);
}

#[test]
fn the_daemon_refills_a_pool_after_a_hand_out() {
    let cli = Cli::new();
    ok(&cli, &["pool", "create", "r", "--size", "2", "--sandbox", "passthrough"]);
    ok(&cli, &["daemon", "start"]);
    struct Stop<'a>(&'a Cli);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            let _ = self.0.run(&["daemon", "stop"]);
        }
    }
    let _stop = Stop(&cli);
    let (code, _, err) = cli.run(&["create", "--pool", "r"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("no daemon refills"), "{err}");
    let deadline = Instant::now() + GUARD;
    while pool(&cli, "r")["ready"] != 2 {
        assert!(Instant::now() < deadline, "the daemon did not refill the pool");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ids(&cli, true).len(), 3);
}

#[test]
fn a_docker_pool_keeps_containers_ready_and_pool_rm_removes_the_waiting_ones() {
    if let Some(why) = docker::unavailable() {
        return skip("pools::a_docker_pool_keeps_containers_ready_and_pool_rm_removes_the_waiting_ones", &why);
    }
    let cli = Cli::new();
    let ns = Namespace::new("pool");
    ok(&cli, &["pool", "create", "d", "--size", "2", "--sandbox", "docker", "--namespace", &ns.name]);
    let containers = || {
        let (_, out, _) = docker(&["ps", "-a", "--filter", &format!("label=tinybox.namespace={}", ns.name), "-q"]);
        out.lines().count()
    };
    assert_eq!(containers(), 2, "the pool's containers exist before anyone asks");
    let id = take_and_use(&cli, "d");
    ok(&cli, &["pool", "rm", "d"]);
    assert_eq!(containers(), 1, "only the handed-out box's container is left");
    ok(&cli, &["rm", &id]);
    assert_eq!(containers(), 0);
}

#[test]
fn a_microvm_pool_hands_out_a_booted_guest() {
    if let Some(why) = tinybox_tests::microvm::unavailable() {
        return skip("pools::a_microvm_pool_hands_out_a_booted_guest", &why);
    }
    let cli = Cli::new();
    let mut args = vec!["pool", "create", "vm", "--size", "1"];
    args.extend_from_slice(tinybox_tests::microvm::TCG);
    ok(&cli, &args);
    let id = take_and_use(&cli, "vm");
    let (out, _) = ok(&cli, &["exec", &id, "--", "uname", "-s"]);
    assert_eq!(out, "Linux\n");
    ok(&cli, &["rm", &id]);
    ok(&cli, &["pool", "rm", "vm"]);
}

#[test]
fn a_pool_on_an_ssh_host_hands_out_remote_boxes() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => return skip("pools::a_pool_on_an_ssh_host_hands_out_remote_boxes", &why),
    };
    let user = tinybox_tests::sshd::ensure_user("tbx-pool", "/bin/sh").unwrap();
    let cli = Cli::new();
    let host_add = sshd.host_add_args("far", &user);
    ok(&cli, &host_add.iter().map(String::as_str).collect::<Vec<_>>());
    ok(&cli, &["pool", "create", "remote", "--size", "1", "--host", "far", "--sandbox", "passthrough"]);
    let id = take_and_use(&cli, "remote");
    let (out, _) = ok(&cli, &["exec", &id, "--", "id", "-un"]);
    assert_eq!(out.trim(), user);
    ok(&cli, &["pool", "rm", "remote"]);
    ok(&cli, &["rm", &id]);
}
