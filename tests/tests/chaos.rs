//! The chaos suite: `tinybox` SIGKILLed at seeded points during create, rm,
//! snapshot, fork, stop and resume on docker, namespace and microvm; a
//! driver killed mid-call; a dockerd of the suite's own killed and started
//! again; the daemon's drivers, and the daemon itself, killed under execs,
//! and the stream sockets of killed callers (chaos/supervised.rs,
//! chaos/sockets.rs); namespace creates beside docker churn
//! (chaos/busy_host.rs); a docker create killed once its container runs
//! (chaos/interrupted.rs); a pool burst with its daemon killed mid-refill
//! (chaos/pools.rs). After each injection: `tinybox ls` names every
//! resource that is left; each created box's state, and each interrupted
//! create's, matches what is really there; `reap` removes the interrupted
//! creates and `rm` every other record (and `prune` unkept snapshots),
//! each exiting 0; and the count of
//! containers, QEMU and bwrap processes, state directories, cgroups and
//! snapshot images is back where it started. Every point, its outcome and
//! the counts are printed (run with `--nocapture`), with the seed that
//! replays them (docs/reliability.md, "The chaos suite").

mod chaos {
    pub mod busy_host;
    pub mod daemon;
    pub mod docker;
    pub mod interrupted;
    pub mod local;
    pub mod pools;
    pub mod sockets;
    pub mod supervised;
}

use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tinybox_tests::Cli;
use tinybox_tests::chaos::{Injected, Rng, SEED_VAR};

/// Bounds one command or one wait for processes to end; asserts nothing about speed.
pub const GUARD: Duration = Duration::from_secs(120);

/// The seed every test of this run draws its points from, printed once per test.
pub fn rng(test: &str) -> Rng {
    static SEED: OnceLock<u64> = OnceLock::new();
    let seed = *SEED.get_or_init(tinybox_tests::chaos::seed);
    println!("{test}: chaos seed {seed} (replay: {SEED_VAR}={seed} cargo test -p tinybox-tests --test chaos)");
    Rng::new(seed, test)
}

