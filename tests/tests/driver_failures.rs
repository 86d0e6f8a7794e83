//! Every way a driver can misbehave, run through the engine's real
//! operations: each ends in the right error, naming the driver, within a
//! bounded time, with the store unchanged — except a create whose driver
//! failed mid-call, which keeps its `creating` reservation so `rm` can
//! remove whatever the driver made before it failed.
//!
//! The drivers are the `misbehaving-driver` binary installed under a temp
//! dir as `tinybox-driver-<mode>`; the mode is its name.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tinybox_core::clock::ManualClock;
use tinybox_core::model::{BoxSpec, HostName, Placement, SandboxName, WorkspaceSource};
use tinybox_core::{DriverReport, Error, Target, Tinybox};
use tinybox_sdk::model::ExecRequest;
use tinybox_sdk::protocol::Role;
use tinybox_sdk::stdio::StdioFds;

/// Long enough for any timeout core applies; only a hang reaches it.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// Runs `fut`, failing the test if it has not finished within [`HANG_GUARD`].
async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG_GUARD, fut).await {
        Ok(v) => v,
        Err(_) => {
            panic!("{what} did not finish within {HANG_GUARD:?}: core hung on a misbehaving driver")
        }
    }
}

/// Installs the misbehaving driver as `tinybox-driver-<mode>` in `dir`.
fn install(dir: &Path, mode: &str) {
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_misbehaving-driver"), dir.join(format!("tinybox-driver-{mode}")))
        .expect("install the misbehaving driver");
}

/// An engine whose drivers are `modes` (first) and the built ones.
struct Setup {
    dir: tempfile::TempDir,
    engine: Tinybox,
}

impl Setup {
    fn new(modes: &[&str]) -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        for mode in modes {
            install(dir.path(), mode);
        }
        let engine = tinybox_tests::engine(&[dir.path().to_path_buf()], Arc::new(ManualClock::new(1000)));
        Setup { dir, engine }
    }

    /// A box on the local host in sandbox `mode`, starting in the temp dir.
    fn spec(&self, mode: &str) -> BoxSpec {
        let placement = Placement::new(HostName::local(), SandboxName::new(mode).unwrap());
        let mut spec = BoxSpec::new(placement);
        spec.source = Some(WorkspaceSource::LocalDir { path: self.dir.path().to_path_buf() });
        spec
    }

    fn assert_store_empty(&self) {
        assert!(self.engine.list().expect("list").is_empty(), "a failed create left a record");
    }
}

/// Creates a box in sandbox `mode`, expecting failure before the driver was
/// asked to create (at its start or handshake): returns the error after
/// checking it names the driver and left the store as it was.
async fn create_fails(mode: &str) -> Error {
    let s = Setup::new(&[mode]);
    let err = bounded(&format!("create in {mode}"), s.engine.create(s.spec(mode)))
        .await
        .expect_err("create in a misbehaving sandbox must fail");
    assert!(err.to_string().contains(mode), "error does not name driver {mode}: {err}");
    s.assert_store_empty();
    bounded("closing the engine", s.engine.close()).await;
    err
}

/// Stdio for a command whose streams nobody reads.
fn null_stdio() -> StdioFds {
    let null = |write: bool| {
        std::fs::OpenOptions::new().read(!write).write(write).open("/dev/null").expect("/dev/null").into()
    };
    StdioFds { stdin: null(false), stdout: null(true), stderr: null(true) }
}

