//! The driver's logic against a recording fake host: which docker commands
//! it runs, and what it makes of their answers. The live suite
//! (tests/tests/docker_*.rs) runs the same paths against a real dockerd.

use std::path::{Path, PathBuf};

use tinybox_sdk::model::{BoxId, ExecRequest, ExitStatus, NetworkPolicy, PortMapping, Resources, WorkspaceSource};
use tinybox_sdk::protocol::{BoxRef, BoxState, CreateParams, DriverError, ErrorCode, ExecParams, RunParams, StdioRef};
use tinybox_sdk::testing::{FakeHost, Reply};

use super::*;

/// The socket an exec's own streams are served on; helpers get pipes of their own.
const EXEC_SOCKET: &str = "/run/x.sock";

/// Whether a run is an exec's lifeline watcher (the only `docker exec -i`
/// the driver runs itself; the box's command runs under a shell).
fn is_lifeline(argv: &[String]) -> bool {
    argv.len() > 3 && argv[..3] == ["docker", "exec", "-i"]
}

/// The helper commands run (`inspect`, `rm`, ...: the driver reads their output), in order.
fn commands(host: &FakeHost) -> Vec<Vec<String>> {
    host.calls()
        .into_iter()
        .filter(|c| c.params.stdio.socket.as_path() != Path::new(EXEC_SOCKET) && !is_lifeline(&c.params.argv))
        .map(|c| c.params.argv)
        .collect()
}

/// The lifeline watchers run, with what each read on its input.
fn lifelines(host: &FakeHost) -> Vec<(RunParams, Vec<u8>)> {
    host.calls()
        .into_iter()
        .filter(|c| is_lifeline(&c.params.argv))
        .map(|c| (c.params, c.stdin.unwrap_or_default()))
        .collect()
}

/// The box commands run with the exec's own streams.
fn runs(host: &FakeHost) -> Vec<RunParams> {
    host.calls().into_iter().map(|c| c.params).filter(|p| p.stdio.socket.as_path() == Path::new(EXEC_SOCKET)).collect()
}

/// The docker subcommands run, in order (`run`, `rm`, `container`, ...).
fn verbs(host: &FakeHost) -> Vec<String> {
    commands(host).iter().map(|c| c[1].clone()).collect()
}

/// Helpers answered with `helper`, the box's command ending with `status`.
fn ending_with(status: ExitStatus, helper: Reply) -> FakeHost {
    // The box's command: the client under the shell that dies of a cancel.
    FakeHost::new()
        .on(|a| a[0] == "sh" && a.windows(3).any(|w| w == ["docker", "exec", "-i"]), Reply::exit(status))
        .otherwise(helper)
}

fn ok(stdout: &str) -> Reply {
    Reply::ok(stdout)
}

fn failed(code: i32, stderr: &str) -> Reply {
    Reply::fail(code, stderr)
}

fn docker() -> Docker {
    Docker::new(Config { base_image: "base:1".into() })
}

fn params(source: Option<WorkspaceSource>, network: NetworkPolicy, ports: Vec<PortMapping>) -> CreateParams {
    CreateParams {
        box_id: BoxId::new("box-0").unwrap(),
        namespace: "ns1".into(),
        source,
        resources: Resources { cpus: Some(1.5), memory_bytes: Some(64 << 20), pids: Some(100), disk_bytes: None },
        network: Some(network),
        ports,
        env: Default::default(),
        options: Default::default(),
        workspace_dir: None,
        egress: None,
        egress_exceptions: Vec::new(),
        image: None,
    }
}

fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
    argv.windows(2).any(|w| w[0] == flag && w[1] == value)
}

/// A host whose `stat` says the workspace belongs to 1001:1002, and
/// whose other commands succeed printing `abc`.
fn host_with_owner() -> FakeHost {
    FakeHost::replying(|argv| if argv[0] == "stat" { ok("1001:1002\n") } else { ok("abc\n") })
}