/// What one sandbox's boxes are made of, seen from outside tinybox.
pub trait World {
    /// Each resource kind and how many there are now.
    fn counts(&self) -> Vec<(&'static str, usize)>;
    /// The box ids whose resources exist now (what `ls` must name).
    fn owners(&self) -> Vec<String>;
    /// What box `id` really is: `ready`, `stopped` or `gone`.
    fn reality(&self, id: &str) -> &'static str;
    /// A `tinybox` command against the store (with whatever environment the world needs).
    fn cmd(&self, args: &[&str]) -> Command;
    /// Whether snapshots are taken here, so `prune` belongs to the cleanup.
    fn snapshots(&self) -> bool;
}

/// Runs `tinybox ARGS` to its end: (code, stdout, stderr).
pub fn run(world: &dyn World, args: &[&str]) -> (i32, String, String) {
    let out = world.cmd(args).stdin(std::process::Stdio::null()).output().expect("run tinybox");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// `tinybox ARGS`, which must succeed; its stdout trimmed.
pub fn run_ok(world: &dyn World, args: &[&str]) -> String {
    let (code, out, err) = run(world, args);
    assert_eq!(code, 0, "tinybox {args:?} failed: {err}");
    out.trim().to_owned()
}

/// The store's records: (id, phase).
pub fn records(world: &dyn World) -> Vec<(String, String)> {
    let listing: serde_json::Value =
        serde_json::from_str(&run_ok(world, &["--json", "ls"])).expect("ls --json is JSON");
    listing
        .as_array()
        .expect("ls --json is a list")
        .iter()
        .map(|b| (b["id"].as_str().unwrap().to_owned(), b["phase"].as_str().unwrap().to_owned()))
        .collect()
}

/// The checks after one injection, then the cleanup: `ls` names every
/// resource left; `inspect` tells each created box's state truly, and each
/// interrupted create's too; `reap` removes the interrupted creates and
/// `rm` every other record; `prune` succeeds; the counts are back at `baseline`.
pub fn check_and_clean(world: &dyn World, label: &str, baseline: &[(&'static str, usize)]) {
    let boxes = records(world);
    let ids: Vec<&str> = boxes.iter().map(|(id, _)| id.as_str()).collect();
    for owner in world.owners() {
        assert!(ids.contains(&owner.as_str()), "{label}: resources of {owner} are left but ls names only {boxes:?}");
    }
    // A create that was interrupted is inspected as what it made (#32 item
    // 6), then left to `reap`, which removes it because its creator ended.
    let mut interrupted = Vec::new();
    for (id, phase) in &boxes {
        if phase != "created" && phase != "creating" {
            continue;
        }
        // A request the killed client sent may still be going on in its
        // sandbox (dockerd): what inspect saw is what was there before or after.
        let before = world.reality(id);
        let shown: serde_json::Value =
            serde_json::from_str(&run_ok(world, &["--json", "inspect", id])).expect("inspect --json is JSON");
        let after = world.reality(id);
        assert!(
            shown["state"] == before || shown["state"] == after,
            "{label}: inspect of {phase} {id} says {} but it is {before} (then {after})",
            shown["state"]
        );
        if phase == "creating" {
            let detail = shown["state_detail"].as_str().unwrap_or_default();
            assert!(detail.starts_with("its create was interrupted"), "{label}: inspect of {id}: {detail}");
            assert!(!detail.contains("could not say what was made"), "{label}: inspect of {id}: {detail}");
            interrupted.push(id.clone());
        }
    }
    if !interrupted.is_empty() {
        let reaped: serde_json::Value =
            serde_json::from_str(&run_ok(world, &["--json", "reap"])).expect("reap --json is JSON");
        for id in &interrupted {
            let entry = reaped.as_array().and_then(|r| r.iter().find(|e| e["id"] == id.as_str()));
            let entry = entry.unwrap_or_else(|| panic!("{label}: reap left interrupted create {id}: {reaped}"));
            assert!(entry["interrupted_by"].is_u64() && entry.get("error").is_none(), "{label}: {entry}");
        }
    }
    let ids: Vec<&str> = ids.into_iter().filter(|id| !interrupted.iter().any(|i| i == id)).collect();
    if !ids.is_empty() {
        let mut args = vec!["rm"];
        args.extend(&ids);
        let (code, _, err) = run(world, &args);
        assert_eq!(code, 0, "{label}: rm {ids:?} failed: {err}");
    }
    if world.snapshots() {
        let (code, _, err) = run(world, &["prune"]);
        assert_eq!(code, 0, "{label}: prune failed: {err}");
    }
    let now = world.counts();
    println!("{label}: records {boxes:?}; after rm and prune {now:?}");
    assert_eq!(now, baseline, "{label}: rm and prune left something behind");
}

/// One operation to interrupt: `prepare` makes what it works on (and
/// returns its arguments), then `tinybox ARGS` is killed at each point.
pub struct Operation<W> {
    pub name: &'static str,
    pub prepare: Prepare<W>,
}

/// Makes what an operation works on; returns the operation's arguments.
pub type Prepare<W> = Box<dyn Fn(&W) -> Vec<String>>;

/// Measures `op` once (uninterrupted), then kills it at `n` seeded points
/// spread over that time, checking and cleaning after each. Returns how
/// many points killed it mid-way.
pub fn interrupt<W: World>(world: &W, test: &str, op: &Operation<W>, n: usize, rng: &mut Rng) -> usize {
    let baseline = world.counts();
    println!("{test}: {} baseline {baseline:?}", op.name);
    let args = (op.prepare)(world);
    let start = Instant::now();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = run(world, &argv);
    let span = start.elapsed();
    assert_eq!(code, 0, "{test}: uninterrupted {argv:?} failed: {err}");
    check_and_clean(world, &format!("{test} {} uninterrupted ({} ms)", op.name, span.as_millis()), &baseline);
    let mut killed = 0;
    for (i, at) in rng.points(n, span).into_iter().enumerate() {
        let args = (op.prepare)(world);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let outcome = tinybox_tests::chaos::kill_cli_at(world.cmd(&argv), at, GUARD);
        if let Injected::Finished { code, stderr } = &outcome {
            assert_eq!(*code, Some(0), "{test}: {argv:?} failed on its own: {stderr}");
        } else {
            killed += 1;
        }
        let label = format!("{test} {} point {i} at {} ms: {}", op.name, at.as_millis(), outcome.label());
        check_and_clean(world, &label, &baseline);
    }
    println!("{test}: {} killed mid-way at {killed} of {n} points", op.name);
    killed
}

/// Kills driver `driver` at `n` seeded points during `op`; the command
/// must end (with success, or one `tinybox:` line), then the usual checks.
pub fn interrupt_driver<W: World>(
    world: &W,
    test: &str,
    driver: &str,
    op: &Operation<W>,
    n: usize,
    span: Duration,
    rng: &mut Rng,
) {
    let baseline = world.counts();
    for (i, at) in rng.points(n, span).into_iter().enumerate() {
        let args = (op.prepare)(world);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (killed, code, stderr) = tinybox_tests::chaos::kill_driver_at(world.cmd(&argv), driver, at, GUARD);
        if code != Some(0) {
            assert!(
                stderr.lines().count() == 1 && stderr.starts_with("tinybox: "),
                "{test}: {argv:?} with its driver killed must fail in one tinybox line: {stderr:?}"
            );
        }
        let label = format!(
            "{test} {} driver {driver} point {i} at {} ms: {} (exit {code:?}{})",
            op.name,
            at.as_millis(),
            if killed { "killed" } else { "not running then" },
            if code == Some(0) { String::new() } else { format!(", {}", stderr.trim()) }
        );
        check_and_clean(world, &label, &baseline);
    }
}

/// A fresh store for a world.
pub fn store() -> Cli {
    Cli::new()
}
