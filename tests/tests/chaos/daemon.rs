//! A dockerd of the suite's own, crashed (dockerd, containerd, shims and
//! containers SIGKILLed) at seeded points during create, snapshot and rm,
//! then started again over the same data. The shared daemon other suites
//! use is never touched.

use std::time::{Duration, Instant};

use tinybox_tests::dockerd::PrivateDaemon;

use super::docker::Docker;
use crate::{World, check_and_clean, rng, run_ok};

#[test]
fn dockerd_crashed_and_restarted_mid_operation() {
    let test = "chaos::chaos::daemon::dockerd_crashed_and_restarted_mid_operation";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return tinybox_tests::skip(test, &why);
    }
    let mut daemon = match PrivateDaemon::start() {
        Ok(d) => d,
        Err(why) => return tinybox_tests::skip(test, &why),
    };
    let mut world = Docker::new("chaos-daemon");
    world.docker_host = Some(daemon.host());
    let mut rng = rng(test);
    let baseline = world.counts();
    println!("{test}: baseline {baseline:?}");
    for op in ["create", "snapshot", "rm"] {
        // A persistent box that lives through the crash, and one the operation works on.
        let bystander = world.create(&["--persistent"]);
        let args: Vec<String> = match op {
            "create" => world.create_args(&[]),
            other => vec![other.into(), world.create(&[])],
        };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let at = Duration::from_millis(100 + rng.next_u64() % 300);
        let mut cli = world
            .cmd(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn tinybox");
        let start = Instant::now();
        while start.elapsed() < at && cli.try_wait().expect("wait").is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        daemon.crash_and_restart().expect("the private dockerd starts again");
        let ended = cli.wait_with_output().expect("tinybox ends once its daemon is gone");
        let err = String::from_utf8_lossy(&ended.stderr);
        if !ended.status.success() {
            assert!(err.lines().count() == 1 && err.starts_with("tinybox: "), "{test}: {op}: {err:?}");
        }
        // The bystander's container came back exited: resume brings it back with its data.
        let resumed = crate::run(&world, &["resume", &bystander]);
        assert_eq!(resumed.0, 0, "{test}: resume of {bystander} after the crash: {}", resumed.2);
        let label = format!(
            "{test} {op} daemon crashed at {} ms (exit {:?}{})",
            at.as_millis(),
            ended.status.code(),
            if ended.status.success() { String::new() } else { format!(", {}", err.trim()) }
        );
        check_and_clean(&world, &label, &baseline);
    }
    run_ok(&world, &["ls"]);
}
