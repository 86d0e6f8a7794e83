//! The driver's logic against the sdk's recording fake host: the probe it
//! sends to create a box, the exact bwrap command line each exec runs and
//! the environment it runs with, and what destroy and inspect send. The
//! live suite (tests/tests/namespace_escape.rs) runs real bwrap and probes
//! the same boundary from inside a box.

use std::collections::BTreeSet;
use std::path::PathBuf;

use tinybox_sdk::model::{BoxId, ExecRequest, Resources};
use tinybox_sdk::protocol::{BoxState, ErrorCode, StdioRef};
use tinybox_sdk::testing::{FakeHost, Reply};

use super::*;

const WS: &str = "/home/u/proj";

/// An exec whose seccomp program goes through a pipe (a box on another
/// machine); `file_programs_*` below covers this machine's file.
async fn exec(host: &dyn Host, p: ExecParams) -> Result<ExitStatus, DriverError> {
    super::exec(host, p, None, false, &Default::default()).await
}
const EXEC_SOCKET: &str = "/run/x.sock";

fn create_params(source: Option<WorkspaceSource>, network: Option<NetworkPolicy>) -> CreateParams {
    CreateParams {
        box_id: BoxId::new("box-0").unwrap(),
        namespace: "ns1".into(),
        source,
        resources: Resources::default(),
        network,
        ports: Vec::new(),
        env: Default::default(),
        options: Default::default(),
        workspace_dir: None,
        egress: None,
        egress_exceptions: Vec::new(),
        image: None,
    }
}

/// A driver offered no state directory: a box given no workspace gets a `mktemp` one.
fn site() -> Site {
    Site { store: "/store".into(), workspaces: None, cgroups: Default::default(), local: None }
}

fn local(path: &str) -> Option<WorkspaceSource> {
    Some(WorkspaceSource::LocalDir { path: PathBuf::from(path) })
}

fn handle(workspace: &str, owned: bool, egress: bool) -> serde_json::Value {
    serde_json::json!({
        "workspace": workspace, "owned": owned, "egress": egress, "allowlist": false, "fence": [],
        "runas": null, "arch": "x86_64", "cgroups": [], "cgroup_v2": false,
    })
}

fn target(handle: serde_json::Value) -> BoxRef {
    BoxRef { box_id: BoxId::new("box-0").unwrap(), handle }
}

/// `echo 'a b' '$(x)'` with the box's env A and B, the request's B winning.
fn exec_params(handle: serde_json::Value, cwd: Option<&str>) -> ExecParams {
    let mut request = ExecRequest::new(["echo", "a b", "$(x)"]);
    request.cwd = cwd.map(str::to_owned);
    request.env.insert("B".into(), "request".into());
    ExecParams {
        target: target(handle),
        exec_id: "x42-7".into(),
        request,
        box_env: [("A".to_string(), "box".to_string()), ("B".to_string(), "box".to_string())].into(),
        stdio: StdioRef { socket: EXEC_SOCKET.into() },
        egress: None,
    }
}

fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|w| (*w).to_owned()).collect()
}

