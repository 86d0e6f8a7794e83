//! The trust rule, live: the engine relies on a declaration (picking a
//! sandbox on its own, an isolation floor, "suitable for untrusted code")
//! only when the conformance kit passed for that exact driver binary and
//! declaration. A driver that declares hardware isolation and confines
//! nothing (`overclaims`) is verified on first use, fails, and is never
//! picked nor accepted for untrusted code.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tinybox_core::clock::ManualClock;
use tinybox_core::model::{BoxSpec, HostName, IsolationLevel, Placement, SandboxName};
use tinybox_core::{Error, ErrorKind};
use tinybox_tests::{Cli, have, install_test_driver, skip};

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn a_liar_is_verified_on_first_use_and_never_trusted() {
    const TEST: &str = "trust::a_liar_is_verified_on_first_use_and_never_trusted";
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap): no honest sandbox to fall back to");
    }
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "overclaims");
    let run = |args: &[&str]| {
        let out = cli.cmd_with_drivers(&[dir.path()], args).stdin(std::process::Stdio::null()).output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };

    // The liar declares hardware, so it ranks first; the kit runs on first
    // use, catches it, and the box goes to an honest sandbox instead.
    let (code, out, err) = run(&["create", "--untrusted"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("verifying sandbox overclaims"), "the first use is said: {err}");
    assert!(err.contains("passed over: overclaims failed verification"), "{err}");
    let id = out.trim().to_owned();
    let (_, shown, _) = run(&["--json", "inspect", &id]);
    let ws = &json(&shown)["workspace"];
    assert_ne!(ws["placement"]["sandbox"], "overclaims", "{shown}");
    assert_eq!(ws["verified"], true, "{shown}");
    let (_, text, _) = run(&["inspect", &id]);
    assert!(text.contains("suitable for untrusted code, declaration verified"), "{text}");

    // Named, it is refused for untrusted code, with nothing recorded.
    let before = cli.store_bytes();
    let (code, _, err) = run(&["create", "--untrusted", "--sandbox", "overclaims"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("sandbox overclaims failed verification"), "{err}");
    assert!(err.contains("`tinybox drivers verify overclaims`"), "says what to do next: {err}");
    assert_eq!(cli.store_bytes(), before, "a refused create changed the store");

    // `tinybox drivers` shows the verdict plainly.
    let (_, listing, _) = run(&["--json", "drivers"]);
    let rows = json(&listing);
    let row = rows.as_array().unwrap().iter().find(|r| r["name"] == "overclaims").expect("overclaims listed");
    assert_eq!(row["verified"]["passed"], false, "{row}");
    assert!(row["verified"]["declared"]["isolation"] == "hardware", "the verdict names the declaration: {row}");
    let (_, table, _) = run(&["drivers"]);
    let line = table.lines().find(|l| l.starts_with("overclaims")).unwrap();
    assert!(line.contains("FAIL"), "{line}");

    assert_eq!(run(&["rm", &id]).0, Some(0));
}

#[test]
fn a_box_made_without_a_verdict_is_not_relied_on() {
    const TEST: &str = "trust::a_box_made_without_a_verdict_is_not_relied_on";
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let cli = Cli::new();
    // No floor asked: nothing is verified, and the box does not claim to be relied on.
    let id = cli.create(&["--sandbox", "namespace"]);
    let (_, text, _) = cli.run(&["inspect", &id]);
    assert!(text.contains("kernel (NOT relied on for untrusted code"), "{text}");
    assert!(text.contains("tinybox drivers verify namespace"), "{text}");
    // Once verified, boxes made after are.
    let (code, _, err) = cli.run(&["drivers", "verify", "namespace"]);
    assert_eq!(code, 0, "{err}");
    let id2 = cli.create(&["--sandbox", "namespace"]);
    let (_, text, _) = cli.run(&["inspect", &id2]);
    assert!(text.contains("kernel (suitable for untrusted code, declaration verified)"), "{text}");
    let (_, text, _) = cli.run(&["inspect", &id]);
    assert!(text.contains("NOT relied on"), "a box keeps what was true when it was made: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_without_a_verifier_refuses_a_floor_it_cannot_rely_on() {
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "overclaims");
    let engine = tinybox_tests::engine(&[dir.path().to_owned()], Arc::new(ManualClock::new(1_000)));
    let mut spec = BoxSpec::new(Placement::new(HostName::local(), SandboxName::new("overclaims").unwrap()));
    spec.min_isolation = Some(IsolationLevel::Kernel);
    let err = tokio::time::timeout(Duration::from_secs(60), engine.create(spec)).await.expect("bounded").unwrap_err();
    assert!(matches!(&err, Error::Unverified { sandbox, .. } if sandbox.as_str() == "overclaims"), "{err}");
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.to_string().contains("has no verdict for this binary and declaration"), "{err}");
    assert!(engine.list().unwrap().is_empty(), "a refused create left a record");
    engine.close().await;
}
