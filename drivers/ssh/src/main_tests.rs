//! What the ssh host sends to its inner host, against the sdk's recording
//! fake: the ssh options every call carries, the remote command composed
//! from a run's argv and cwd, its environment sent first into a remote file, the shell probe and the shared
//! connection's setup, and how a 255 from ssh is settled. quote.rs pins the
//! quoting itself (quote_tests.rs); these pin what is built around it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use tinybox_sdk::protocol::{ErrorCode, StdioRef};
use tinybox_sdk::testing::{FakeHost, Reply};

use super::*;

const EXEC_SOCKET: &str = "/run/x.sock";

/// What a POSIX login shell prints for the probe.
const POSIX_PROBE_OUTPUT: &str = "/bin/bash\ntinybox\\\\probe\nsingle'quote\n";

/// The command that makes the shared-connection directory on the inner host.
const MKDIR: [&str; 3] = ["sh", "-c", "umask 077 && mkdir -p \"$HOME/.ssh/tinybox\""];

/// ssh's connection-refused failure, as it prints it.
const REFUSED: &str = "ssh: connect to host builder port 22: Connection refused\r\n";

fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|w| (*w).to_owned()).collect()
}

fn run_params(argv: &[&str]) -> RunParams {
    RunParams {
        exec_id: "x42-7".into(),
        argv: words(argv),
        env: BTreeMap::new(),
        clear_env: false,
        cwd: None,
        stdio: StdioRef { socket: EXEC_SOCKET.into() },
        tty: None,
        tty_session_inside: false,
    }
}

/// One connection per command: the calls are only the ones under test.
fn unshared() -> serde_json::Value {
    json!({"destination": "builder", "multiplex": false})
}

/// The remote command line an ssh argv carries (its last word).
fn remote(argv: &[String]) -> &str {
    argv.last().map(String::as_str).unwrap_or("")
}

fn is_probe(argv: &[String]) -> bool {
    argv.first().is_some_and(|p| p == "ssh") && remote(argv) == quote::PROBE
}

fn is_settle(argv: &[String]) -> bool {
    argv.first().is_some_and(|p| p == "ssh") && remote(argv) == "exec true"
}

/// Every ssh command line the fake received.
fn ssh_calls(host: &FakeHost) -> Vec<Vec<String>> {
    host.argvs().into_iter().filter(|a| a[0] == "ssh").collect()
}

#[tokio::test]
async fn a_plain_command_is_one_ssh_with_the_caller_s_streams_and_no_probe() {
    let host = FakeHost::new();
    let status = SshHost::new().run_configured(&host, &unshared(), run_params(&["make", "-j4", "test"])).await.unwrap();
    assert!(status.success());
    let calls = host.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let sent = &calls[0].params;
    assert_eq!(
        sent.argv,
        words(&[
            "ssh",
            "-T",
            "-a",
            "-x",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "--",
            "builder",
            "exec make -j4 test"
        ])
    );
    assert_eq!(sent.exec_id, "x42-7", "core cancels the forwarded run by the same id");
    assert_eq!(sent.stdio.socket, PathBuf::from(EXEC_SOCKET), "the command's bytes never pass through the driver");
    assert!(sent.env.is_empty() && !sent.clear_env && sent.cwd.is_none(), "ssh runs with the inner host's own env");
}

fn is_upload(argv: &[String]) -> bool {
    argv.first().is_some_and(|p| p == "ssh") && remote(argv) == quote::UPLOAD_ENV
}