fn path_only() -> BTreeMap<String, String> {
    [("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())].into()
}

/// What the start shell of an `exec_params` command runs with: the PATH,
/// and the box's environment under names no host program reads.
fn exec_env() -> BTreeMap<String, String> {
    let mut env = path_only();
    env.insert("TINYBOX_BOXENV_0".into(), "A=box".into());
    env.insert("TINYBOX_BOXENV_1".into(), "B=request".into());
    env
}

/// Everything bwrap gets for `exec_params` on a box over WS, from the first
/// namespace flag to the command: the boundary, written out in full.
fn boundary(unshare_net: bool, chdir: &str) -> Vec<String> {
    let mut a = words(&["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup"]);
    if unshare_net {
        a.push("--unshare-net".into());
    }
    a.extend(words(&[
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--disable-userns",
        "--seccomp",
        "3",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--proc",
        "/proc",
        "--tmpfs",
        "/proc/1",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--dir",
        "/etc",
        "--ro-bind-try",
        "/etc/passwd",
        "/etc/passwd",
        "--ro-bind-try",
        "/etc/group",
        "/etc/group",
        "--ro-bind-try",
        "/etc/resolv.conf",
        "/etc/resolv.conf",
        "--ro-bind-try",
        "/etc/ssl/certs",
        "/etc/ssl/certs",
        "--bind",
        WS,
        "/workspace",
        "--remount-ro",
        "/",
        "--chdir",
        chdir,
        "--clearenv",
        "--args",
        "5",
        "--",
        "/bin/sh",
        "-c",
        &crate::bwrap::checked_exec(),
        "sh",
        "echo",
        "a b",
        "$(x)",
    ]));
    a
}

/// The one shell every command starts in: it enters `cgroups`, feeds
/// `exec_params`' two variables on fd 5, then the seccomp program on fd 3
/// to what follows.
fn start(cgroups: &[String]) -> Vec<String> {
    let program = crate::seccomp::printf_format(&crate::seccomp::bytes(crate::seccomp::Arch::X86_64));
    let mut v = words(&["sh", "-c", &start_script(), "tinybox-start", "tasks", &cgroups.len().to_string()]);
    v.extend(cgroups.iter().cloned());
    v.extend(["2".to_owned(), "pipe".to_owned(), program]);
    v
}

/// What runs bwrap in a box without limits: the start shell, then bwrap itself.
fn seccomp_feeder() -> Vec<String> {
    let mut v = start(&[]);
    v.push("bwrap".into());
    v
}

/// The host paths a bwrap command line makes visible in the box, by any bind flag.
fn bound_sources(argv: &[String]) -> BTreeSet<String> {
    const BINDS: [&str; 6] = ["--bind", "--bind-try", "--ro-bind", "--ro-bind-try", "--dev-bind", "--dev-bind-try"];
    argv.windows(2).filter(|w| BINDS.contains(&w[0].as_str())).map(|w| w[1].clone()).collect()
}

#[tokio::test]
async fn create_over_a_directory_probes_the_host_once_and_keeps_the_directory() {
    let host = FakeHost::new().otherwise(Reply::ok(format!("\nx86_64\n{WS}")));
    let made = create(&host, &site(), create_params(local(WS), Some(NetworkPolicy::Denied))).await.unwrap();
    let calls = host.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let probe = &calls[0].params;
    assert_eq!(probe.argv, words(&["sh", "-c", PROBE, "tinybox-probe", WS, "box-0", "denied", "", "", ""]));
    assert_eq!(probe.env, path_only(), "the probe finds bwrap on a fixed PATH");
    assert_eq!(probe.cwd, None);
    assert_eq!(made.workdir.as_deref(), Some("/workspace"));
    assert_eq!(made.handle, handle(WS, false, false), "the caller's directory is not the box's to remove");
}

#[tokio::test]
async fn create_without_a_directory_takes_the_one_the_probe_made_and_owns_it() {
    let host = FakeHost::new().otherwise(Reply::ok("\nx86_64\n/tmp/tinybox-box-0.Ab12Cd"));
    let made = create(&host, &site(), create_params(None, Some(NetworkPolicy::Egress))).await.unwrap();
    let argv = host.argvs().remove(0);
    assert_eq!(
        argv[3..],
        words(&["tinybox-probe", "", "box-0", "egress", "", "", ""]),
        "empty: make one, with mktemp where there is no place of its own; egress: check slirp4netns"
    );
    assert_eq!(made.handle, handle("/tmp/tinybox-box-0.Ab12Cd", true, true));
}

#[tokio::test]
async fn each_probe_failure_is_named_with_what_to_do() {
    let cases: [(i32, ErrorCode, &str); 8] = [
        (3, ErrorCode::InvalidRequest, "workspace directory /home/u/proj does not exist on the host"),
        (4, ErrorCode::Unavailable, "bwrap is not installed on the host; install the bubblewrap package"),
        (
            5,
            ErrorCode::Unavailable,
            "forbids unprivileged user namespaces on the host (bwrap: setting up uid map: Permission denied)",
        ),
        (6, ErrorCode::Unavailable, "install the slirp4netns and util-linux packages"),
        (7, ErrorCode::Unavailable, "read-write access to /dev/net/tun"),
        (8, ErrorCode::Unavailable, "through setpriv, which the host lacks; install util-linux"),
        (9, ErrorCode::InvalidRequest, "the owner of workspace /home/u/proj cannot reach it"),
        (2, ErrorCode::Failed, "the host check failed (exit code 2): bwrap: setting up uid map: Permission denied"),
    ];
    for (code, kind, says) in cases {
        let host = FakeHost::new().otherwise(Reply::fail(code, "bwrap: setting up uid map: Permission denied\n"));
        let err = create(&host, &site(), create_params(local(WS), None)).await.unwrap_err();
        assert_eq!(err.code, kind, "exit {code}: {err}");
        assert!(err.message.contains(says), "exit {code}: {err}");
    }
    let host = FakeHost::new().otherwise(Reply::error(DriverError::failed("host.run: connection closed")));
    let err = create(&host, &site(), create_params(local(WS), None)).await.unwrap_err();
    assert_eq!(err.message, "host.run: connection closed");
}

#[tokio::test]
async fn a_source_other_than_a_directory_is_refused_before_the_host_hears_of_it() {
    let host = FakeHost::new();
    let image = Some(WorkspaceSource::OciImage { reference: "busybox".into() });
    let err = create(&host, &site(), create_params(image, None)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported);
    assert!(host.calls().is_empty());
}

#[tokio::test]
async fn exec_with_the_network_denied_is_one_bwrap_with_exactly_this_boundary() {
    let host = FakeHost::new();
    let status = exec(&host, exec_params(handle(WS, false, false), Some("src"))).await.unwrap();
    assert!(status.success());
    let calls = host.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let run = &calls[0].params;
    let mut expected = seccomp_feeder();
    expected.extend(boundary(true, "/workspace/src"));
    assert_eq!(run.argv, expected);
    // bwrap itself runs with nothing of the caller's environment but a PATH
    // (and the box's own, to hand on), so no token is readable through the
    // box's /proc/1/environ.
    assert!(run.clear_env);
    assert_eq!(run.env, exec_env());
    assert_eq!(run.cwd, None);
    assert_eq!(run.exec_id, "x42-7", "core cancels the forwarded run by the exec's id");
    assert_eq!(run.stdio.socket, PathBuf::from(EXEC_SOCKET), "the caller's own streams");
}

#[tokio::test]
async fn exec_with_egress_runs_bwrap_through_netwrap_in_the_namespace_it_made() {
    let host = FakeHost::new();
    exec(&host, exec_params(handle(WS, false, true), None)).await.unwrap();
    let run = &host.calls()[0].params;
    let fence = tinybox_sdk::fence::Fence { exceptions: vec![], resolvers: vec![SLIRP_DNS] };
    let mut expected = start(&[]);
    expected.extend(words(&["sh", "-c", NETWRAP, "tinybox-netwrap"]));
    expected.extend([fence.v4().head, fence.v4().tail, fence.v6()]);
    expected.push("bwrap".into());
    expected.extend(boundary(false, "/workspace"));
    assert_eq!(run.argv, expected, "every flag but --unshare-net, which netwrap.sh's namespace replaces");
    assert!(NETWRAP.contains("--disable-host-loopback"), "egress never reaches the host's loopback");
    let host_rule = tinybox_sdk::fence::HOST_ADDRESS_RULE.replace("%s", "$a").replace("\\n", "");
    assert!(NETWRAP.contains(&format!("\"{host_rule}\"")), "netwrap.sh refuses each host address as the sdk does");
    assert!(
        NETWRAP.contains("--keep-caps") && NETWRAP.contains("--bounding-set=-all"),
        "the fence's capability stays out of the box"
    );
    assert!(run.clear_env);
    assert_eq!(run.env, exec_env());

    // The exceptions a create was given come back from the record, checked again.
    let mut fenced = handle(WS, false, true);
    fenced["fence"] = serde_json::json!(["10.254.16.2:8080"]);
    let host = FakeHost::new();
    exec(&host, exec_params(fenced.clone(), None)).await.unwrap();
    let head = &host.calls()[0].params.argv[start(&[]).len() + 4];
    assert!(head.contains("-A OUTPUT -d 10.254.16.2/32 -p tcp --dport 8080 -j ACCEPT\n"), "{head}");
    fenced["fence"] = serde_json::json!(["10.0.0.1 -j ACCEPT"]);
    let err = exec(&FakeHost::new(), exec_params(fenced, None)).await.unwrap_err();
    assert!(err.to_string().contains("fence exceptions do not parse"), "{err}");
}

#[tokio::test]
async fn only_usr_the_workspace_and_four_etc_files_are_bound_whatever_the_network() {
    for egress in [false, true] {
        let host = FakeHost::new();
        exec(&host, exec_params(handle(WS, false, egress), None)).await.unwrap();
        let argv = host.argvs().remove(0);
        let sources = bound_sources(&argv);
        let expected: BTreeSet<String> =
            ["/usr", WS, "/etc/passwd", "/etc/group", "/etc/resolv.conf", "/etc/ssl/certs"].map(String::from).into();
        assert_eq!(sources, expected, "egress {egress}");
        assert_eq!(argv.iter().filter(|a| *a == "--bind").count(), 1, "only the workspace is writable");
        assert!(argv.iter().any(|a| a == "--die-with-parent") && argv.iter().any(|a| a == "--new-session"));
    }
}

#[tokio::test]
async fn the_box_sees_its_env_and_the_command_s_and_nothing_else() {
    let host = FakeHost::new();
    let mut p = exec_params(handle(WS, false, false), None);
    p.box_env.insert("SECRET_ONLY_ON_THE_BOX".into(), "s3cret=1".into());
    p.request.env.insert("EMPTY".into(), String::new());
    exec(&host, p).await.unwrap();
    let run = host.calls().remove(0).params;
    let clear = run.argv.iter().position(|a| a == "--clearenv").expect("--clearenv");
    assert_eq!(run.argv[clear..clear + 3], words(&["--clearenv", "--args", "5"]), "cleared, then rebuilt from fd 5");
    assert!(!run.argv.iter().any(|a| a.contains("s3cret") || a == "--setenv"), "no value on the command line");
    let mut expected = path_only();
    for (i, kv) in ["A=box", "B=request", "EMPTY=", "SECRET_ONLY_ON_THE_BOX=s3cret=1"].into_iter().enumerate() {
        expected.insert(format!("TINYBOX_BOXENV_{i}"), kv.to_owned());
    }
    assert_eq!(run.env, expected);
    assert!(run.clear_env, "nothing of the caller's");
    let sh = run.argv.iter().position(|a| a == "tinybox-start").unwrap();
    assert_eq!(run.argv[sh + 3], "4", "the start shell feeds four variables");
}

#[tokio::test]
async fn cwd_is_the_workspace_a_path_under_it_or_an_absolute_path() {
    for (cwd, chdir) in [(None, "/workspace"), (Some("sub/dir"), "/workspace/sub/dir"), (Some("/tmp/x"), "/tmp/x")] {
        let host = FakeHost::new();
        exec(&host, exec_params(handle(WS, false, false), cwd)).await.unwrap();
        let argv = host.argvs().remove(0);
        let chdirs: Vec<&[String]> = argv.windows(2).filter(|w| w[0] == "--chdir").collect();
        assert_eq!(chdirs, [words(&["--chdir", chdir])], "cwd {cwd:?}");
        assert_eq!(host.calls()[0].params.cwd, None, "bwrap's own directory is never the caller's");
    }
}

#[tokio::test]
async fn the_command_s_status_is_the_exec_s_and_a_foreign_handle_runs_nothing() {
    let host = FakeHost::new().otherwise(Reply::exit(ExitStatus { code: None, signal: Some(9) }));
    let status = exec(&host, exec_params(handle(WS, false, false), None)).await.unwrap();
    assert_eq!(status.signal, Some(9));

    let host = FakeHost::new();
    let err = exec(&host, exec_params(serde_json::json!({"container": "c"}), None)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(host.calls().is_empty());
}

#[tokio::test]
async fn destroy_removes_only_a_workspace_the_box_owns() {
    let host = FakeHost::new();
    destroy(&host, &site(), target(handle(WS, false, false))).await.unwrap();
    assert!(host.calls().is_empty(), "the caller's directory is left alone");

    let host = FakeHost::new();
    destroy(&host, &site(), target(handle("/tmp/tinybox-box-0.Ab12Cd", true, false))).await.unwrap();
    let calls = host.calls();
    assert_eq!(calls.len(), 1, "no cgroup to remove: {calls:?}");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].params.argv, words(&["rm", "-rf", "--", "/tmp/tinybox-box-0.Ab12Cd"]));
    assert_eq!(calls[0].params.env, path_only());

    let host = FakeHost::new().otherwise(Reply::fail(1, "rm: cannot remove 'x': Permission denied\n"));
    let err = destroy(&host, &site(), target(handle("/tmp/w", true, false))).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Failed);
    assert_eq!(err.message, "cannot remove /tmp/w: rm: cannot remove 'x': Permission denied");
}

