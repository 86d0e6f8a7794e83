//! The ssh host driver against real sshd instances on loopback: argument
//! vectors round-trip byte-exact through every supported remote login shell,
//! non-POSIX shells are refused before anything runs, a remote 255 is told
//! from a connection failure, and bad keys fail fast without prompting.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use tinybox_core::Target;
use tinybox_core::model::{BoxSpec, ExecRequest, HostName, Placement, SandboxName};
use tinybox_tests::docker::{run, run_request};
use tinybox_tests::piped_stdio;
use tinybox_tests::sshd::{GUARD, Sshd, engine, ensure_user, keygen};

fn passthrough_on(host: &str) -> BoxSpec {
    BoxSpec::new(Placement::new(HostName::new(host).unwrap(), SandboxName::passthrough()))
}

/// The strings an injection would hide in.
fn nasty() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        "-",
        "--",
        "-n",
        "-e",
        "'",
        "''",
        "\"",
        "\\",
        "\\\\'",
        "'\\''",
        "$HOME",
        "${HOME}",
        "$(touch PWNED)",
        "`touch PWNED`",
        "a b\tc\nd",
        "; touch PWNED",
        "&& touch PWNED",
        "|| touch PWNED",
        "| touch PWNED",
        "> PWNED",
        "*",
        "?",
        "[a-z]*",
        "{a,b}",
        "~",
        "~root",
        "!!",
        "!$",
        "#comment",
        "%s %n",
        "é ü 日本",
        "\r",
        "\u{1}\u{7f}",
        "x=1",
        "\\n",
        "a\\",
        "\n",
        " ",
        "'\"'\"'",
        "$'x'",
        "$\"x\"",
        "=cmd",
    ]
    .map(String::from)
    .to_vec();
    v.push("long-".repeat(2000));
    v
}