#[tokio::test]
async fn env_goes_in_a_remote_file_first_and_the_command_names_only_the_file() {
    let host = FakeHost::new()
        .on(is_probe, Reply::ok(POSIX_PROBE_OUTPUT))
        .on(is_upload, Reply::ok("/tmp/tinybox-env.Ab12Cd34\n"));
    let ssh = SshHost::new();
    let mut p = run_params(&["printf", "%s\n", "it's $HOME"]);
    p.env = [("K".to_owned(), "secret v w".to_owned())].into();
    p.cwd = Some("src dir".into());
    p.clear_env = true;
    ssh.run_configured(&host, &unshared(), p.clone()).await.unwrap();
    ssh.run_configured(&host, &unshared(), p.clone()).await.unwrap();

    let calls = host.calls();
    let sent: Vec<_> = calls.iter().filter(|c| c.argv()[0] == "ssh").collect();
    assert_eq!(sent.len(), 5, "the probe once, then an upload and a run each: {:?}", host.argvs());
    assert!(is_probe(sent[0].argv()));
    let expected =
        quote::sourced_command_line_str(&p.argv, p.cwd.as_deref(), "/tmp/tinybox-env.Ab12Cd34", true).unwrap();
    for pair in sent[1..].chunks(2) {
        let (upload, run) = (pair[0], pair[1]);
        assert!(is_upload(upload.argv()), "{:?}", upload.argv());
        assert_eq!(upload.stdin.as_deref(), Some(&b"export K='secret v w'\n"[..]), "the values go on ssh's stdin");
        assert_eq!(remote(run.argv()), expected);
        assert_eq!(run.params.stdio.socket, PathBuf::from(EXEC_SOCKET), "the run has the caller's streams");
        let ends = &run.argv()[run.argv().len() - 3..run.argv().len() - 1];
        assert_eq!(ends, ["--", "builder"], "the remote command follows the destination");
    }
    for call in &calls {
        assert!(!call.argv().iter().any(|w| w.contains("secret")), "no value on a command line: {:?}", call.argv());
        // ssh itself runs with the inner host's own environment, wherever it is.
        assert!(call.params.env.is_empty() && call.params.cwd.is_none(), "{call:?}");
    }
}

#[tokio::test]
async fn an_environment_that_cannot_be_set_or_written_is_refused_with_the_reason() {
    let ssh = SshHost::new();
    let host = FakeHost::new().on(is_probe, Reply::ok(POSIX_PROBE_OUTPUT));
    let mut p = run_params(&["true"]);
    p.env = [("A-B".to_owned(), "v".to_owned())].into();
    let err = ssh.run_configured(&host, &unshared(), p).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
    assert!(err.message.contains("shell names"), "{err}");
    assert!(host.calls().is_empty(), "refused before anything is sent");

    let host = FakeHost::new()
        .on(is_probe, Reply::ok(POSIX_PROBE_OUTPUT))
        .on(is_upload, Reply::fail(1, "mktemp: failed to create file via template\n"));
    let mut p = run_params(&["true"]);
    p.env = [("A".to_owned(), "v".to_owned())].into();
    let err = ssh.run_configured(&host, &unshared(), p).await.unwrap_err();
    assert!(err.message.contains("cannot write the command's environment") && err.message.contains("mktemp"), "{err}");
    assert!(!host.argvs().iter().any(|a| a.iter().any(|w| w == "exec true")), "the command never ran");
}

#[tokio::test]
async fn every_call_is_batch_mode_and_checks_host_keys_accepting_new_ones_only_when_asked() {
    for (config, checking) in [
        (json!({"destination": "builder"}), "StrictHostKeyChecking=yes"),
        (json!({"destination": "builder", "multiplex": false}), "StrictHostKeyChecking=yes"),
        (json!({"destination": "builder", "accept_new_host_key": true}), "StrictHostKeyChecking=accept-new"),
        (
            json!({"destination": "builder", "accept_new_host_key": true, "known_hosts_file": "/k/known"}),
            "StrictHostKeyChecking=accept-new",
        ),
    ] {
        // A probe, the command's 255, and the settling call: every kind of ssh call.
        let host = FakeHost::new()
            .on_prefix(&MKDIR, Reply::ok(""))
            .on(is_probe, Reply::ok(POSIX_PROBE_OUTPUT))
            .on(is_settle, Reply::ok(""))
            .otherwise(Reply::fail(255, ""));
        let status = SshHost::new().run_configured(&host, &config, run_params(&["echo", "a b"])).await.unwrap();
        assert_eq!(status.code, Some(255), "ssh connected, so the command itself ended with 255");
        let sent = ssh_calls(&host);
        assert_eq!(sent.len(), 3, "{config}: {sent:?}");
        for argv in &sent {
            let options: Vec<&str> = argv.windows(2).filter(|w| w[0] == "-o").map(|w| w[1].as_str()).collect();
            assert_eq!(options[..2], ["BatchMode=yes", checking], "{config}: {argv:?}");
            assert!(
                !options.iter().any(|o| o.starts_with("StrictHostKeyChecking=") && *o != checking),
                "host key checking is set once: {argv:?}"
            );
            assert!(!argv.iter().any(|a| a.ends_with("=no") || a.contains("/dev/null")), "{argv:?}");
        }
    }
}