#[tokio::test]
async fn inspect_is_ready_while_the_workspace_exists() {
    let host = FakeHost::new();
    let seen = inspect(&host, &site(), target(handle(WS, false, true))).await.unwrap();
    assert_eq!(host.argvs(), [words(&["test", "-d", WS])]);
    assert_eq!(seen.state, BoxState::Ready);
    let detail = seen.detail.unwrap();
    assert!(detail.contains("network egress via slirp4netns behind the fence"), "{detail}");
    assert!(detail.contains("bwrap runs as the caller; setuid and setgid bits refused; no limits"), "{detail}");

    let host = FakeHost::new().otherwise(Reply::fail(1, ""));
    let seen = inspect(&host, &site(), target(handle(WS, false, false))).await.unwrap();
    assert_eq!(seen.state, BoxState::Gone);
    assert_eq!(seen.detail.as_deref(), Some("workspace /home/u/proj no longer exists"));
}

#[tokio::test]
async fn a_root_caller_over_another_owner_s_workspace_runs_bwrap_as_that_owner() {
    let host = FakeHost::new().otherwise(Reply::ok(format!("1000:1001\nx86_64\n{WS}")));
    let made = create(&host, &site(), create_params(local(WS), None)).await.unwrap();
    assert_eq!(made.handle["runas"], "1000:1001");
    let host = FakeHost::new();
    exec(&host, exec_params(made.handle, None)).await.unwrap();
    let argv = host.argvs().remove(0);
    let head = start(&[]);
    assert_eq!(argv[..head.len()], head[..], "the start shell opens the seccomp program as the caller");
    assert_eq!(
        argv[head.len()..head.len() + 6],
        words(&["setpriv", "--reuid=1000", "--regid=1001", "--clear-groups", "--", "bwrap"]),
        "then setpriv, which execs bwrap with descriptor 3 still open"
    );
}