const POSIX_USERS: &[(&str, &str)] = &[
    ("tbx-sh", "/bin/sh"),
    ("tbx-bash", "/bin/bash"),
    ("tbx-dash", "/bin/dash"),
    ("tbx-zsh", "/bin/zsh"),
    ("tbx-ksh", "/bin/ksh93"),
    ("tbx-mksh", "/bin/mksh"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argv_cwd_and_env_round_trip_through_every_supported_login_shell() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip(
                "ssh_host::argv_cwd_and_env_round_trip_through_every_supported_login_shell",
                &why,
            );
        }
    };
    // A directory every test user can enter, named to hurt.
    let base = tempfile::Builder::new().prefix("tbx-rt").tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cwd = base.path().join("a dir; with 'quotes' and $x");
    std::fs::create_dir(&cwd).unwrap();
    std::fs::set_permissions(&cwd, std::fs::Permissions::from_mode(0o777)).unwrap();

    let mut hosts = Vec::new();
    for (user, shell) in POSIX_USERS {
        match ensure_user(user, shell) {
            Some(u) => hosts.push((u, *shell)),
            None => tinybox_tests::skip(
                &format!("ssh_host::argv_cwd_and_env_round_trip_through_every_supported_login_shell ({shell})"),
                "shell not installed",
            ),
        }
    }
    assert!(hosts.len() >= 3, "at least sh, bash and dash are on every Debian machine");
    let entries: Vec<(&str, _)> = hosts.iter().map(|(u, _)| (u.as_str(), sshd.entry(u, None))).collect();
    let tb = engine(&entries);

    let args = nasty();
    let mut expected = b"start\0".to_vec();
    for a in &args {
        expected.extend_from_slice(a.as_bytes());
        expected.push(0);
    }
    for (user, shell) in &hosts {
        let (code, out, err) = sshd.ssh(user, "echo $SHELL");
        assert_eq!((code, out.trim()), (0, *shell), "{user}'s login shell: {err}");

        let info = tb.create(passthrough_on(user)).await.unwrap();
        let mut argv = vec!["printf".to_owned(), "%s\\0".to_owned(), "start".to_owned()];
        argv.extend(args.iter().cloned());
        let mut req = ExecRequest::new(argv);
        req.cwd = Some(cwd.to_string_lossy().into_owned());
        let out = run_request(&tb, &info.id, req, b"").await;
        assert!(out.status.success(), "{shell}: {} {}", out.status, out.stderr);
        assert_eq!(out.stdout.as_bytes(), expected.as_slice(), "{shell} changed the argument vector");
        assert!(!cwd.join("PWNED").exists(), "{shell}: something was injected");

        // The working directory and environment arrive as given; stdin flows through.
        let mut req = ExecRequest::new(["sh", "-c", "pwd; printf '%s|' \"$WEIRD\" \"$A_B\"; cat"]);
        req.cwd = Some(cwd.to_string_lossy().into_owned());
        req.env = BTreeMap::from([("WEIRD".into(), "it's $HOME `x` \\ \n;".into()), ("A_B".into(), "".into())]);
        let out = run_request(&tb, &info.id, req, b"from stdin").await;
        assert!(out.status.success(), "{shell}: {}", out.stderr);
        assert_eq!(
            out.stdout,
            format!("{}\nit's $HOME `x` \\ \n;||from stdin", cwd.display()),
            "{shell}: cwd, env or stdin changed"
        );
        tb.remove(&info.id).await.unwrap();
    }
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_shells_that_are_not_posix_are_refused_before_anything_runs() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip(
                "ssh_host::login_shells_that_are_not_posix_are_refused_before_anything_runs",
                &why,
            );
        }
    };
    let flagdir = tempfile::Builder::new().prefix("tbx-np").tempdir().unwrap();
    std::fs::set_permissions(flagdir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut tried = 0;
    for (user, shell) in [("tbx-fish", "/usr/bin/fish"), ("tbx-tcsh", "/bin/tcsh")] {
        let Some(user) = ensure_user(user, shell) else {
            tinybox_tests::skip(
                &format!("ssh_host::login_shells_that_are_not_posix_are_refused_before_anything_runs ({shell})"),
                "shell not installed (apt-get install fish tcsh)",
            );
            continue;
        };
        tried += 1;
        let tb = engine(&[(user.as_str(), sshd.entry(&user, None))]);
        let info = tb.create(passthrough_on(&user)).await.unwrap();
        let flag = flagdir.path().join(format!("ran {user}"));
        let (stdio, _out, _err) = piped_stdio();
        let req = ExecRequest::new(["touch".to_owned(), flag.to_string_lossy().into_owned()]);
        let err = tb.exec(&info.id, req, stdio, Target::Workspace, std::future::pending()).await.unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(shell) && msg.contains("POSIX"), "{shell}: {msg}");
        assert!(!flag.exists(), "{shell}: the command ran although it was refused");
        // A command of plain words needs no quoting and means the same there.
        let out = run(&tb, &info.id, &["echo", "plain-words"]).await;
        assert_eq!((out.status.code, out.stdout.as_str()), (Some(0), "plain-words\n"), "{shell}: {}", out.stderr);
        tb.close().await;
    }
    if tried == 0 {
        tinybox_tests::skip(
            "ssh_host::login_shells_that_are_not_posix_are_refused_before_anything_runs",
            "neither fish nor tcsh is installed",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_255_is_the_command_s_own_and_an_unreachable_host_is_an_error() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip(
                "ssh_host::a_remote_255_is_the_command_s_own_and_an_unreachable_host_is_an_error",
                &why,
            );
        }
    };
    let mut nowhere = sshd.entry("root", None);
    // A port nothing listens on: bind one, note it, let it go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    nowhere.config["port"] = closed.into();
    let tb = engine(&[("far", sshd.entry("root", None)), ("nowhere", nowhere)]);

    let info = tb.create(passthrough_on("far")).await.unwrap();
    let out = run(&tb, &info.id, &["sh", "-c", "echo out; echo err >&2; exit 255"]).await;
    assert_eq!(out.status.code, Some(255), "a real 255 is the command's status: {}", out.stderr);
    assert_eq!((out.stdout.as_str(), out.stderr.as_str()), ("out\n", "err\n"));
    let out = run(&tb, &info.id, &["sh", "-c", "exit 7"]).await;
    assert_eq!(out.status.code, Some(7));

    let gone = tb.create(passthrough_on("nowhere")).await.unwrap();
    let started = Instant::now();
    for argv in [&["true"][..], &["sh", "-c", "exit 0"][..]] {
        let (stdio, _out, _err) = piped_stdio();
        let err = tb
            .exec(&gone.id, ExecRequest::new(argv.iter().copied()), stdio, Target::Workspace, std::future::pending())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot reach ssh host") && err.contains("Connection refused"), "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(30), "a refused connection fails fast");
    tb.close().await;
}