/// Creates a box in sandbox `mode`, whose driver fails during
/// `sandbox.create` without saying what it made: the error names the driver
/// and says `tinybox rm` removes the box, and the store keeps one
/// `creating` record under that id. Returns the underlying error.
async fn create_fails_mid_call(mode: &str) -> Error {
    let s = Setup::new(&[mode]);
    let err = bounded(&format!("create in {mode}"), s.engine.create(s.spec(mode)))
        .await
        .expect_err("create in a misbehaving sandbox must fail");
    let message = err.to_string();
    assert!(message.contains(mode), "error does not name driver {mode}: {message}");
    let Error::CreateUnsettled { id, source } = err else { panic!("expected CreateUnsettled, got {err:?}") };
    assert!(message.contains(&format!("`tinybox rm {id}` removes whatever was made")), "{message}");
    let records = s.engine.list().expect("list");
    assert_eq!(records.len(), 1, "the reservation must be kept: {records:?}");
    assert_eq!(records[0].id, id);
    assert_eq!(records[0].phase, tinybox_core::model::Phase::Creating);
    bounded("closing the engine", s.engine.close()).await;
    *source
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_exits_before_the_handshake_is_reported_dead_with_its_last_words() {
    let err = create_fails("exit-early").await;
    // It exits on its own, so core sees it die rather than misbehave.
    match &err {
        Error::DriverDied { driver, status, stderr_tail } => {
            assert_eq!(driver, "exit-early");
            assert_eq!(status, "exit status 3");
            assert!(stderr_tail.contains("exiting before the handshake"), "stderr tail: {stderr_tail:?}");
        }
        other => panic!("expected DriverDied, got {other:?}"),
    }
    assert!(err.to_string().contains("exiting before the handshake"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_of_another_protocol_version_is_refused() {
    let err = create_fails("wrong-version").await;
    match &err {
        Error::Protocol { driver, detail } => {
            assert_eq!(driver, "wrong-version");
            assert!(detail.contains("99.0.0"), "detail: {detail}");
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_writes_garbage_is_refused() {
    let err = create_fails("garbage").await;
    match &err {
        Error::Protocol { driver, detail } => {
            assert_eq!(driver, "garbage");
            assert!(detail.contains("not JSON"), "detail: {detail}");
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_never_answers_the_handshake_times_out() {
    let err = create_fails("hang").await;
    match &err {
        Error::DriverTimeout { driver, what, .. } => {
            assert_eq!(driver, "hang");
            assert_eq!(what, "the handshake");
        }
        other => panic!("expected DriverTimeout, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_calls_before_answering_the_handshake_is_refused() {
    let err = create_fails("talks-first").await;
    match &err {
        Error::Protocol { driver, detail } => {
            assert_eq!(driver, "talks-first");
            assert!(detail.contains("before answering the handshake"), "detail: {detail}");
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_dies_during_create_is_reported_dead_with_its_last_words() {
    let err = create_fails_mid_call("dies-mid-call").await;
    match &err {
        Error::DriverDied { driver, status, stderr_tail } => {
            assert_eq!(driver, "dies-mid-call");
            assert_eq!(status, "exit status 7");
            assert!(stderr_tail.contains("about to die"), "stderr tail: {stderr_tail:?}");
        }
        other => panic!("expected DriverDied, got {other:?}"),
    }
    assert!(err.to_string().contains("about to die"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_dies_during_exec_is_reported_dead_and_the_box_is_kept() {
    let mode = "dies-mid-exec";
    let s = Setup::new(&[mode]);
    let info = bounded("create", s.engine.create(s.spec(mode))).await.expect("create succeeds");
    let before = s.engine.list().unwrap();
    let run =
        s.engine.exec(&info.id, ExecRequest::new(["true"]), null_stdio(), Target::Workspace, std::future::pending());
    let err = bounded("exec", run).await.expect_err("exec in a dying sandbox must fail");
    match &err {
        Error::DriverDied { driver, status, stderr_tail } => {
            assert_eq!(driver, mode);
            assert_eq!(status, "exit status 7");
            assert!(stderr_tail.contains("about to die"), "stderr tail: {stderr_tail:?}");
        }
        other => panic!("expected DriverDied, got {other:?}"),
    }
    assert!(err.to_string().contains(mode), "{err}");
    assert_eq!(s.engine.list().unwrap(), before, "a failed exec changed the store");
    bounded("closing the engine", s.engine.close()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_never_answers_create_times_out() {
    let err = create_fails_mid_call("hangs-mid-call").await;
    match &err {
        Error::DriverTimeout { driver, what, after, .. } => {
            assert_eq!(driver, "hangs-mid-call");
            assert_eq!(what, "sandbox.create");
            assert_eq!(*after, tinybox_tests::short_timeouts().operation);
        }
        other => panic!("expected DriverTimeout, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_contradicting_declaration_is_refused_at_the_handshake() {
    let err = create_fails("liar").await;
    match &err {
        Error::Protocol { driver, detail } => {
            assert_eq!(driver, "liar");
            assert!(detail.contains("resource_limits"), "detail: {detail}");
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_driver_is_refused_where_a_sandbox_is_needed() {
    let err = create_fails("wrong-role").await;
    match &err {
        Error::Protocol { driver, detail } => {
            assert_eq!(driver, "wrong-role");
            assert!(detail.contains("host driver"), "detail: {detail}");
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_gives_another_name_is_refused() {
    let err = create_fails("wrong-name").await;
    match &err {
        Error::Protocol { driver, detail } => {
            assert_eq!(driver, "wrong-name");
            assert!(detail.contains("someone-else"), "detail: {detail}");
        }
        other => panic!("expected Protocol, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_driver_is_unavailable_with_its_reason() {
    let err = create_fails("unhealthy").await;
    match &err {
        Error::DriverUnavailable { driver, detail } => {
            assert_eq!(driver, "unhealthy");
            assert_eq!(detail, "needs frobnicator; install package frob");
        }
        other => panic!("expected DriverUnavailable, got {other:?}"),
    }
}

/// The modes that fail at the handshake, and those that handshake properly.
const FAIL_AT_HANDSHAKE: [&str; 8] =
    ["exit-early", "wrong-version", "garbage", "hang", "talks-first", "liar", "wrong-name", "unhealthy"];
const HANDSHAKE_FINE: [&str; 4] = ["dies-mid-call", "dies-mid-exec", "hangs-mid-call", "declares-nothing"];

async fn reports_for(modes: &[&str]) -> Vec<DriverReport> {
    let s = Setup::new(modes);
    let reports = bounded("driver_reports", s.engine.driver_reports()).await;
    for mode in modes {
        assert_eq!(reports.iter().filter(|r| r.name == *mode).count(), 1, "{mode} is not listed once: {reports:#?}");
    }
    reports
}

fn report<'a>(reports: &'a [DriverReport], mode: &str) -> &'a DriverReport {
    reports.iter().find(|r| r.name == mode).expect("listed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_reports_list_every_misbehaving_driver_without_hanging() {
    let mut modes = FAIL_AT_HANDSHAKE.to_vec();
    modes.retain(|m| *m != "wrong-name"); // see the test below
    modes.extend(HANDSHAKE_FINE);
    modes.push("wrong-role");
    let reports = reports_for(&modes).await;
    for mode in FAIL_AT_HANDSHAKE.iter().filter(|m| **m != "wrong-name") {
        let r = report(&reports, mode);
        let unhealthy = r.health.as_ref().is_some_and(|h| !h.ok);
        assert!(r.error.is_some() || unhealthy, "{mode} is reported usable: {r:#?}");
        assert!(!r.usable_sandbox(), "{mode} is reported usable: {r:#?}");
        // An error from starting the driver names it; a declaration's flaw
        // is listed under the driver's name.
        if let (Some(e), false) = (&r.error, *mode == "liar") {
            assert!(e.contains(mode), "{mode}'s error does not name it: {e}");
        }
    }
    let unhealthy = report(&reports, "unhealthy");
    assert_eq!(
        unhealthy.health.as_ref().and_then(|h| h.detail.as_deref()),
        Some("needs frobnicator; install package frob")
    );
    assert!(report(&reports, "exit-early").error.as_ref().unwrap().contains("exiting before the handshake"));
    assert!(report(&reports, "liar").error.as_ref().unwrap().contains("resource_limits"));
    // A host driver is a fine host; it is just never a sandbox.
    let host = report(&reports, "wrong-role");
    assert_eq!(host.role, Some(Role::Host));
    assert!(host.error.is_none() && !host.usable_sandbox(), "{host:#?}");
    // These misbehave only when called, so their handshakes describe them.
    for mode in HANDSHAKE_FINE {
        let r = report(&reports, mode);
        assert!(r.usable_sandbox(), "{mode}: {r:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_reports_flag_a_driver_whose_handshake_gives_another_name() {
    let reports = reports_for(&["wrong-name"]).await;
    let r = report(&reports, "wrong-name");
    // Using it is refused (see a_driver_that_gives_another_name_is_refused),
    // so listing it as usable would have choose_sandbox pick a sandbox
    // that every create then refuses.
    assert!(r.error.as_ref().is_some_and(|e| e.contains("someone-else")), "{r:#?}");
    assert!(!r.usable_sandbox(), "{r:#?}");
}