#[tokio::test]
async fn create_runs_one_hardened_limited_container_named_after_namespace_and_box() {
    let host = host_with_owner();
    let ws = PathBuf::from("/home/me/pro,ject");
    let made = docker()
        .create(&host, params(Some(WorkspaceSource::LocalDir { path: ws }), NetworkPolicy::Denied, vec![]))
        .await
        .unwrap();
    assert_eq!(made.workdir.as_deref(), Some("/workspace"));
    let cmds = commands(&host);
    assert_eq!(cmds.len(), 2, "stat, then one docker call: {cmds:?}");
    assert_eq!(cmds[0], ["stat", "-L", "-c", "%u:%g", "--", "/home/me/pro,ject"]);
    let a = &cmds[1];
    assert_eq!(&a[..5], ["docker", "run", "-d", "--name", "tinybox-ns1-box-0"]);
    for (flag, value) in [
        ("--security-opt", "no-new-privileges"),
        ("--cap-drop", "ALL"),
        ("--network", "none"),
        ("--cpus", "1.5"),
        ("--memory", "67108864"),
        ("--memory-swap", "67108864"),
        ("--pids-limit", "100"),
        ("--workdir", "/workspace"),
        ("--mount", "type=bind,\"source=/home/me/pro,ject\",target=/workspace"),
        ("--user", "1001:1002"),
        ("--security-opt", "seccomp=/dev/stdin"),
        ("--entrypoint", "sh"),
    ] {
        assert!(has_pair(a, flag, value), "{flag} {value} missing from {a:?}");
    }
    assert!(!a.iter().any(|x| x.contains("tinybox.workspace")), "no label names the directory: {a:?}");
    assert!(!a.contains(&"--init".to_string()), "sh is pid 1: a missing sh fails the run itself");
    assert_eq!(a[a.len() - 3..], ["base:1", "-c", argv::KEEPALIVE]);
    assert!(!a.iter().any(|x| x.contains("storage-opt") || x == "--publish"));
    // The profile travels on `docker run`'s input, where the CLI reads it.
    let sent = host.calls()[1].stdin.clone().expect("docker run read its input");
    let profile: serde_json::Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(profile, crate::seccomp::profile());
    let handle: Handle = serde_json::from_value(made.handle).unwrap();
    assert_eq!(handle.container, "tinybox-ns1-box-0");
    assert_eq!(handle.network, "none");
}

#[tokio::test]
async fn a_pids_limit_too_small_for_a_box_to_start_is_refused_before_any_container() {
    let host = host_with_owner();
    let mut p = params(None, NetworkPolicy::Denied, vec![]);
    p.resources.pids = Some(MIN_PIDS - 1);
    let err = docker().create(&host, p).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(err.message.contains(&format!("a pids limit of {} is below the {MIN_PIDS}", MIN_PIDS - 1)), "{err}");
    assert!(err.message.ends_with(&format!("ask for at least {MIN_PIDS}")), "{err}");
    assert!(host.calls().is_empty(), "nothing ran: {:?}", host.argvs());

    let mut p = params(None, NetworkPolicy::Denied, vec![]);
    p.resources.pids = Some(MIN_PIDS);
    docker().create(&host, p).await.unwrap();
    assert_eq!(verbs(&host), ["run"]);
}

#[tokio::test]
async fn a_box_without_a_host_directory_keeps_docker_s_user_and_profile() {
    let host = host_with_owner();
    docker().create(&host, params(None, NetworkPolicy::Denied, vec![])).await.unwrap();
    let cmds = commands(&host);
    assert_eq!(verbs(&host), ["run"], "{cmds:?}");
    assert!(!cmds[0].iter().any(|x| x == "--user" || x.starts_with("seccomp=")), "{:?}", cmds[0]);
}