async fn exec_err(tb: &tinybox_core::Tinybox, host: &str) -> String {
    let info = tb.create(passthrough_on(host)).await.unwrap();
    let (stdio, _out, _err) = piped_stdio();
    let started = Instant::now();
    let r = tokio::time::timeout(
        GUARD,
        tb.exec(&info.id, ExecRequest::new(["echo", "hi there"]), stdio, Target::Workspace, std::future::pending()),
    )
    .await
    .expect("never hangs");
    assert!(started.elapsed() < Duration::from_secs(30), "{host}: a refusal is prompt");
    r.unwrap_err().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_host_keys_and_rejected_keys_fail_fast_and_never_prompt() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip("ssh_host::wrong_host_keys_and_rejected_keys_fail_fast_and_never_prompt", &why);
        }
    };
    let keys = tempfile::tempdir().unwrap();
    // known_hosts naming another key for this server: a changed host key.
    let impostor = keygen(keys.path(), "impostor");
    let changed = keys.path().join("changed_known_hosts");
    let impostor_pub = std::fs::read_to_string(impostor.with_extension("pub")).unwrap();
    std::fs::write(&changed, format!("[127.0.0.1]:{} {impostor_pub}", sshd.port)).unwrap();
    let mut wrong_key = sshd.entry("root", None);
    wrong_key.config["known_hosts_file"] = changed.to_string_lossy().into_owned().into();
    // Even opting in to new keys never accepts a changed one.
    let mut wrong_key_accepting = wrong_key.clone();
    wrong_key_accepting.config["accept_new_host_key"] = true.into();
    // An empty known_hosts: the server is unknown.
    let empty = keys.path().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let mut unknown = sshd.entry("root", None);
    unknown.config["known_hosts_file"] = empty.to_string_lossy().into_owned().into();
    let mut unknown_accepting = unknown.clone();
    unknown_accepting.config["accept_new_host_key"] = true.into();
    // A client key the server does not accept.
    let stranger = keygen(keys.path(), "stranger");
    let mut rejected = sshd.entry("root", None);
    rejected.config["identity_file"] = stranger.to_string_lossy().into_owned().into();

    let tb = engine(&[
        ("changed", wrong_key),
        ("changed-accepting", wrong_key_accepting),
        ("unknown", unknown),
        ("unknown-accepting", unknown_accepting),
        ("rejected", rejected),
    ]);
    for host in ["changed", "changed-accepting"] {
        let err = exec_err(&tb, host).await;
        assert!(err.contains("cannot reach ssh host") && err.contains("Host key verification failed"), "{host}: {err}");
        assert!(err.contains("REMOTE HOST IDENTIFICATION HAS CHANGED"), "{host}: {err}");
    }
    assert_eq!(std::fs::read_to_string(&changed).unwrap(), format!("[127.0.0.1]:{} {impostor_pub}", sshd.port));
    let err = exec_err(&tb, "unknown").await;
    assert!(err.contains("Host key verification failed"), "{err}");
    assert_eq!(std::fs::read_to_string(&empty).unwrap(), "", "nothing was accepted without the opt-in");
    let err = exec_err(&tb, "rejected").await;
    assert!(err.contains("Permission denied (publickey)"), "{err}");

    // Opted in, an unknown key is accepted and recorded.
    let info = tb.create(passthrough_on("unknown-accepting")).await.unwrap();
    let out = run(&tb, &info.id, &["echo", "hi there"]).await;
    assert_eq!(out.stdout, "hi there\n", "{}", out.stderr);
    // Debian's ssh hashes host names in known_hosts; the key itself is plain.
    let host_key = std::fs::read_to_string(&sshd.known_hosts).unwrap();
    let key_b64 = host_key.split_whitespace().nth(2).unwrap();
    assert!(std::fs::read_to_string(&empty).unwrap().contains(key_b64), "the accepted key was recorded");
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_remote_command_ends_and_options_never_come_from_configuration() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            return tinybox_tests::skip(
                "ssh_host::a_cancelled_remote_command_ends_and_options_never_come_from_configuration",
                &why,
            );
        }
    };
    let mut evil = sshd.entry("root", None);
    evil.config["destination"] = "-oProxyCommand=touch /tmp/tinybox-pwned".into();
    let mut extra = sshd.entry("root", None);
    extra.config["options"] = serde_json::json!(["-oProxyCommand=touch /tmp/tinybox-pwned"]);
    let tb = engine(&[("far", sshd.entry("root", None)), ("evil", evil), ("extra", extra)]);
    for host in ["evil", "extra"] {
        let info = tb.create(passthrough_on(host)).await.unwrap();
        let (stdio, _out, _err) = piped_stdio();
        let err = tb.exec(&info.id, ExecRequest::new(["true"]), stdio, Target::Workspace, std::future::pending()).await;
        let err = err.unwrap_err().to_string();
        assert!(err.contains("starts with '-'") || err.contains("unknown field"), "{host}: {err}");
    }
    assert!(!std::path::Path::new("/tmp/tinybox-pwned").exists());

    // Cancel: the local ssh ends with the signal, and the caller is not held.
    let info = tb.create(passthrough_on("far")).await.unwrap();
    let pids = tempfile::tempdir().unwrap();
    let pidfile = pids.path().join("pid");
    let script = format!("echo $$ > '{}'; echo go; exec sleep 1000", pidfile.display());
    let outcome = tinybox_tests::exec_cancelled_once_started(&tb, &info.id, &["sh", "-c", &script]).await;
    assert!(outcome.cancelled);
    assert_eq!(outcome.status.signal, Some(15), "{}", outcome.status);
    // Ending the local ssh does not reach a remote command that neither reads
    // nor writes (docs/adr/0011-ssh-host.md); end the one this test started.
    let remote: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let _ =
        rustix::process::kill_process(rustix::process::Pid::from_raw(remote).unwrap(), rustix::process::Signal::KILL);
    tb.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_share_one_connection_per_host_configuration() {
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => return tinybox_tests::skip("ssh_host::commands_share_one_connection_per_host_configuration", &why),
    };
    let user = ensure_user("tbx-mux", "/bin/bash").unwrap();
    let mut solo = sshd.entry(&user, None);
    solo.config["multiplex"] = false.into();
    // Same destination, port and user as `shared`, but a known_hosts naming another key.
    let keys = tempfile::tempdir().unwrap();
    let impostor = keygen(keys.path(), "impostor");
    let wrong = keys.path().join("known_hosts");
    std::fs::write(
        &wrong,
        format!("[127.0.0.1]:{} {}", sshd.port, std::fs::read_to_string(impostor.with_extension("pub")).unwrap()),
    )
    .unwrap();
    let mut distrusting = sshd.entry(&user, None);
    distrusting.config["known_hosts_file"] = wrong.to_string_lossy().into_owned().into();
    let tb = engine(&[("shared", sshd.entry(&user, None)), ("solo", solo), ("distrusting", distrusting)]);
    let logins = || sshd.log().matches(&format!("Accepted publickey for {user}")).count();

    let shared = tb.create(passthrough_on("shared")).await.unwrap();
    for i in 0..4 {
        let out = run(&tb, &shared.id, &["sh", "-c", &format!("echo {i}")]).await;
        assert_eq!(out.stdout, format!("{i}\n"), "{}", out.stderr);
    }
    let after_shared = logins();
    assert_eq!(after_shared, 1, "the probe and four commands rode one connection");

    // A host configured with another known_hosts never rides on that connection:
    // its own check still fails, while the shared connection is up.
    let gone = tb.create(passthrough_on("distrusting")).await.unwrap();
    let (stdio, _out, _err) = piped_stdio();
    let err = tb.exec(&gone.id, ExecRequest::new(["true"]), stdio, Target::Workspace, std::future::pending()).await;
    assert!(err.unwrap_err().to_string().contains("Host key verification failed"));

    let solo = tb.create(passthrough_on("solo")).await.unwrap();
    for _ in 0..2 {
        let out = run(&tb, &solo.id, &["true"]).await;
        assert!(out.status.success(), "{}", out.stderr);
    }
    assert_eq!(logins(), after_shared + 2, "without multiplexing, a connection per command");
    tb.close().await;
}
