//! Composition through core: a sandbox driver reaching its host only by the
//! reverse `host.run` call, a runner placed apart from the workspace, a
//! cancellation that reaches a forwarded run, and the reaper.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use tinybox_core::clock::ManualClock;
use tinybox_core::model::{BoxSpec, ExecRequest, HostName, Lifecycle, Placement, SandboxName, WorkspaceSource};
use tinybox_core::{Error, Target};
use tinybox_tests::{engine, exec_cancelled_once_started, install_test_driver, piped_stdio};

const GUARD: Duration = Duration::from_secs(30);

fn relay() -> Placement {
    Placement::new(HostName::local(), SandboxName::new("relay").unwrap())
}

fn read_all(mut r: std::io::PipeReader) -> String {
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    s
}

async fn output(tb: &tinybox_core::Tinybox, id: &tinybox_core::model::BoxId, argv: &[&str], target: Target) -> String {
    let (stdio, out, _err) = piped_stdio();
    let outcome = tokio::time::timeout(
        GUARD,
        tb.exec(id, ExecRequest::new(argv.iter().copied()), stdio, target, std::future::pending()),
    )
    .await
    .expect("exec finished")
    .expect("exec succeeded");
    assert!(outcome.status.success(), "{argv:?}: {}", outcome.status);
    read_all(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_driver_reaches_its_host_through_core() {
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "relay");
    let tb = engine(&[dir.path().to_path_buf()], Arc::new(ManualClock::new(1000)));
    let ws = tempfile::tempdir().unwrap();
    let mut spec = BoxSpec::new(relay());
    spec.source = Some(WorkspaceSource::LocalDir { path: ws.path().to_path_buf() });
    let info = tb.create(spec).await.unwrap();
    let out = output(&tb, &info.id, &["sh", "-c", "echo $RELAYED_BY; pwd"], Target::Workspace).await;
    assert_eq!(out, format!("{}\n{}\n", info.id, ws.path().display()));
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_runner_is_recorded_and_honoured() {
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "relay");
    let tb = engine(&[dir.path().to_path_buf()], Arc::new(ManualClock::new(1000)));
    let spec = BoxSpec::new(Placement::local_passthrough()).with_runner(relay());
    let info = tb.create(spec).await.unwrap();
    assert_eq!(info.workspace.as_ref().unwrap().placement, Placement::local_passthrough());
    assert_eq!(info.runner.as_ref().unwrap().placement, relay());
    let script = ["sh", "-c", "echo runner=${RELAYED_BY:-none}"];
    assert_eq!(output(&tb, &info.id, &script, Target::Runner).await, format!("runner={}\n", info.id));
    assert_eq!(output(&tb, &info.id, &script, Target::Workspace).await, "runner=none\n");

    // Colocated boxes run --runner commands in the one place they have.
    let colocated = tb.create(BoxSpec::new(relay())).await.unwrap();
    assert!(colocated.runner.is_none());
    assert_eq!(output(&tb, &colocated.id, &script, Target::Runner).await, format!("runner={}\n", colocated.id));
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_exec_stops_the_run_its_sandbox_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "relay");
    let tb = engine(&[dir.path().to_path_buf()], Arc::new(ManualClock::new(1000)));
    let info = tb.create(BoxSpec::new(relay())).await.unwrap();
    let (stdio, mut out, _err) = piped_stdio();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<i32>();
    // The command prints its pid and sleeps; cancellation fires once the pid is read.
    std::thread::spawn(move || {
        let mut buf = [0u8; 32];
        let n = out.read(&mut buf).unwrap();
        let pid: i32 = String::from_utf8_lossy(&buf[..n]).trim().parse().unwrap();
        let _ = started_tx.send(pid);
    });
    let pid = Arc::new(std::sync::Mutex::new(None));
    let seen = pid.clone();
    let cancel = async move {
        if let Ok(p) = started_rx.await {
            *seen.lock().unwrap() = Some(p);
        }
    };
    let req = ExecRequest::new(["sh", "-c", "echo $$; exec sleep 1000"]);
    let outcome = tokio::time::timeout(GUARD, tb.exec(&info.id, req, stdio, Target::Workspace, cancel))
        .await
        .expect("a cancelled exec ends")
        .unwrap();
    assert!(outcome.cancelled);
    assert_eq!(outcome.status.signal, Some(15), "{}", outcome.status);
    let pid = pid.lock().unwrap().expect("pid read");
    assert!(!std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists() || zombie(pid), "pid {pid} survived");
    tb.close().await;
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reap_removes_expired_boxes_and_one_failure_does_not_stop_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "relay");
    let clock = Arc::new(ManualClock::new(1_000_000));
    let tb = engine(&[dir.path().to_path_buf()], clock.clone());

    let mut short = BoxSpec::new(Placement::local_passthrough());
    short.lifecycle = Lifecycle::ephemeral(Duration::from_secs(10));
    let short = tb.create(short).await.unwrap().id;
    let hour = tb.create(BoxSpec::new(Placement::local_passthrough())).await.unwrap().id;
    let mut keep = BoxSpec::new(Placement::local_passthrough());
    keep.lifecycle = Lifecycle::persistent(Duration::from_secs(60));
    let keep = tb.create(keep).await.unwrap().id;
    let doomed = tb.create(BoxSpec::new(relay())).await.unwrap().id;

    assert!(tb.reap().await.unwrap().is_empty(), "nothing has expired yet");
    clock.advance(10);
    let reaped = tb.reap().await.unwrap();
    assert_eq!(reaped.iter().map(|r| r.id.clone()).collect::<Vec<_>>(), vec![short.clone()]);
    assert!(reaped[0].error.is_none());

    // The relay driver disappears; its box cannot be destroyed, the others still go.
    tb.close().await;
    std::fs::remove_file(dir.path().join("tinybox-driver-relay")).unwrap();
    let tb2 = tinybox_core::Tinybox::with_parts(
        Arc::new(tinybox_core::store::MemoryStore::new()),
        None,
        clock.clone(),
        tinybox_tests::driver_config(&[dir.path().to_path_buf()], tinybox_tests::short_timeouts()),
    )
    .unwrap();
    // Carry the records over to the new engine's store.
    for b in tb.list().unwrap() {
        tb2.store().insert(b).unwrap();
    }
    clock.advance(3600);
    let reaped = tb2.reap().await.unwrap();
    let mut ids: Vec<_> = reaped.iter().map(|r| (r.id.clone(), r.error.is_some())).collect();
    ids.sort();
    let mut expected = vec![(doomed.clone(), true), (hour.clone(), false)];
    expected.sort();
    assert_eq!(ids, expected);
    let err = reaped.iter().find(|r| r.id == doomed).unwrap().error.clone().unwrap();
    assert!(err.contains("no driver named relay"), "{err}");
    let left: Vec<_> = tb2.list().unwrap().into_iter().map(|b| b.id).collect();
    assert_eq!(left, vec![keep, doomed], "the persistent box and the one that failed remain");
    assert!(matches!(tb2.get(&hour), Err(Error::Store(_))));
    tb2.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_never_ends_a_cancelled_exec_cannot_hold_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "hangs-mid-exec");
    let tb = engine(&[dir.path().to_path_buf()], Arc::new(ManualClock::new(1000)));
    let placement = Placement::new(HostName::local(), SandboxName::new("hangs-mid-exec").unwrap());
    let info = tb.create(BoxSpec::new(placement)).await.unwrap();
    let (stdio, _out, _err) = piped_stdio();
    // Cancel at once; the driver acknowledges and then never answers the exec.
    let result = tokio::time::timeout(
        GUARD,
        tb.exec(&info.id, ExecRequest::new(["true"]), stdio, Target::Workspace, std::future::ready(())),
    )
    .await
    .expect("the caller is released");
    match result {
        Err(Error::DriverTimeout { driver, what, .. }) => {
            assert_eq!(driver, "hangs-mid-exec");
            assert!(what.contains("cancelled"), "{what}");
        }
        other => panic!("expected a timeout naming the driver, got {other:?}"),
    }
    tb.close().await;
}