#[tokio::test]
async fn a_workspace_whose_owner_cannot_be_read_is_refused_before_any_container() {
    let host = FakeHost::replying(|argv| {
        if argv[0] == "stat" { failed(1, "stat: cannot statx '/gone': No such file or directory") } else { ok("abc") }
    });
    let ws = WorkspaceSource::LocalDir { path: "/gone".into() };
    let err = docker().create(&host, params(Some(ws), NetworkPolicy::Denied, vec![])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(err.message.contains("cannot tell who owns workspace directory /gone"), "{err}");
    assert!(!verbs(&host).contains(&"run".to_string()));
}

#[tokio::test]
async fn ports_are_published_with_egress_and_not_with_the_network_denied() {
    let ports = vec![PortMapping { host: 8080, guest: 80 }];
    let host = FakeHost::replying(|argv| match argv[0].as_str() {
        "sh" => ok("dir /usr\naddr 192.0.2.2\n"),
        _ => ok("abc"),
    });
    let made = docker().create(&host, params(None, NetworkPolicy::Egress, ports.clone())).await.unwrap();
    // The holder of the box's fenced namespace publishes them; the box joins it.
    let cmds = commands(&host);
    let holder = &cmds[1];
    assert_eq!(holder[..5], ["docker", "run", "-d", "--name", "tinybox.net-ns1-box-0"]);
    assert!(has_pair(holder, "--network", "bridge"));
    assert!(has_pair(holder, "--publish", "127.0.0.1:8080:80"));
    let a = cmds.last().unwrap();
    assert_eq!(a[..5], ["docker", "run", "-d", "--name", "tinybox-ns1-box-0"]);
    assert!(has_pair(a, "--network", "container:tinybox.net-ns1-box-0"));
    assert!(!a.contains(&"--publish".to_string()), "{a:?}");
    assert_eq!(made.workdir, None, "an image keeps its own working directory");
    let handle: Handle = serde_json::from_value(made.handle).unwrap();
    assert_eq!(handle.netns.as_deref(), Some("tinybox.net-ns1-box-0"));

    let host =
        FakeHost::replying(|argv| if argv[1] == "container" { ok(r#"{"Status":"running"}"#) } else { ok("abc") });
    let d = docker();
    let made = d.create(&host, params(None, NetworkPolicy::Denied, ports)).await.unwrap();
    assert!(!commands(&host)[0].contains(&"--publish".to_string()));
    let seen = d.inspect(&host, BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: made.handle }).await.unwrap();
    assert_eq!(seen.state, BoxState::Ready);
    assert!(seen.detail.unwrap().contains("ports 8080:80 not published: the network is denied"));
}

#[tokio::test]
async fn a_failed_run_removes_its_leftover_and_says_why() {
    let host = FakeHost::replying(|argv| {
        if argv[1] == "run" {
            failed(127, "docker: Error response from daemon: ... exec: \"sh\": executable file not found in $PATH")
        } else {
            ok("")
        }
    });
    let err = docker().create(&host, params(None, NetworkPolicy::Denied, vec![])).await.unwrap_err();
    assert!(err.message.contains("image base:1 has no sh"), "{err}");
    assert_eq!(verbs(&host), ["run", "rm"]);
}

#[tokio::test]
async fn a_run_whose_daemon_went_away_mid_create_is_interrupted_not_a_clean_failure() {
    // The daemon crashed under the client, and is not back for the cleanup:
    // whatever it made stays unknown, so core must keep the reservation.
    let host = FakeHost::replying(|argv| {
        if argv[1] == "run" {
            failed(
                125,
                "docker: error during connect: Post \"http://%2Fvar%2Frun%2Fdocker.sock/v1.41/containers/create\": EOF.",
            )
        } else {
            failed(
                1,
                "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
            )
        }
    });
    let err = docker().create(&host, params(None, NetworkPolicy::Denied, vec![])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Interrupted, "{err:?}");
    assert!(err.message.contains("container tinybox-ns1-box-0 could not be removed"), "{err}");
    assert_eq!(verbs(&host), ["run", "rm"]);
}

#[tokio::test]
async fn a_commit_whose_daemon_went_away_mid_request_is_interrupted() {
    // What the docker CLI says when the daemon dies under a request: the
    // commit may have been written, so the outcome is unknown, not failed.
    let host = FakeHost::replying(|_| {
        failed(1, "error during connect: Post \"http://%2Fvar%2Frun%2Fdocker.sock/v1.41/commit?container=c\": EOF")
    });
    let target = BoxRef { box_id: BoxId::new("box-0").unwrap(), handle: handle(None) };
    let err = docker().snapshot(&host, target).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Interrupted, "{err:?}");
    assert!(err.message.starts_with("the docker daemon on the box's host went away during docker commit"), "{err}");
}

#[tokio::test]
async fn a_name_in_use_is_someone_else_s_and_is_left_alone() {
    let host = FakeHost::replying(|_| {
        failed(
            125,
            "docker: Error response from daemon: Conflict. The container name \"/tinybox-ns1-box-0\" is already in use by container \"abc\".",
        )
    });
    let err = docker().create(&host, params(None, NetworkPolicy::Denied, vec![])).await.unwrap_err();
    assert!(err.message.contains("another store uses namespace ns1"), "{err}");
    assert_eq!(verbs(&host), ["run"], "the other store's container is not removed");
}

#[tokio::test]
async fn an_unreachable_daemon_is_named() {
    let host = FakeHost::replying(|_| {
        failed(
            125,
            "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
        )
    });
    let err = docker().create(&host, params(None, NetworkPolicy::Denied, vec![])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.starts_with("docker daemon not reachable on the box's host: docker: Cannot connect"), "{err}");
}

#[tokio::test]
async fn a_snapshot_source_binds_only_what_core_recorded_and_never_pulls() {
    // An image label naming a directory is never read: the image decides nothing.
    let host = host_with_owner();
    let id = SnapshotId::new("sha-0123456789ab").unwrap();
    let made = docker()
        .create(&host, params(Some(WorkspaceSource::Snapshot { id: id.clone() }), NetworkPolicy::Denied, vec![]))
        .await
        .unwrap();
    assert_eq!(made.workdir, None, "no recorded directory: nothing bound");
    assert_eq!(verbs(&host), ["run"], "no image inspect: {:?}", commands(&host));
    let run = &commands(&host)[0];
    assert!(has_pair(run, "--pull", "never"));
    assert!(!run.contains(&"--mount".to_string()), "{run:?}");

    let host = host_with_owner();
    let mut p = params(Some(WorkspaceSource::Snapshot { id }), NetworkPolicy::Denied, vec![]);
    p.workspace_dir = Some("/w".into());
    let made = docker().create(&host, p).await.unwrap();
    assert_eq!(made.workdir.as_deref(), Some("/workspace"));
    let run = &commands(&host)[1];
    assert!(has_pair(run, "--mount", "type=bind,source=/w,target=/workspace"));
    assert!(has_pair(run, "--user", "1001:1002"));
    assert_eq!(run[run.len() - 3], "sha-0123456789ab");

    let host = FakeHost::replying(|_| failed(125, "Error: No such image: sha-0123456789ab"));
    let id = SnapshotId::new("sha-0123456789ab").unwrap();
    let err = docker()
        .create(&host, params(Some(WorkspaceSource::Snapshot { id }), NetworkPolicy::Denied, vec![]))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    assert!(err.message.contains("snapshot sha-0123456789ab does not exist"), "{err}");
}

#[tokio::test]
async fn a_relative_workspace_directory_from_core_is_refused() {
    let host = host_with_owner();
    let mut p = params(None, NetworkPolicy::Denied, vec![]);
    p.workspace_dir = Some("rel/dir".into());
    let err = docker().create(&host, p).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(err.message.contains("rel/dir is not an absolute path"), "{err}");
    assert!(commands(&host).is_empty());
}

#[tokio::test]
async fn git_sources_and_flag_like_images_are_refused() {
    let host = FakeHost::new();
    let git = WorkspaceSource::GitRepo { url: "https://example.invalid/r.git".into(), rev: None };
    let err = docker().create(&host, params(Some(git), NetworkPolicy::Denied, vec![])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported);
    let image = WorkspaceSource::OciImage { reference: "--privileged".into() };
    let err = docker().create(&host, params(Some(image), NetworkPolicy::Denied, vec![])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(commands(&host).is_empty());
}

#[path = "egress_tests.rs"]
mod egress;
#[path = "exec_tests.rs"]
mod exec;
#[path = "lifecycle_tests.rs"]
mod lifecycle;

/// The handle core holds for box-0 (a container made from base:1).
fn handle(workdir: Option<&str>) -> serde_json::Value {
    serde_json::json!({"container": "tinybox-ns1-box-0", "image": "base:1", "network": "none", "workdir": workdir})
}

#[test]
fn names_paths_and_directories() {
    assert_eq!(argv::container_name("default", "box-0"), "tinybox-default-box-0");
    assert_eq!(argv::marker("../x y"), "/tmp/.tinybox-exec-.._x_y.pid");
    assert_eq!(argv::workdir(Some("/abs"), Some("/workspace")).as_deref(), Some("/abs"));
    assert_eq!(argv::workdir(Some("rel"), Some("/workspace/")).as_deref(), Some("/workspace/rel"));
    assert_eq!(argv::workdir(Some("rel"), None).as_deref(), Some("/rel"));
    assert_eq!(argv::workdir(None, None), None);
}

#[test]
fn config_defaults_to_busybox() {
    // The test process does not set it unless a developer did.
    if std::env::var_os("TINYBOX_DOCKER_BASE_IMAGE").is_none() {
        assert_eq!(Config::from_env(), Config { base_image: "busybox:latest".into() });
    }
}
