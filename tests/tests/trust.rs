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
use tinybox_tests::boxes::{BoxEnv, Principal};
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

#[test]
fn an_untrusted_box_without_limits_in_force_is_made_with_one_warning_saying_so() {
    const TEST: &str = "trust::an_untrusted_box_without_limits_in_force_is_made_with_one_warning_saying_so";
    if !have("bwrap") {
        return skip(TEST, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let root = rustix::process::getuid().is_root();
    for who in Principal::all(TEST) {
        let env = BoxEnv::new(&who);
        let rows = json(&String::from_utf8_lossy(&env.run(&["--json", "drivers"]).stdout));
        let namespace = rows.as_array().unwrap().iter().find(|r| r["name"] == "namespace").expect("namespace listed");
        let caps = &namespace["capabilities"];
        let has = |list: &str, item: &str| caps[list].as_array().is_some_and(|a| a.iter().any(|x| x == item));
        let limited = has("features", "resource_limits") && has("limits", "pids") && has("limits", "memory");
        // Root has a writable cgroup here; the test user (no delegated cgroup) has none.
        let expected = match &who {
            Principal::User { .. } => false,
            Principal::Me => limited && root,
        };
        if limited != expected {
            let why = format!("namespace declares {caps} for {}, not what this test checks", who.label());
            return skip(&format!("{TEST} ({})", who.label()), &why);
        }
        let ws = env.workspace.path().to_str().unwrap();
        let out = env.run(&["create", "--untrusted", "--sandbox", "namespace", "--workspace", ws]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{}: {err}", who.label());
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
        if limited {
            assert_eq!(warnings, Vec::<&str>::new(), "{}: limits are in force: {err}", who.label());
            let said = err.lines().find(|l| l.contains("created")).unwrap_or_else(|| panic!("{err}"));
            let limits = said.split("limits ").nth(1).unwrap_or_else(|| panic!("{said}"));
            assert!(limits.contains("pids") && limits.contains("memory"), "the limits in force are said: {said}");
        } else {
            assert_eq!(warnings.len(), 1, "{}: one line: {err}", who.label());
            let line = warnings[0];
            assert!(line.starts_with("tinybox: warning: box "), "{line}");
            for part in [id.as_str(), "untrusted code", "no pids or memory limit in force", "sandbox namespace"] {
                assert!(line.contains(part), "{}: the warning names {part:?}: {line}", who.label());
            }
        }
        assert!(env.run(&["rm", &id]).status.success());
    }
}
