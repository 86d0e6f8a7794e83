//! The rule every docker command line keeps: no value of a box's
//! environment is on it (every user of the host reads command lines), only
//! `--env-file` naming the pipe its client wrapper feeds.

use std::collections::BTreeMap;
use std::path::Path;

use tinybox_sdk::model::{BoxId, ExecRequest, NetworkPolicy, Resources, SnapshotId};
use tinybox_sdk::protocol::{SnapshotExecParams, StdioRef};

use super::*;

/// Values that would be easy to miss: a plain word, one with spaces and
/// quotes, an `=` inside, and a name that is a shell's own.
fn secrets() -> BTreeMap<String, String> {
    [
        ("TOKEN".to_owned(), "hunter2-plain".to_owned()),
        ("QUOTED".to_owned(), "a 'b' \"c\" $(d)".to_owned()),
        ("PATH".to_owned(), "/tmp/path-value".to_owned()),
        ("odd.name-1".to_owned(), "x=y=z".to_owned()),
    ]
    .into()
}

fn assert_no_value(argv: &[String], env: &BTreeMap<String, String>) {
    for value in env.values() {
        assert!(!argv.iter().any(|w| w.contains(value.as_str())), "{value:?} is on {argv:?}");
    }
    assert!(!argv.iter().any(|w| w == "--env" || w == "-e"), "{argv:?}");
    assert!(argv.windows(2).any(|w| w == ["--env-file", crate::env_file::ENV_FILE]), "{argv:?}");
}

#[test]
fn no_docker_command_line_carries_a_value_of_the_boxs_environment() {
    let env = secrets();
    let argv = ["env".to_owned()];
    for terminal in [false, true] {
        let a = exec("tinybox-ns-box-0", Some("/workspace"), &env, &marker("x1-1"), &argv, terminal);
        assert_no_value(&a, &env);
        assert_eq!(a[4], env.len().to_string(), "the wrapper is told how many variables carry them");
    }
    let resources = Resources::default();
    let spec = RunSpec {
        container: "tinybox-ns-box-1",
        box_id: "box-1",
        namespace: "ns",
        image: "busybox:latest",
        workspace: Some((Path::new("/home/u/w"), "1000:1000")),
        resources: &resources,
        network: NetworkPolicy::Denied,
        ports: &[],
        local_only: false,
        egress: None,
        netns: None,
    };
    for seccomp in [None, Some("{\"profile\": 1}")] {
        let a = run_once(&spec, None, &env, &marker("x1-2"), &argv, seccomp);
        assert_no_value(&a, &env);
    }
    let mut request = ExecRequest::new(["tar", "-c", "."]);
    request.env = env.clone();
    let p = SnapshotExecParams {
        namespace: "ns".into(),
        box_id: BoxId::new("box-1").unwrap(),
        snapshot: SnapshotId::new("sha-0123456789ab").unwrap(),
        exec_id: "x1-3".into(),
        request,
        stdio: StdioRef { socket: "/s".into() },
    };
    assert_no_value(&crate::from_snapshot::run_argv("tinybox-ns-box-1-cp", &p), &env);
}

#[test]
fn a_box_with_no_environment_keeps_the_plain_client_wrapper() {
    let none = BTreeMap::new();
    let a = exec("c", None, &none, &marker("x1-1"), &["true".to_owned()], false);
    assert_eq!(a[..4], ["sh", "-c", CLIENT_WRAPPER, "sh"]);
    assert!(!a.iter().any(|w| w == "--env-file"), "{a:?}");
}
