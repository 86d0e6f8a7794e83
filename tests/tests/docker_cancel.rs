//! Live: cancelling a docker exec right after its command starts, many
//! times in a row. A cancel races the `docker exec` client's own end (it
//! exits 0 when terminated); each run must still be reported cancelled and
//! leave nothing running in the container. The suite runs a few rounds;
//! `TINYBOX_CANCEL_REPEAT=50` under load is the stress run in
//! docs/reliability.md.

use std::sync::Arc;

use tinybox_core::clock::SystemClock;
use tinybox_tests::docker::{self, Namespace, docker_ok};
use tinybox_tests::{exec_cancelled_once_started, skip};

/// Rounds in the suite: enough to catch a race that loses one time in a
/// few, short enough to keep the suite fast.
const ROUNDS: usize = 8;

#[tokio::test]
async fn a_cancel_right_after_the_start_always_stops_the_command() {
    if let Some(why) = docker::unavailable() {
        return skip("docker_cancel::a_cancel_right_after_the_start_always_stops_the_command", &why);
    }
    let rounds = std::env::var("TINYBOX_CANCEL_REPEAT").ok().and_then(|v| v.parse().ok()).unwrap_or(ROUNDS);
    let ns = Namespace::new("cancel-stress");
    let (tb, _dir) = docker::engine(Arc::new(SystemClock));
    let info = tb.create(docker::spec(&ns)).await.unwrap();
    let container = ns.container(info.id.as_str());
    let mut failed = Vec::new();
    for round in 0..rounds {
        // A number of the round's own, so a survivor names its round.
        let marker = format!("{}", 3_141_000 + round);
        let script = format!("echo started; exec sleep {marker}");
        let outcome = exec_cancelled_once_started(&tb, &info.id, &["sh", "-c", &script]).await;
        let mut wrong = Vec::new();
        if !outcome.cancelled || outcome.status.success() {
            wrong.push(format!("ended with {} (cancelled: {})", outcome.status, outcome.cancelled));
        }
        // The exec answers once the command is dead: nothing may be left.
        let left = docker_ok(&["exec", &container, "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo"]);
        if left.contains(&marker) {
            wrong.push(format!("`sleep {marker}` still ran after its exec answered"));
        }
        if !wrong.is_empty() {
            failed.push(format!("round {round}: {}", wrong.join("; ")));
        }
    }
    println!("docker_cancel: {} of {rounds} rounds failed", failed.len());
    tb.close().await;
    assert!(failed.is_empty(), "{} of {rounds} cancelled execs went wrong:\n{}", failed.len(), failed.join("\n"));
}
