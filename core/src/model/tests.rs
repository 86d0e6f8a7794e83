//! Unit tests of the box model: specs, placements and their defaults.

use super::*;

fn spec() -> BoxSpec {
    BoxSpec::new(Placement::local_passthrough())
}

#[test]
fn new_colocates_and_with_runner_splits() {
    let s = spec();
    assert_eq!(s.runner, s.workspace);
    assert!(!s.has_separate_runner());
    let remote = Placement::new(HostName::new("builder-01").unwrap(), SandboxName::new("docker").unwrap());
    let split = BoxSpec::new(remote.clone()).with_runner(Placement::local_passthrough());
    assert_eq!(split.workspace, remote);
    assert_eq!(split.runner, Placement::local_passthrough());
    assert!(split.has_separate_runner());
}

#[test]
fn defaults_are_the_specs() {
    let s = spec();
    assert_eq!(s.lifecycle, Lifecycle::Ephemeral { ttl_secs: 3600 });
    assert_eq!(Lifecycle::persistent(Lifecycle::DEFAULT_AUTOSNAPSHOT), Lifecycle::Persistent { autosnapshot_secs: 60 });
    assert_eq!(NetworkPolicy::default(), NetworkPolicy::Denied);
    assert_eq!(s.namespace, "default");
}

#[test]
fn zero_lifetimes_and_limits_are_rejected() {
    let mut s = spec();
    s.lifecycle = Lifecycle::Ephemeral { ttl_secs: 0 };
    assert!(s.validate().unwrap_err().to_string().contains("ttl 0s"));
    let mut s = spec();
    s.lifecycle = Lifecycle::Persistent { autosnapshot_secs: 0 };
    assert!(s.validate().unwrap_err().to_string().contains("autosnapshot"));
    let mut s = spec();
    s.resources.pids = Some(0);
    assert!(s.validate().unwrap_err().to_string().contains("pids limit 0 is not positive"));
    let mut s = spec();
    s.namespace = "a/b".into();
    assert!(s.validate().is_err());
}

#[test]
fn a_box_without_creation_time_never_expires() {
    let mut info = BoxInfo::creating(BoxId::new("box-0").unwrap(), spec(), None);
    assert_eq!(info.expires_at(), None);
    assert!(!info.is_expired(u64::MAX));
    info.created_at = Some(1_000);
    assert!(!info.is_expired(1_000 + 3599));
    assert!(info.is_expired(1_000 + 3600));
    info.spec.lifecycle = Lifecycle::persistent(Lifecycle::DEFAULT_AUTOSNAPSHOT);
    assert!(!info.is_expired(u64::MAX));
}

#[test]
fn a_record_from_an_older_build_loads() {
    // No created_at, phase, runner, snapshots, ports, env, namespace or lifecycle.
    let old = r#"{
        "id": "box-3",
        "spec": {
            "workspace": {"host": "local", "sandbox": "passthrough"},
            "runner": {"host": "local", "sandbox": "passthrough"}
        },
        "workspace": {
            "placement": {"host": "local", "sandbox": "passthrough"},
            "isolation": "none",
            "network": "not_confined"
        }
    }"#;
    let info: BoxInfo = serde_json::from_str(old).unwrap();
    assert_eq!(info.created_at, None);
    assert_eq!(info.phase, Phase::Created);
    assert!(info.spec.ports.is_empty());
    assert!(info.spec.options.is_empty());
    assert!(!info.is_expired(u64::MAX));
    assert_eq!(info.workspace_dir, None);
    assert_eq!(info.bound_dir(), None);
}

#[test]
fn the_bound_directory_is_the_record_or_an_old_records_own_local_directory() {
    let mut info = BoxInfo::creating(BoxId::new("box-0").unwrap(), spec(), None);
    assert!(serde_json::to_value(&info).unwrap().get("workspace_dir").is_none());
    // A record from before core recorded the directory: its own LocalDir source.
    info.spec.source = Some(WorkspaceSource::LocalDir { path: "/home/me/p".into() });
    assert_eq!(info.bound_dir(), Some(std::path::Path::new("/home/me/p")));
    // ...but only on this machine: a remote box was bound from a synced copy.
    info.spec.workspace.host = HostName::new("builder").unwrap();
    assert_eq!(info.bound_dir(), None);
    // A box from a snapshot binds only what was recorded.
    info.spec.source = Some(WorkspaceSource::Snapshot { id: SnapshotId::new("sha-1").unwrap() });
    assert_eq!(info.bound_dir(), None);
    info.workspace_dir = Some("/srv/ws".into());
    assert_eq!(info.bound_dir(), Some(std::path::Path::new("/srv/ws")));
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["workspace_dir"], "/srv/ws");
    assert_eq!(serde_json::from_value::<BoxInfo>(json).unwrap(), info);
}

#[test]
fn options_are_recorded_only_when_there_are_some() {
    let mut s = spec();
    assert!(serde_json::to_value(&s).unwrap().get("options").is_none());
    s.options.insert("accel".into(), "tcg".into());
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["options"], serde_json::json!({"accel": "tcg"}));
    assert_eq!(serde_json::from_value::<BoxSpec>(json).unwrap(), s);
}

#[test]
fn a_hand_edited_bad_name_is_refused() {
    let bad = r#"{"id": "box/../../etc", "spec": {
        "workspace": {"host": "local", "sandbox": "passthrough"},
        "runner": {"host": "local", "sandbox": "passthrough"}}}"#;
    assert!(serde_json::from_str::<BoxInfo>(bad).unwrap_err().to_string().contains("'/'"));
}