#[path = "allowlist_tests.rs"]
mod allowlist;

#[path = "limits_tests.rs"]
mod limits;

#[path = "start_shell_tests.rs"]
mod start_shell;

#[tokio::test]
async fn file_programs_on_this_machine_are_written_by_their_contents_and_opened_by_the_start_shell() {
    let state = tempfile::tempdir().unwrap();
    let host = FakeHost::new();
    super::exec(&host, exec_params(handle(WS, false, false), None), Some(state.path()), false, &Default::default())
        .await
        .unwrap();
    let argv = host.argvs().remove(0);
    let program = crate::seccomp::bytes(crate::seccomp::Arch::X86_64);
    let file = crate::seccomp::program_file(state.path(), crate::seccomp::Arch::X86_64).unwrap();
    assert_eq!(argv[4..10], words(&["tasks", "0", "2", "file", file.to_str().unwrap(), "bwrap"]));
    assert_eq!(std::fs::read(&file).unwrap(), program);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    // A copy that differs (damaged, or another build's) is replaced whole.
    std::fs::write(&file, b"not the program").unwrap();
    assert_eq!(crate::seccomp::program_file(state.path(), crate::seccomp::Arch::X86_64), Some(file.clone()));
    assert_eq!(std::fs::read(&file).unwrap(), program);
    // A directory it cannot write: the pipe, as for another machine.
    let host = FakeHost::new();
    let missing = state.path().join("no-such-dir");
    super::exec(&host, exec_params(handle(WS, false, false), None), Some(&missing), false, &Default::default())
        .await
        .unwrap();
    assert_eq!(host.argvs().remove(0)[7], "pipe");
}

