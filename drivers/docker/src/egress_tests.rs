//! An allowlist box's container against the recording fake host: network
//! none, the relay and the proxy's directory bound read-only from the
//! create's own endpoint, the keepalive under the relay, and a container
//! whose user cannot reach the socket refused and removed.

use super::*;
use tinybox_sdk::protocol::EgressEndpoint;

fn endpoint() -> EgressEndpoint {
    EgressEndpoint {
        socket: "/s/egress/ns1-box-0/proxy.sock".into(),
        relay: "/opt/tb/tinybox-egress".into(),
        port: 3128,
    }
}

fn allowlist(source: Option<WorkspaceSource>) -> CreateParams {
    CreateParams { egress: Some(endpoint()), ..params(source, NetworkPolicy::Allowlist, vec![]) }
}

const RELAY: &str = "/state/docker/egress-relay-0123456789abcdef";

#[tokio::test]
async fn an_allowlist_box_has_no_network_and_its_keepalive_runs_under_the_relay() {
    let host = host_with_owner();
    let made = docker().create_with(&host, allowlist(None), Some(Path::new(RELAY))).await.unwrap();
    let cmds = commands(&host);
    assert_eq!(verbs(&host), ["run", "exec"], "{cmds:?}");
    let a = &cmds[0];
    for (flag, value) in [
        ("--network", "none"),
        (
            "--mount",
            "type=bind,source=/state/docker/egress-relay-0123456789abcdef,target=/run/tinybox/egress-relay,readonly",
        ),
        ("--mount", "type=bind,source=/s/egress/ns1-box-0,target=/run/tinybox/egress,readonly"),
        ("--entrypoint", argv::RELAY_IN_BOX),
    ] {
        assert!(has_pair(a, flag, value), "{flag} {value} missing from {a:?}");
    }
    let tail = ["base:1", "relay", "--listen", "127.0.0.1:3128", "--to", argv::PROXY_IN_BOX, "--", "sh", "-c"];
    assert_eq!(a[a.len() - 10..a.len() - 1], tail);
    assert_eq!(a[a.len() - 1], argv::KEEPALIVE);
    assert!(!a.iter().any(|x| x.contains("/opt/tb")), "core's own relay is linked against the host's libc: {a:?}");
    // The container's user is the one the check runs as.
    let check = &cmds[1];
    assert_eq!(&check[..3], ["docker", "exec", "tinybox-ns1-box-0"]);
    assert_eq!(check[check.len() - 2..], [argv::RELAY_IN_BOX, argv::PROXY_IN_BOX]);
    let handle: Handle = serde_json::from_value(made.handle).unwrap();
    assert_eq!((handle.network.as_str(), handle.allowlist), ("none", true));
}

#[tokio::test]
async fn a_bound_box_runs_its_relay_as_the_workspace_owner_and_is_refused_when_it_cannot_reach_the_socket() {
    let host = FakeHost::replying(|argv| match argv.get(1).map(String::as_str) {
        _ if argv[0] == "stat" => Reply::ok("1001:1002\n"),
        Some("exec") => Reply::fail(1, ""),
        _ => Reply::ok("abc\n"),
    });
    let ws = WorkspaceSource::LocalDir { path: "/home/me/p".into() };
    let err = docker().create_with(&host, allowlist(Some(ws)), Some(Path::new(RELAY))).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("/s/egress/ns1-box-0/proxy.sock"), "{}", err.message);
    assert!(err.message.contains("workspace's owner"), "{}", err.message);
    let cmds = commands(&host);
    assert!(has_pair(&cmds[1], "--user", "1001:1002"), "{:?}", cmds[1]);
    assert_eq!(verbs(&host), ["-L", "run", "exec", "rm"], "stat, then the refused container is removed: {cmds:?}");
}

#[tokio::test]
async fn a_box_made_from_a_snapshot_binds_what_its_own_create_names() {
    let host = host_with_owner();
    let snapshot = WorkspaceSource::Snapshot { id: SnapshotId::new("sha-0123456789ab").unwrap() };
    let mut p = allowlist(Some(snapshot));
    p.egress = Some(EgressEndpoint { socket: "/s/egress/ns1-box-9/proxy.sock".into(), ..endpoint() });
    docker().create_with(&host, p, Some(Path::new(RELAY))).await.unwrap();
    let a = &commands(&host)[0];
    assert!(has_pair(a, "--mount", "type=bind,source=/s/egress/ns1-box-9,target=/run/tinybox/egress,readonly"));
    assert!(has_pair(a, "--entrypoint", argv::RELAY_IN_BOX), "the image's own entrypoint never counts: {a:?}");
    assert!(has_pair(a, "--pull", "never"));
}

#[tokio::test]
async fn an_allowlist_without_its_endpoint_or_a_relay_is_refused_before_docker_is_asked() {
    let host = host_with_owner();
    let err = docker().create(&host, params(None, NetworkPolicy::Allowlist, vec![])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    let err = docker().create_with(&host, allowlist(None), None).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported);
    let relative =
        CreateParams { egress: Some(EgressEndpoint { socket: "proxy.sock".into(), ..endpoint() }), ..allowlist(None) };
    let err = docker().create_with(&host, relative, Some(Path::new(RELAY))).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(commands(&host).is_empty(), "{:?}", commands(&host));
}

#[test]
fn a_proxy_directory_with_a_comma_cannot_add_a_mount_option() {
    let e = endpoint();
    let spec_egress =
        argv::Egress { relay: Path::new("/r"), proxy_dir: Path::new("/s/a,readonly=false"), endpoint: &e };
    let resources = Resources::default();
    let spec = argv::RunSpec {
        container: "c",
        box_id: "b",
        namespace: "n",
        image: "i",
        workspace: None,
        resources: &resources,
        network: NetworkPolicy::Allowlist,
        ports: &[],
        local_only: false,
        egress: Some(spec_egress),
        netns: None,
    };
    let a = argv::run(&spec);
    assert!(has_pair(&a, "--mount", "type=bind,\"source=/s/a,readonly=false\",target=/run/tinybox/egress,readonly"));
}
