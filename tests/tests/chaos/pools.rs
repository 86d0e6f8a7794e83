//! A warm pool under a burst of `--pool-only` takes while the daemon
//! refills it, then the daemon SIGKILLed in the middle of refilling (#32
//! item 7). Every refusal says who refills the pool as it is: the daemon
//! while one runs, `tinybox daemon start` once none does — never advice to
//! start a daemon that is running. The fills the kill cut short are
//! interrupted creates: inspected as what they made and reaped (item 6),
//! and nothing of the pool's boxes is left after.

use std::sync::Arc;

use tinybox_tests::chaos::{children, kill};

use super::local::Namespace;
use super::supervised::{Daemon, wait_until};
use crate::{World, check_and_clean, run, run_ok};

const SIZE: u64 = 2;
const BURST: usize = 12;

fn ready(world: &Namespace) -> u64 {
    let pools: Vec<serde_json::Value> = serde_json::from_str(&run_ok(world, &["--json", "pool", "ls"])).unwrap();
    pools.iter().find(|p| p["name"] == "p").map(|p| p["ready"].as_u64().unwrap()).expect("pool p is listed")
}

/// `create --pool p --pool-only` from `BURST` callers at once: the boxes
/// handed out, and each refusal's line.
fn burst(world: &Arc<Namespace>) -> (Vec<String>, Vec<String>) {
    let takers: Vec<_> = (0..BURST)
        .map(|_| {
            let world = world.clone();
            std::thread::spawn(move || {
                let ns = world.ns.clone();
                run(&*world, &["create", "--pool", "p", "--pool-only", "--namespace", &ns])
            })
        })
        .collect();
    let (mut taken, mut refused) = (Vec::new(), Vec::new());
    for t in takers {
        let (code, out, err) = t.join().unwrap();
        match code {
            0 => taken.push(out.trim().to_owned()),
            _ => {
                assert_eq!(err.trim().lines().count(), 1, "a refusal is one line: {err}");
                refused.push(err.trim().to_owned());
            }
        }
    }
    (taken, refused)
}

#[test]
fn a_pool_burst_beside_a_daemon_killed_mid_refill_is_told_who_refills_and_leaves_nothing() {
    let test =
        "chaos::chaos::pools::a_pool_burst_beside_a_daemon_killed_mid_refill_is_told_who_refills_and_leaves_nothing";
    if !tinybox_tests::have("bwrap") {
        return tinybox_tests::skip(test, "no bwrap on PATH (apt-get install bubblewrap)");
    }
    let world = Arc::new(Namespace::new("pool"));
    let baseline = world.counts();
    let size = SIZE.to_string();
    run_ok(&*world, &["pool", "create", "p", "--size", &size, "--sandbox", "namespace", "--namespace", &world.ns]);
    let daemon = Daemon::start(&world.cli);
    wait_until("the daemon fills pool p", || ready(&world) == SIZE);

    let (taken, refused) = burst(&world);
    println!("{test}: with the daemon: {} taken, {} refused", taken.len(), refused.len());
    assert!(taken.len() as u64 >= SIZE, "a full pool handed out only {taken:?}");
    for line in &refused {
        assert!(line.contains("pool p has no box ready") && line.contains("the daemon"), "{line}");
        assert!(!line.contains("tinybox daemon start"), "told to start the running daemon: {line}");
    }

    // Killed as it refills what the burst took.
    let pid = daemon.pid();
    let drivers = children(pid);
    kill(pid);
    let gone = |p: &u32| !std::path::Path::new(&format!("/proc/{p}")).exists();
    wait_until("the killed daemon and its drivers are gone", || gone(&pid) && drivers.iter().all(gone));
    drop(daemon);
    let (more, refused) = burst(&world);
    println!("{test}: with the daemon killed: {} taken, {} refused", more.len(), refused.len());
    assert!(!refused.is_empty(), "{BURST} takes from a pool of {SIZE} nobody refills were all served");
    for line in &refused {
        assert!(line.contains("`tinybox daemon start` refills pools"), "no daemon runs, yet: {line}");
    }
    // The waiting boxes go with their pool; the rest is the usual check.
    run_ok(&*world, &["pool", "rm", "p"]);
    check_and_clean(&*world, test, &baseline);
}