/// A terminal run: on this machine the host leaves the terminal unowned and
/// the box takes it in a session of its own; on another (ssh), the box stays
/// in the session the host made around it. Without a terminal, a session of
/// its own wherever it runs.
#[tokio::test]
async fn a_terminal_run_asks_for_an_unowned_terminal_here_and_the_hosts_session_on_another_machine() {
    let tty = Some(tinybox_sdk::model::TtySize { rows: 24, cols: 80 });
    for (remote, on_tty) in [(false, false), (false, true), (true, false), (true, true)] {
        let host = FakeHost::new();
        let mut p = exec_params(handle(WS, false, false), None);
        p.request.tty = if on_tty { tty } else { None };
        super::exec(&host, p, None, remote, &Default::default()).await.unwrap();
        let call = host.calls().remove(0).params;
        let new_session = call.argv.iter().any(|a| a == "--new-session");
        let setsid = call.argv.iter().any(|a| a == &crate::bwrap::checked_setsid());
        let script = call.argv.iter().any(|a| a == &crate::bwrap::checked_script());
        assert_eq!(call.tty, if on_tty { tty } else { None });
        match (remote, on_tty) {
            (_, false) => assert!(new_session && !setsid && !script && !call.tty_session_inside, "remote {remote}"),
            (false, true) => assert!(new_session && setsid && !script && call.tty_session_inside),
            (true, true) => assert!(!new_session && !setsid && script && !call.tty_session_inside),
        }
        // Every other boundary flag is there in each case.
        for flag in ["--unshare-user", "--unshare-pid", "--die-with-parent", "--disable-userns", "--clearenv"] {
            assert!(call.argv.iter().any(|a| a == flag), "{flag}: remote {remote}, tty {on_tty}");
        }
    }
}
