//! The request rules, without drivers: each refusal by its variant, and
//! the spec each accepted request turns into.

use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::driver::DriverConfig;
use crate::store::{MemoryStore, Store};

fn request(json: &str) -> CreateRequest {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

fn spec(r: &CreateRequest) -> Result<BoxSpec, Error> {
    r.spec(SandboxName::passthrough(), None)
}

fn refusal(r: &CreateRequest) -> RequestError {
    match spec(r) {
        Err(Error::Request(e)) => e,
        other => panic!("expected a RequestError, got {other:?}"),
    }
}

#[test]
fn unknown_fields_are_refused_not_ignored() {
    let err = serde_json::from_str::<CreateRequest>(r#"{"memroy": "1G"}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field `memroy`"), "{err}");
}

#[test]
fn one_source_at_most() {
    assert_eq!(refusal(&request(r#"{"image": "busybox", "git": "https://x"}"#)), RequestError::SourcesConflict);
    let s = spec(&request(r#"{"image": "busybox"}"#)).unwrap();
    assert_eq!(s.source, Some(WorkspaceSource::OciImage { reference: "busybox".into() }));
    assert_eq!(spec(&request("{}")).unwrap().source, None);
}

#[test]
fn lifetimes() {
    assert_eq!(spec(&request("{}")).unwrap().lifecycle, Lifecycle::default());
    assert_eq!(spec(&request(r#"{"ttl_secs": 90}"#)).unwrap().lifecycle, Lifecycle::Ephemeral { ttl_secs: 90 });
    assert_eq!(
        spec(&request(r#"{"persistent": true}"#)).unwrap().lifecycle,
        Lifecycle::Persistent { autosnapshot_secs: 60 }
    );
    assert_eq!(
        spec(&request(r#"{"autosnapshot_secs": 5}"#)).unwrap().lifecycle,
        Lifecycle::Persistent { autosnapshot_secs: 5 },
        "a cadence implies persistent"
    );
    assert_eq!(refusal(&request(r#"{"ttl_secs": 9, "persistent": true}"#)), RequestError::TtlAndPersistent);
    assert_eq!(
        refusal(&request(r#"{"persistent": false, "autosnapshot_secs": 5}"#)),
        RequestError::AutosnapshotNotPersistent
    );
    assert_eq!(refusal(&request(r#"{"ttl_secs": 0}"#)), RequestError::NotPositive { what: "ttl", secs: 0 });
    let huge = 99_999_999_999_999u64 * 86_400;
    assert_eq!(
        refusal(&request(&format!(r#"{{"ttl_secs": {huge}}}"#))),
        RequestError::TooLong { what: "ttl", secs: huge }
    );
    let year = MAX_LIFETIME.as_secs();
    assert!(spec(&request(&format!(r#"{{"ttl_secs": {year}}}"#))).is_ok(), "a year is the bound, inclusive");
    assert!(matches!(
        refusal(&request(&format!(r#"{{"autosnapshot_secs": {}}}"#, year + 1))),
        RequestError::TooLong { what: "autosnapshot interval", .. }
    ));
}

#[test]
fn cpus_sizes_and_ports() {
    assert_eq!(refusal(&request(r#"{"cpus": 1e-9}"#)), RequestError::Cpus(1e-9));
    assert_eq!(refusal(&request(r#"{"cpus": 5000}"#)), RequestError::Cpus(5000.0));
    assert_eq!(spec(&request(r#"{"cpus": 0.5}"#)).unwrap().resources.cpus, Some(0.5));
    let s = spec(&request(r#"{"memory": "512M", "disk": 1024}"#)).unwrap();
    assert_eq!((s.resources.memory_bytes, s.resources.disk_bytes), (Some(512 << 20), Some(1024)));
    assert_eq!(refusal(&request(r#"{"memory": "lots"}"#)), RequestError::Size("lots".into()));
    let s = spec(&request(r#"{"ports": ["8080:80", "22", {"host": 9000, "guest": 90}]}"#)).unwrap();
    let pairs: Vec<(u16, u16)> = s.ports.iter().map(|p| (p.host, p.guest)).collect();
    assert_eq!(pairs, [(8080, 80), (22, 22), (9000, 90)]);
    assert_eq!(refusal(&request(r#"{"ports": ["0:80"]}"#)), RequestError::Port("0:80".into()));
    assert_eq!(refusal(&request(r#"{"ports": [{"host": 70000, "guest": 1}]}"#)), RequestError::Port("70000:1".into()));
    assert!(matches!(spec(&request(r#"{"pids": 0}"#)), Err(Error::Spec(_))), "zero limits are the spec's rule");
}

#[test]
fn accel_is_the_accel_option_and_a_key_given_twice_is_refused() {
    let s = spec(&request(r#"{"accel": "tcg", "options": {"cpu": "max"}}"#)).unwrap();
    assert_eq!(s.options, [("accel".to_owned(), "tcg".to_owned()), ("cpu".to_owned(), "max".to_owned())].into());
    let err = refusal(&request(r#"{"accel": "kvm", "options": {"accel": "tcg"}}"#));
    assert_eq!(
        err,
        RequestError::OptionTwice {
            key: "accel".into(),
            first: "tcg".into(),
            second: "kvm".into(),
            hint: " (accel sets it too)"
        }
    );
    assert!(spec(&request(r#"{"accel": "tcg", "options": {"accel": "tcg"}}"#)).is_ok(), "the same value twice agrees");
}

#[test]
fn placements_default_to_local_and_a_runner_to_passthrough() {
    let s = spec(&request("{}")).unwrap();
    assert_eq!(s.workspace, Placement::local_passthrough());
    assert!(!s.has_separate_runner());
    let s = r#"{"host": "ssh:me@builder", "runner_sandbox": "namespace"}"#;
    let s = request(s).spec(SandboxName::new("docker").unwrap(), None).unwrap();
    assert_eq!(s.workspace.host, crate::hosts::ad_hoc_name("me@builder"));
    assert_eq!(s.runner, Placement::new(HostName::local(), SandboxName::new("namespace").unwrap()));
    let err = serde_json::from_str::<CreateRequest>(r#"{"host": "ssh:-oProxyCommand=x"}"#).unwrap_err();
    assert!(err.to_string().contains("starts with '-'"), "{err}");
}

#[test]
fn a_workspace_is_a_project_directory_never_the_machine_or_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    assert_eq!(workspace_dir(&project, None).unwrap(), std::fs::canonicalize(&project).unwrap());

    for system in ["/", "/proc", "/sys", "/dev", "/etc", "/usr", "/boot", "/usr/bin", "/proc/self/root"] {
        let err = workspace_dir(Path::new(system), None).unwrap_err();
        assert!(matches!(err, RequestError::SystemWorkspace { .. }), "{system}: {err}");
    }
    // A symlink is judged by where it leads.
    let link = tmp.path().join("innocent");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    let err = workspace_dir(&link, None).unwrap_err();
    assert!(matches!(err, RequestError::SystemWorkspace { .. }));
    assert!(err.to_string().contains("innocent (which leads to /etc) would hand the box"), "{err}");
    let err = workspace_dir(Path::new("/etc"), None).unwrap_err().to_string();
    assert!(err.starts_with("workspace /etc would hand the box"), "nothing to add: {err}");

    let store = tmp.path().join("store");
    std::fs::create_dir_all(store.join("drivers")).unwrap();
    for bad in [store.clone(), store.join("drivers"), tmp.path().to_owned()] {
        let err = workspace_dir(&bad, Some(&store)).unwrap_err();
        assert!(
            matches!(err, RequestError::SystemWorkspace { what: "tinybox's own records (the store)", .. }),
            "{}",
            bad.display()
        );
    }
    assert!(workspace_dir(&project, Some(&store)).is_ok(), "a sibling of the store is fine");

    let file = tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    assert!(matches!(workspace_dir(&file, None).unwrap_err(), RequestError::Workspace { .. }));
    let missing = tmp.path().join("missing");
    let err = workspace_dir(&missing, None).unwrap_err();
    assert!(matches!(&err, RequestError::Workspace { path, .. } if *path == missing), "{err}");
}

fn engine() -> Tinybox {
    let config = DriverConfig { search_dirs: Vec::new(), ..DriverConfig::from_env() };
    Tinybox::with_parts(Arc::new(MemoryStore::new()), None, Arc::new(ManualClock::new(1000)), config).unwrap()
}

use std::sync::Arc;

#[tokio::test]
async fn a_plan_names_what_it_chose_only_when_it_chose() {
    let tb = engine();
    let plan = tb.plan_create(&request(r#"{"sandbox": "passthrough", "ttl_secs": 60}"#)).await.unwrap();
    assert_eq!(plan.choice, None);
    assert_eq!(plan.spec.lifecycle.clone(), Lifecycle::ephemeral(Duration::from_secs(60)));
    // No driver installed: nothing to choose, and it is said.
    let err = tb.plan_create(&request("{}")).await.unwrap_err();
    assert!(matches!(err, Error::NoSandbox(_)), "{err}");
    assert!(err.to_string().contains("--sandbox passthrough"), "{err}");
}

#[tokio::test]
async fn an_invalid_request_saves_no_host() {
    let tb = engine();
    let bad = request(r#"{"sandbox": "passthrough", "host": "ssh:builder", "ttl_secs": 0}"#);
    assert!(tb.plan_create(&bad).await.is_err());
    assert!(tb.drivers.host_entry(&crate::hosts::ad_hoc_name("builder")).is_none());
    let good = request(r#"{"sandbox": "passthrough", "host": "ssh:builder"}"#);
    tb.plan_create(&good).await.unwrap();
    let entry = tb.drivers.host_entry(&crate::hosts::ad_hoc_name("builder")).unwrap();
    assert_eq!(entry.config["destination"], "builder");
}

fn file_engine(dir: &std::path::Path) -> Tinybox {
    let config = DriverConfig { search_dirs: Vec::new(), ..DriverConfig::from_env() };
    Tinybox::open_with(dir, config).unwrap()
}

async fn planned_namespace(tb: &Tinybox, json: &str) -> String {
    tb.plan_create(&request(json)).await.unwrap().spec.namespace
}

#[tokio::test]
async fn each_fresh_store_gets_a_namespace_of_its_own_and_keeps_it() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (ta, tb) = (file_engine(a.path()), file_engine(b.path()));
    let first = planned_namespace(&ta, r#"{"sandbox": "passthrough"}"#).await;
    let other = planned_namespace(&tb, r#"{"sandbox": "passthrough"}"#).await;
    assert_ne!(first, other, "two stores would name each other's containers");
    assert_ne!(first, "default");
    assert_eq!(planned_namespace(&ta, r#"{"sandbox": "passthrough"}"#).await, first, "a store keeps its namespace");
    assert_eq!(Settings::load(a.path()).unwrap().namespace, Some(first));
}

#[tokio::test]
async fn a_store_with_boxes_in_default_keeps_default() {
    let dir = tempfile::tempdir().unwrap();
    // A store written before namespaces were per store: a box, no config.json.
    let old = crate::store::FileStore::open(dir.path()).unwrap();
    let spec = BoxSpec::new(Placement::local_passthrough());
    assert_eq!(spec.namespace, "default");
    old.insert(BoxInfo::creating(crate::model::BoxId::new("box-0").unwrap(), spec, None)).unwrap();
    assert!(!Settings::path(dir.path()).exists());
    let tb = file_engine(dir.path());
    assert_eq!(planned_namespace(&tb, r#"{"sandbox": "passthrough"}"#).await, "default");
    assert_eq!(Settings::load(dir.path()).unwrap().namespace.as_deref(), Some("default"));
}

#[tokio::test]
async fn a_requested_namespace_wins_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tb = file_engine(dir.path());
    assert_eq!(planned_namespace(&tb, r#"{"sandbox": "passthrough", "namespace": "x"}"#).await, "x");
    assert!(!Settings::path(dir.path()).exists(), "deliberate sharing changed the store's own namespace");
    // A refused request records nothing either.
    assert!(tb.plan_create(&request(r#"{"sandbox": "passthrough", "ttl_secs": 0}"#)).await.is_err());
    assert!(!Settings::path(dir.path()).exists());
    // A namespace in config.json is the store's.
    std::fs::write(Settings::path(dir.path()), r#"{"namespace": "alice"}"#).unwrap();
    assert_eq!(planned_namespace(&tb, r#"{"sandbox": "passthrough"}"#).await, "alice");
    assert_eq!(planned_namespace(&tb, r#"{"sandbox": "passthrough", "namespace": "x"}"#).await, "x");
}

/// The bus's `allow_hosts` reaches the spec through the request's rules.
#[test]
fn a_bus_request_carries_allow_hosts_into_the_spec() {
    use tinybox_sdk::model::{NetworkPolicy, SandboxName};
    let hosts = |h: &[&str]| -> Vec<String> { h.iter().map(|s| (*s).to_owned()).collect() };
    let request: CreateRequest =
        serde_json::from_value(serde_json::json!({"sandbox": "namespace", "allow_hosts": ["A.test:8080"]})).unwrap();
    let spec = request.spec(SandboxName::new("namespace").unwrap(), None).unwrap();
    assert_eq!((spec.network, spec.allow_hosts), (Some(NetworkPolicy::Allowlist), hosts(&["a.test:8080"])));
    let bad: CreateRequest = serde_json::from_value(serde_json::json!({"allow_hosts": ["127.1"]})).unwrap();
    let err = bad.spec(SandboxName::new("namespace").unwrap(), None).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Invalid);
    assert!(err.to_string().starts_with(r#"allow entry "127.1": "#), "{err}");
    // Left out, the field is not written: older readers see the request they know.
    assert!(serde_json::to_value(CreateRequest::default()).unwrap().get("allow_hosts").is_none());
}

/// The bus's `secrets`, `secret_hosts` and `secret_headers` reach the spec
/// through the request's rules; the spec keeps each source, never its value.
#[test]
fn a_bus_request_carries_secrets_into_the_spec_as_sources() {
    use tinybox_sdk::model::SandboxName;
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "the-real-value\n").unwrap();
    let source = format!("file:{}", token.path().display());
    let request: CreateRequest = serde_json::from_value(serde_json::json!({
        "sandbox": "namespace",
        "allow_hosts": ["api.test"],
        "secrets": {"T": source},
        "secret_hosts": {"T": ["API.test"]},
        "secret_headers": {"api.test": ["X-Key: {T}"]},
    }))
    .unwrap();
    let spec = request.spec(SandboxName::new("namespace").unwrap(), None).unwrap();
    assert_eq!(spec.secrets.sources["T"], source);
    assert_eq!(spec.secrets.hosts["T"], ["api.test"]);
    assert_eq!(spec.secrets.headers["api.test"], ["X-Key: {T}"]);
    let stored = serde_json::to_string(&spec).unwrap();
    assert!(!stored.contains("the-real-value"), "{stored}");
    assert!(serde_json::to_value(CreateRequest::default()).unwrap().get("secrets").is_none());
    let bad: CreateRequest = serde_json::from_value(serde_json::json!({
        "allow_hosts": ["api.test"], "secrets": {"T": source}, "secret_hosts": {"T": ["other.test"]},
    }))
    .unwrap();
    let err = bad.spec(SandboxName::new("namespace").unwrap(), None).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Invalid);
    assert!(err.to_string().contains(r#"names host "other.test", which is not on the allowlist"#), "{err}");
}