fn chained_engine(dir: &std::path::Path, hosts: &[(&str, &str, Option<&str>)]) -> tinybox_core::Tinybox {
    let mut config = tinybox_tests::driver_config(&[dir.to_path_buf()], tinybox_tests::short_timeouts());
    for (name, label, inner) in hosts {
        config.hosts.insert(
            HostName::new(*name).unwrap(),
            tinybox_core::hosts::HostEntry {
                driver: "via".into(),
                config: serde_json::json!({ "label": label }),
                inner: inner.map(|i| HostName::new(i).unwrap()),
            },
        );
    }
    tinybox_core::Tinybox::with_parts(
        Arc::new(tinybox_core::store::MemoryStore::new()),
        None,
        Arc::new(ManualClock::new(1000)),
        config,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_reaches_its_machine_through_its_inner_host() {
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "via");
    // far -> jump -> local: far's commands run on jump, jump's on this machine.
    let tb = chained_engine(dir.path(), &[("jump", "J", None), ("far", "F", Some("jump"))]);
    let far = Placement::new(HostName::new("far").unwrap(), SandboxName::passthrough());
    let info = tb.create(BoxSpec::new(far)).await.unwrap();
    let out = output(&tb, &info.id, &["sh", "-c", "echo $VIA"], Target::Workspace).await;
    assert_eq!(out, "F,J\n", "each host in the chain ran its part, outermost first");

    // A cancellation travels down the chain to the process itself.
    let outcome = exec_cancelled_once_started(&tb, &info.id, &["sh", "-c", "echo go; exec sleep 1000"]).await;
    assert!(outcome.cancelled);
    assert_eq!(outcome.status.signal, Some(15), "{}", outcome.status);
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_that_reach_each_other_in_a_loop_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    install_test_driver(dir.path(), "via");
    let tb = chained_engine(dir.path(), &[("a", "A", Some("b")), ("b", "B", Some("a"))]);
    let a = Placement::new(HostName::new("a").unwrap(), SandboxName::passthrough());
    let err = tb.create(BoxSpec::new(a)).await.unwrap_err();
    assert!(err.to_string().contains("loop: a -> b -> a"), "{err}");
    assert!(tb.list().unwrap().is_empty());
    let unknown = Placement::new(HostName::new("nowhere").unwrap(), SandboxName::passthrough());
    let err = tb.create(BoxSpec::new(unknown)).await.unwrap_err();
    assert!(err.to_string().contains("no host named nowhere; the hosts known here are: a, b, local"), "{err}");
    tb.close().await;
}
