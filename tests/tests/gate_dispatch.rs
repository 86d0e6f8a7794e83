//! The capability gate, end to end: with a sandbox that declares nothing,
//! every gated operation is refused with `Error::Unsupported` before the
//! driver hears of it — the driver's own log of the calls it received is
//! the witness. A box weaker than its sandbox's declaration is recorded as
//! it is, and refused (and taken down) below a floor. And an exec through
//! passthrough carries argv and streams byte for byte.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tinybox_core::clock::ManualClock;
use tinybox_core::error::Capability;
use tinybox_core::model::{
    BoxSpec, HostName, IsolationLevel, NetworkPolicy, Placement, PortMapping, SandboxName, SnapshotId, WorkspaceSource,
};
use tinybox_core::{Error, Target, Tinybox};
use tinybox_sdk::model::{ExecRequest, ExitStatus, Limit, SourceKind};
use tinybox_sdk::stdio::StdioFds;

const SANDBOX: &str = "declares-nothing";

/// Only a hang reaches this; it asserts nothing about speed.
const HANG_GUARD: Duration = Duration::from_secs(30);

async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG_GUARD, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {HANG_GUARD:?}"),
    }
}

/// An engine whose only extra driver is `declares-nothing`, which appends
/// each method it receives to `calls.log` beside its symlink.
struct Setup {
    dir: tempfile::TempDir,
    engine: Tinybox,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        let link = dir.path().join(format!("tinybox-driver-{SANDBOX}"));
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_misbehaving-driver"), link).expect("install the driver");
        let engine = tinybox_tests::engine(&[dir.path().to_path_buf()], Arc::new(ManualClock::new(1000)));
        Setup { dir, engine }
    }

    /// A plain box in `declares-nothing`: a local directory, nothing else asked.
    fn spec(&self) -> BoxSpec {
        let placement = Placement::new(HostName::local(), SandboxName::new(SANDBOX).unwrap());
        let mut spec = BoxSpec::new(placement);
        spec.source = Some(WorkspaceSource::LocalDir { path: self.workdir() });
        spec
    }

    fn workdir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// The methods the driver received, in order.
    fn calls(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.path().join("calls.log")).unwrap_or_default();
        log.lines().map(str::to_owned).collect()
    }
}

/// Checks `err` is the gate's refusal naming `declares-nothing` and exactly `capability`.
fn assert_unsupported(err: &Error, capability: &Capability) {
    match err {
        Error::Unsupported { sandbox, capability: what } => {
            assert_eq!(sandbox.as_str(), SANDBOX);
            assert_eq!(what, capability);
        }
        other => panic!("expected Unsupported({capability}), got {other:?}"),
    }
    assert!(err.to_string().contains(SANDBOX), "{err}");
}

fn no_limit(limit: Limit) -> Capability {
    Capability::Limit { limit, enforced: Default::default() }
}