#[tokio::test]
async fn a_shared_connection_is_set_up_once_and_every_ssh_rides_on_it() {
    let host = FakeHost::new().on(is_probe, Reply::ok(POSIX_PROBE_OUTPUT));
    let ssh = SshHost::new();
    let config = json!({"destination": "builder", "user": "ci"});
    ssh.run_configured(&host, &config, run_params(&["true"])).await.unwrap();
    ssh.run_configured(&host, &config, run_params(&["echo", "a b"])).await.unwrap();

    let argvs = host.argvs();
    assert_eq!(argvs[0], MKDIR, "the socket directory is made first, on the inner host, not over ssh");
    assert_eq!(argvs.iter().filter(|a| **a == MKDIR).count(), 1, "and only once");
    let sent = ssh_calls(&host);
    assert_eq!(sent.len(), 3, "run, probe, run: {argvs:?}");
    for argv in &sent {
        let options: Vec<&str> = argv.windows(2).filter(|w| w[0] == "-o").map(|w| w[1].as_str()).collect();
        assert_eq!(options.len(), 5, "{argv:?}");
        assert_eq!(options[2], "ControlMaster=auto");
        let path = options[3].strip_prefix("ControlPath=~/.ssh/tinybox/%C-").expect("a control path");
        assert!(path.len() == 10 && path.chars().all(|c| c.is_ascii_hexdigit()), "{path}");
        assert_eq!(options[4], "ControlPersist=60");
        assert_eq!(argv[argv.len() - 3..argv.len() - 1], ["--", "builder"]);
        assert!(has_pair(argv, "-l", "ci"));
    }
}

fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
    argv.windows(2).any(|w| w[0] == flag && w[1] == value)
}

#[tokio::test]
async fn without_the_socket_directory_each_command_makes_its_own_connection() {
    let host = FakeHost::new().on_prefix(&MKDIR, Reply::fail(1, "mkdir: Permission denied"));
    let status =
        SshHost::new().run_configured(&host, &json!({"destination": "builder"}), run_params(&["true"])).await.unwrap();
    assert!(status.success(), "the command still runs");
    let sent = ssh_calls(&host);
    assert_eq!(sent.len(), 1);
    assert!(!sent[0].iter().any(|a| a.starts_with("Control")), "{:?}", sent[0]);
}

#[tokio::test]
async fn a_destination_or_user_that_reads_as_an_option_is_refused_before_anything_is_sent() {
    for config in [
        json!({"destination": "-oProxyCommand=touch /tmp/pwned"}),
        json!({"destination": "builder", "user": "-oProxyCommand=x"}),
        json!({"destination": "builder", "options": ["-v"]}),
        serde_json::Value::Null,
    ] {
        let host = FakeHost::new();
        let err = SshHost::new().run_configured(&host, &config, run_params(&["true"])).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest, "{config}: {err}");
        assert!(host.calls().is_empty(), "{config}: nothing reaches the inner host");
    }
    let host = FakeHost::new();
    let err = SshHost::new()
        .run_configured(&host, &json!({"destination": "-oProxyCommand=x"}), run_params(&["true"]))
        .await
        .unwrap_err();
    assert!(err.message.contains("starts with '-', which ssh would read as an option"), "{err}");
}

#[tokio::test]
async fn what_no_command_line_can_carry_is_refused_before_anything_is_sent() {
    let host = FakeHost::new();
    let ssh = SshHost::new();
    for argv in [&[][..], &["echo", "a\0b"][..]] {
        let err = ssh.run_configured(&host, &unshared(), run_params(argv)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest, "{argv:?}: {err}");
    }
    assert!(host.calls().is_empty());
}

