//! Namespace creates on a host where docker starts and removes containers
//! beside them: each container's root is a mount that comes and goes, and a
//! host check that bound `/` (copying every mount beneath it) failed now
//! and then with a wrong cause (#32 item 5). Every create, exec and rm must
//! succeed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tinybox_tests::docker::{self, BASE_IMAGE, Namespace};
use tinybox_tests::{Cli, have};

const CREATERS: usize = 4;
const CREATES_EACH: usize = 40;

#[test]
fn namespace_creates_beside_docker_containers_coming_and_going_all_succeed() {
    let test = "chaos::chaos::busy_host::namespace_creates_beside_docker_containers_coming_and_going_all_succeed";
    if !have("bwrap") {
        return tinybox_tests::skip(test, "needs bwrap");
    }
    if let Some(why) = docker::unavailable() {
        return tinybox_tests::skip(test, &why);
    }
    let ns = Namespace::new("busyhost");
    let done = Arc::new(AtomicBool::new(false));
    // Three loops making and removing containers (labelled, so none outlives the test).
    let churn: Vec<_> = (0..3)
        .map(|n| {
            let (done, label) = (done.clone(), format!("tinybox-test-churn={}", ns.name));
            std::thread::spawn(move || {
                let mut cycles = 0;
                while !done.load(Ordering::SeqCst) {
                    let name = format!("{label}-{n}").replace(['=', '.'], "-");
                    let (code, _, err) =
                        docker::docker(&["run", "-d", "--name", &name, "--label", &label, BASE_IMAGE, "sleep", "30"]);
                    assert_eq!(code, 0, "docker run: {err}");
                    let (code, _, err) = docker::docker(&["rm", "-f", &name]);
                    assert_eq!(code, 0, "docker rm: {err}");
                    cycles += 1;
                }
                cycles
            })
        })
        .collect();
    let cli = Arc::new(Cli::new());
    let creaters: Vec<_> = (0..CREATERS)
        .map(|_| {
            let cli = cli.clone();
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for _ in 0..CREATES_EACH {
                    let (code, out, err) = cli.run(&["create", "--sandbox", "namespace"]);
                    if code != 0 {
                        failures.push(format!("create: {}", err.trim()));
                        continue;
                    }
                    let id = out.trim().to_owned();
                    let (code, said, err) = cli.run(&["exec", &id, "--", "echo", "in"]);
                    if code != 0 || said != "in\n" {
                        failures.push(format!("exec {id}: exit {code}, {}", err.trim()));
                    }
                    let (code, _, err) = cli.run(&["rm", &id]);
                    if code != 0 {
                        failures.push(format!("rm {id}: {}", err.trim()));
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = creaters.into_iter().flat_map(|t| t.join().unwrap()).collect();
    done.store(true, Ordering::SeqCst);
    let cycles: usize = churn.into_iter().map(|t| t.join().unwrap()).sum();
    println!("{test}: {} creates beside {cycles} docker containers made and removed", CREATERS * CREATES_EACH);
    assert!(cycles > 0, "docker made no container meanwhile");
    assert!(failures.is_empty(), "{} of {} failed: {failures:#?}", failures.len(), CREATERS * CREATES_EACH);
}
