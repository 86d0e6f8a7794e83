//! A docker create SIGKILLed once its container runs: `inspect` of its
//! `creating` record says the container is up and that the create was
//! interrupted, and `reap` (what the daemon runs each round) removes the
//! container and the record, since its creator has ended.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tinybox_tests::Cli;
use tinybox_tests::docker::{self, Namespace};

use crate::GUARD;

fn running(container: &str) -> bool {
    let out = Command::new("docker").args(["inspect", "-f", "{{.State.Running}}", container]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

fn exists(container: &str) -> bool {
    Command::new("docker")
        .args(["inspect", container])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[test]
fn a_killed_docker_create_is_inspected_as_it_is_and_reaped_with_its_container() {
    let test = "chaos::chaos::interrupted::a_killed_docker_create_is_inspected_as_it_is_and_reaped_with_its_container";
    if let Some(why) = docker::unavailable() {
        return tinybox_tests::skip(test, &why);
    }
    let cli = Cli::new();
    let ns = Namespace::new("interrupted");
    // The create may answer between its container starting and the kill:
    // then that box goes and the next try is made.
    for attempt in 0..10 {
        let mut create = cli
            .cmd(&["create", "--sandbox", "docker", "--namespace", &ns.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let id = format!("box-{attempt}");
        let container = ns.container(&id);
        let start = Instant::now();
        // A bounded poll for the container to run: it gives no other sign.
        while !running(&container) && create.try_wait().unwrap().is_none() {
            assert!(start.elapsed() < GUARD, "{container} never ran");
            std::thread::sleep(Duration::from_millis(5));
        }
        create.kill().unwrap();
        create.wait().unwrap();
        let shown: serde_json::Value =
            serde_json::from_str(&cli.run(&["--json", "inspect", &id]).1).expect("inspect --json is JSON");
        let phase = shown.get("box").unwrap_or(&shown)["phase"].clone();
        if phase != "creating" {
            let (code, _, err) = cli.run(&["rm", &id]);
            assert_eq!(code, 0, "{phase} {shown}: {err}");
            continue;
        }
        // The killed client's request may still be going on in dockerd; the container ran.
        assert!(exists(&container), "{container} went");
        assert_eq!(shown["state"], if running(&container) { "ready" } else { "stopped" }, "{shown}");
        let detail = shown["state_detail"].as_str().unwrap();
        assert!(detail.starts_with("its create was interrupted (its creator, pid "), "{detail}");
        assert!(!detail.contains("creation did not finish"), "{detail}");

        let (code, out, err) = cli.run(&["--json", "reap"]);
        assert_eq!(code, 0, "{err}");
        let reaped: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(reaped[0]["id"], id.as_str(), "{reaped}");
        assert!(reaped[0]["interrupted_by"].is_u64(), "{reaped}");
        assert!(reaped[0].get("error").is_none(), "{reaped}");
        assert!(!exists(&container), "reap left {container}");
        let (_, listed, _) = cli.run(&["--json", "ls", "--all"]);
        assert_eq!(listed.trim(), "[]", "reap left the record");
        return;
    }
    panic!("{test}: each of 10 creates answered before it could be killed");
}