#[tokio::test]
async fn a_255_that_ssh_cannot_connect_again_is_a_connection_error_quoting_ssh() {
    let host = FakeHost::new().otherwise(Reply::fail(255, REFUSED));
    let err = SshHost::new().run_configured(&host, &unshared(), run_params(&["make"])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert_eq!(err.message, "cannot reach ssh host builder: ssh: connect to host builder port 22: Connection refused");
    let sent = ssh_calls(&host);
    assert_eq!(sent.len(), 2, "the command, then one check: {sent:?}");
    assert_eq!(remote(&sent[0]), "exec make");
    assert!(is_settle(&sent[1]));
    assert_eq!(sent[1][..sent[1].len() - 1], sent[0][..sent[0].len() - 1], "the check goes the same way");

    let host = FakeHost::new().otherwise(Reply::fail(255, ""));
    let err = SshHost::new()
        .run_configured(
            &host,
            &json!({"destination": "builder", "port": 2222, "multiplex": false}),
            run_params(&["make"]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.message, "cannot reach ssh host builder port 2222: ssh exited 255 and said nothing");
}

#[tokio::test]
async fn any_other_status_is_the_command_s_own_and_nothing_more_is_sent() {
    for status in [ExitStatus::code(1), ExitStatus::code(254), ExitStatus { code: None, signal: Some(9) }] {
        let host = FakeHost::new().otherwise(Reply::exit(status));
        let got = SshHost::new().run_configured(&host, &unshared(), run_params(&["make"])).await.unwrap();
        assert_eq!(got, status);
        assert_eq!(host.calls().len(), 1, "{status:?}");
    }
}

#[tokio::test]
async fn a_cancelled_run_s_255_is_the_cancellation_whenever_the_cancel_arrives() {
    // Before the run ends: no check is made.
    let host = FakeHost::new().otherwise(Reply::fail(255, "Killed by signal 15.\r\n"));
    let ssh = SshHost::new();
    ssh.cancel("x42-7").await.unwrap();
    let status = ssh.run_configured(&host, &unshared(), run_params(&["sleep", "60"])).await.unwrap();
    assert_eq!(status, CANCELLED);
    assert_eq!(host.calls().len(), 1, "no connection check for a cancelled run");
    assert!(!ssh.was_cancelled("x42-7"), "the id is forgotten once the run ends");

    // While the 255 is being settled: the check's verdict is dropped.
    let ssh = Arc::new(SshHost::new());
    let cancelling = ssh.clone();
    let host = FakeHost::replying(move |argv| {
        if is_settle(argv) {
            cancelling.cancelled.lock().unwrap().insert("x42-7".into());
            Reply::fail(255, REFUSED)
        } else {
            Reply::fail(255, "Killed by signal 15.\r\n")
        }
    });
    let status = ssh.run_configured(&host, &unshared(), run_params(&["sleep", "60"])).await.unwrap();
    assert_eq!(status, CANCELLED);
    assert_eq!(ssh_calls(&host).len(), 2);
}

#[tokio::test]
async fn a_login_shell_that_cannot_be_quoted_for_never_gets_a_quoted_command() {
    let host = FakeHost::new().on(is_probe, Reply::ok("/usr/bin/fish\ntinybox\\probe\nsingle'quote\n"));
    let ssh = SshHost::new();
    let err = ssh.run_configured(&host, &unshared(), run_params(&["echo", "a b"])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unsupported);
    assert!(err.message.starts_with("ssh host builder: the remote login shell is /usr/bin/fish"), "{err}");
    assert_eq!(ssh_calls(&host).len(), 1, "only the probe was sent");
    // A plain command means the same to fish and needs no quoting: it still runs.
    ssh.run_configured(&host, &unshared(), run_params(&["true"])).await.unwrap();
    assert_eq!(remote(&ssh_calls(&host)[1]), "exec true");
}

#[tokio::test]
async fn a_probe_that_cannot_connect_is_a_connection_error_and_is_tried_again() {
    let probes = Arc::new(AtomicUsize::new(0));
    let counted = probes.clone();
    let host = FakeHost::replying(move |argv| {
        if is_probe(argv) && counted.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::fail(255, REFUSED)
        } else if is_probe(argv) {
            Reply::ok(POSIX_PROBE_OUTPUT)
        } else {
            Reply::ok("")
        }
    });
    let ssh = SshHost::new();
    let err = ssh.run_configured(&host, &unshared(), run_params(&["echo", "a b"])).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable);
    assert!(err.message.contains("Connection refused"), "{err}");
    assert_eq!(ssh_calls(&host).len(), 1, "the command is not sent to a host that cannot be reached");
    ssh.run_configured(&host, &unshared(), run_params(&["echo", "a b"])).await.unwrap();
    assert_eq!(probes.load(Ordering::SeqCst), 2, "a failed probe is not remembered");
    assert_eq!(remote(&ssh_calls(&host)[2]), "exec 'echo' 'a b'");
}