/// Creates a box from `spec` as altered by `ask`, expecting the gate to
/// refuse `capability` with nothing but the handshake reaching the driver.
async fn create_is_refused(capability: Capability, ask: impl FnOnce(&mut BoxSpec)) {
    let s = Setup::new();
    let mut spec = s.spec();
    ask(&mut spec);
    let err = bounded("create", s.engine.create(spec)).await.expect_err("the gate must refuse");
    assert_unsupported(&err, &capability);
    assert!(s.engine.list().unwrap().is_empty(), "a refused create left a record");
    bounded("closing the engine", s.engine.close()).await;
    assert_eq!(s.calls(), ["handshake"], "the driver was called for a refused create");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_memory_limit_is_refused() {
    create_is_refused(no_limit(Limit::Memory), |s| s.resources.memory_bytes = Some(1 << 30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_cpu_limit_is_refused() {
    create_is_refused(no_limit(Limit::Cpu), |s| s.resources.cpus = Some(1.5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_pids_limit_is_refused() {
    create_is_refused(no_limit(Limit::Pids), |s| s.resources.pids = Some(64)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_disk_limit_is_refused() {
    create_is_refused(no_limit(Limit::Disk), |s| s.resources.disk_bytes = Some(1 << 30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_deny_is_refused() {
    create_is_refused(Capability::NetworkDeny, |s| s.network = Some(NetworkPolicy::Denied)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowlist_is_refused() {
    create_is_refused(Capability::NetworkAllowlist, |s| {
        s.network = Some(NetworkPolicy::Allowlist);
        s.allow_hosts = vec!["allowed.test:8080".into()];
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_is_refused() {
    create_is_refused(Capability::PortForward, |s| s.ports = vec![PortMapping { host: 18080, guest: 80 }]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolation_floor_above_its_declaration_is_refused() {
    create_is_refused(Capability::Isolation { floor: IsolationLevel::Kernel, declared: IsolationLevel::None }, |s| {
        s.min_isolation = Some(IsolationLevel::Kernel)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_image_source_is_refused() {
    create_is_refused(Capability::Source(SourceKind::OciImage), |s| {
        s.source = Some(WorkspaceSource::OciImage { reference: "docker.io/library/alpine:3".into() })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_source_is_refused() {
    create_is_refused(Capability::Source(SourceKind::Snapshot), |s| {
        s.source = Some(WorkspaceSource::Snapshot { id: SnapshotId::new("snap-1").unwrap() })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_box_is_created_but_never_snapshotted_or_forked() {
    let s = Setup::new();
    let info = bounded("create", s.engine.create(s.spec())).await.expect("a plain create is allowed");
    let ws = info.workspace.as_ref().expect("created");
    assert_eq!(ws.isolation, IsolationLevel::None);
    assert_eq!(ws.workdir.as_deref(), Some(s.workdir().to_str().unwrap()));
    let before = s.engine.list().unwrap();

    let err = bounded("snapshot", s.engine.snapshot(&info.id)).await.expect_err("snapshot must be refused");
    assert_unsupported(&err, &Capability::Snapshot);
    let err = bounded("fork", s.engine.fork(&info.id)).await.expect_err("fork must be refused");
    // Fork needs a snapshot first, so either refusal is the gate's.
    let Error::Unsupported { capability, .. } = &err else { panic!("expected Unsupported, got {err:?}") };
    assert!(matches!(capability, Capability::Snapshot | Capability::Fork), "refused {capability:?}");
    assert_unsupported(&err, capability);

    assert_eq!(s.engine.list().unwrap(), before, "a refused snapshot or fork changed the store");
    bounded("closing the engine", s.engine.close()).await;
    let calls = s.calls();
    assert_eq!(calls, ["handshake", "sandbox.create"]);
    assert!(!calls.iter().any(|c| c == "sandbox.snapshot"));
}

fn file_stdio(dir: &Path) -> StdioFds {
    StdioFds {
        stdin: std::fs::File::open("/dev/null").expect("/dev/null").into(),
        stdout: std::fs::File::create(dir.join("stdout")).expect("stdout file").into(),
        stderr: std::fs::File::create(dir.join("stderr")).expect("stderr file").into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_exec_carries_argv_and_streams_byte_for_byte() {
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = tinybox_tests::engine(&[], Arc::new(ManualClock::new(1000)));
    let mut spec = BoxSpec::new(Placement::local_passthrough());
    spec.source = Some(WorkspaceSource::LocalDir { path: dir.path().to_path_buf() });
    let info = bounded("create", engine.create(spec)).await.expect("create a passthrough box");

    let argv =
        ["sh", "-c", "printf '%s|' \"$@\"; echo; echo err >&2; exit 3", "sh", "a b", "'q'", ";", "$(x)", "new\nline"];
    let run = engine.exec(
        &info.id,
        ExecRequest::new(argv),
        file_stdio(dir.path()),
        Target::Workspace,
        std::future::pending(),
    );
    let outcome = bounded("exec", run).await.expect("exec");
    assert_eq!(outcome.status, ExitStatus { code: Some(3), signal: None });
    assert!(!outcome.cancelled);
    assert_eq!(std::fs::read(dir.path().join("stdout")).unwrap(), b"a b|'q'|;|$(x)|new\nline|\n");
    assert_eq!(std::fs::read(dir.path().join("stderr")).unwrap(), b"err\n");

    bounded("remove", engine.remove(&info.id)).await.expect("remove");
    bounded("closing the engine", engine.close()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_option_is_refused() {
    create_is_refused(Capability::Option { name: "accel".into(), takes: vec![] }, |s| {
        s.options.insert("accel".into(), "tcg".into());
    })
    .await;
}

/// `lowers-isolation` declares kernel isolation and the option `accel`, and
/// makes boxes that say they have less. Its engine keeps a file store in
/// `store`, so drivers get a state directory there.
struct Lowering {
    dir: tempfile::TempDir,
    store: tempfile::TempDir,
    engine: Tinybox,
}

const LOWERING: &str = "lowers-isolation";

/// A verifier whose every verdict passes.
struct Passes;

#[async_trait::async_trait]
impl tinybox_core::trust::Verifier for Passes {
    async fn verify(
        &self,
        _engine: &Tinybox,
        sandbox: &SandboxName,
        options: &std::collections::BTreeMap<String, String>,
    ) -> Result<tinybox_core::store::verdicts::Verdict, Error> {
        Ok(tinybox_core::store::verdicts::Verdict {
            sandbox: sandbox.to_string(),
            digest: "test".into(),
            declared: None,
            passed: true,
            passes: 1,
            fails: 0,
            skipped: 0,
            failed: Vec::new(),
            verified_at: 0,
            kit_version: "test".into(),
            create_options: options.clone(),
        })
    }
}

impl Lowering {
    fn new() -> Lowering {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = tempfile::tempdir().expect("store dir");
        let link = dir.path().join(format!("tinybox-driver-{LOWERING}"));
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_misbehaving-driver"), link).expect("install the driver");
        let drivers = tinybox_tests::driver_config(&[dir.path().to_path_buf()], tinybox_tests::short_timeouts());
        let mut engine = Tinybox::open_with(store.path(), drivers).expect("engine");
        // What is tested here is a box's own isolation, not the trust rule
        // (tests/tests/trust.rs): every declaration is taken as verified.
        engine.set_verifier(std::sync::Arc::new(Passes));
        Lowering { dir, store, engine }
    }

    fn spec(&self) -> BoxSpec {
        let placement = Placement::new(HostName::local(), SandboxName::new(LOWERING).unwrap());
        let mut spec = BoxSpec::new(placement);
        spec.source = Some(WorkspaceSource::LocalDir { path: self.dir.path().to_path_buf() });
        spec
    }

    fn calls(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.path().join("calls.log")).unwrap_or_default();
        log.lines().map(str::to_owned).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_weaker_than_its_declaration_records_its_own_isolation() {
    let s = Lowering::new();
    let info = bounded("create", s.engine.create(s.spec())).await.expect("create");
    let ws = info.workspace.as_ref().expect("created");
    assert_eq!(ws.isolation, IsolationLevel::Process, "the box's own isolation, not the declaration's");
    assert_eq!(s.engine.get(&info.id).unwrap().workspace.unwrap().isolation, IsolationLevel::Process, "as stored");

    // The option reaches the driver; a claim above the declaration is capped.
    let mut spec = s.spec();
    spec.options.insert("accel".into(), "kvm".into());
    let info = bounded("create with accel=kvm", s.engine.create(spec)).await.expect("create");
    let ws = info.workspace.as_ref().expect("created");
    assert_eq!(ws.handle["options"], serde_json::json!({"accel": "kvm"}));
    assert_eq!(ws.isolation, IsolationLevel::Kernel, "a driver claiming hardware for a kernel sandbox is capped");
    assert_eq!(info.spec.options.get("accel").map(String::as_str), Some("kvm"), "the spec records the option");
    bounded("closing the engine", s.engine.close()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_above_the_box_s_own_isolation_fails_and_leaves_no_box() {
    let s = Lowering::new();
    let mut spec = s.spec();
    spec.min_isolation = Some(IsolationLevel::Kernel);
    let err = bounded("create", s.engine.create(spec)).await.expect_err("the box is below the floor");
    match &err {
        Error::Unsupported { sandbox, capability } => {
            assert_eq!(sandbox.as_str(), LOWERING);
            assert_eq!(
                *capability,
                Capability::BoxIsolation { floor: IsolationLevel::Kernel, has: IsolationLevel::Process }
            );
            assert_eq!(capability.to_string(), "isolation kernel or stronger (this box has process)");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert!(s.engine.list().unwrap().is_empty(), "a box below the floor was kept in the store");
    bounded("closing the engine", s.engine.close()).await;
    assert_eq!(s.calls(), ["handshake", "sandbox.create", "sandbox.destroy"], "the weak box was not taken down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_is_handed_a_private_state_dir_in_the_store() {
    use std::os::unix::fs::PermissionsExt;
    let s = Lowering::new();
    let info = bounded("create", s.engine.create(s.spec())).await.expect("create");
    bounded("closing the engine", s.engine.close()).await;
    let expected = s.store.path().join("drivers").join(LOWERING);
    let handle = &info.workspace.as_ref().expect("created").handle;
    assert_eq!(handle["state_dir"], serde_json::json!(expected), "the state dir the driver's handshake carried");
    assert!(expected.is_dir());
    assert_eq!(std::fs::metadata(&expected).unwrap().permissions().mode() & 0o777, 0o700);
}

/// A record whose create never answered has no handle; removing it asks
/// the sandbox to destroy what it made for the box's namespace and
/// identifier, then forgets the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_interrupted_box_asks_its_sandbox_to_destroy_it() {
    let s = Setup::new();
    let id = tinybox_core::model::BoxId::new("box-0").unwrap();
    s.engine.store().insert(tinybox_core::model::BoxInfo::creating(id.clone(), s.spec(), Some(1))).unwrap();
    bounded("remove", s.engine.remove(&id)).await.expect("removed");
    assert!(s.engine.list().unwrap().is_empty());
    bounded("closing the engine", s.engine.close()).await;
    assert_eq!(s.calls(), ["handshake", "sandbox.destroy"]);
}
