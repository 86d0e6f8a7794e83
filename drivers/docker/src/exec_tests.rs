//! Exec against the recording fake host: one `docker exec` with the
//! exec's own id and streams, the lifeline watcher, a client that lost its
//! daemon, cancellation racing the command, and the wrapper's one-line
//! report of a program that cannot run.

use super::*;

fn exec_params(handle: serde_json::Value, cwd: Option<&str>) -> ExecParams {
    let mut request = ExecRequest::new(["echo", "a b", "$(x)"]);
    request.cwd = cwd.map(str::to_owned);
    request.env.insert("B".into(), "request".into());
    ExecParams {
        target: BoxRef { box_id: BoxId::new("box-0").unwrap(), handle },
        exec_id: "x42-7".into(),
        request,
        box_env: [("A".to_string(), "box".to_string()), ("B".to_string(), "box".to_string())].into(),
        stdio: StdioRef { socket: EXEC_SOCKET.into() },
        egress: None,
    }
}

#[tokio::test]
async fn exec_is_one_docker_exec_with_the_exec_s_own_id_and_streams() {
    let host = FakeHost::new();
    let status = docker().exec(&host, exec_params(handle(Some("/workspace")), Some("src"))).await.unwrap();
    assert!(status.success());
    assert!(commands(&host).is_empty(), "no helper call on success");
    let runs = runs(&host);
    assert_eq!(host.calls().len(), 2, "the command's docker exec and its lifeline, nothing else");
    let run = &runs[0];
    assert_eq!(run.exec_id, "x42-7");
    assert_eq!(run.stdio.socket, PathBuf::from(EXEC_SOCKET));
    let a = &run.argv;
    let wrapper = crate::env_file::wrapper(false);
    assert_eq!(&a[..5], ["sh", "-c", &wrapper, "sh", "2"], "the client runs under a shell that dies of a cancel");
    assert!(wrapper.ends_with("\nexit $?"), "{wrapper}");
    let a = &a[5..];
    assert_eq!(&a[..3], ["docker", "exec", "-i"]);
    assert!(has_pair(a, "--workdir", "/workspace/src"));
    // The values reach docker in an env file on a pipe, never on a command line.
    assert!(has_pair(a, "--env-file", "/dev/fd/5"));
    assert!(!run.argv.iter().any(|w| w.contains("A=box") || w.contains("B=request") || w == "--env"), "{:?}", run.argv);
    let carried: std::collections::BTreeMap<String, String> =
        [("TINYBOX_BOXENV_0", "A=box"), ("TINYBOX_BOXENV_1", "B=request")].map(|(k, v)| (k.into(), v.into())).into();
    assert_eq!(run.env, carried, "the request's env wins");
    assert!(!run.clear_env, "the docker CLI keeps its own settings");
    assert_eq!(a[a.len() - 3..], ["echo", "a b", "$(x)"], "the argv travels as a vector");
    assert!(a.contains(&"/tmp/.tinybox-exec-x42-7.pid".to_string()));
}

#[tokio::test]
async fn exec_status_one_asks_docker_whether_the_box_is_still_there() {
    let host = ending_with(ExitStatus::code(1), failed(1, "Error: No such container: tinybox-ns1-box-0"));
    let err = docker().exec(&host, exec_params(handle(None), None)).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    assert!(err.message.contains("box box-0 is gone"), "{err}");

    let host = ending_with(ExitStatus::code(1), ok(r#"{"Status":"exited","ExitCode":137,"OOMKilled":true}"#));
    let err = docker().exec(&host, exec_params(handle(None), None)).await.unwrap_err();
    assert!(err.message.contains("is exited with status 137, killed for exceeding its memory limit"), "{err}");

    let host = ending_with(ExitStatus::code(1), ok(r#"{"Status":"running"}"#));
    let status = docker().exec(&host, exec_params(handle(None), None)).await.unwrap();
    assert_eq!(status.code, Some(1), "a command's own failure is its status");
    assert_eq!(verbs(&host), ["container"], "the one helper asked for the container's state");
    let a = &runs(&host)[0].argv;
    assert!(!a.contains(&"--workdir".to_string()), "no directory named: the image's own");
}

#[tokio::test]
async fn a_client_that_lost_its_daemon_is_a_driver_error_not_the_command_s_status() {
    // The daemon went away mid-command: the client ends with 255 and says
    // nothing, and the state helper cannot reach the daemon either.
    let gone = "Cannot connect to the Docker daemon at unix:///run/d.sock. Is the docker daemon running?";
    for code in [125, 126, 127, 255] {
        let host = ending_with(ExitStatus::code(code), failed(1, gone));
        let err = docker().exec(&host, exec_params(handle(None), None)).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Unavailable, "{err}");
        assert!(err.message.contains(&format!("lost docker (the client ended with status {code})")), "{err}");
        assert!(err.message.contains("Cannot connect to the Docker daemon"), "{err}");
        assert!(!err.message.contains('\n'), "one line: {err}");
    }
    // The same statuses from a command in a box that is still there are the command's.
    for code in [125, 255] {
        let host = ending_with(ExitStatus::code(code), ok(r#"{"Status":"running"}"#));
        assert_eq!(docker().exec(&host, exec_params(handle(None), None)).await.unwrap().code, Some(code));
    }
    // Other statuses never cost a docker call.
    let host = ending_with(ExitStatus::code(2), failed(1, gone));
    assert_eq!(docker().exec(&host, exec_params(handle(None), None)).await.unwrap().code, Some(2));
    assert!(commands(&host).is_empty());
}

#[tokio::test]
async fn every_exec_has_a_lifeline_released_only_once_its_command_has_ended() {
    let host = ending_with(ExitStatus::code(3), ok(""));
    let status = docker().exec(&host, exec_params(handle(None), None)).await.unwrap();
    assert_eq!(status.code, Some(3));
    let lifelines = lifelines(&host);
    assert_eq!(lifelines.len(), 1, "{:?}", host.argvs());
    let (run, read) = &lifelines[0];
    assert_eq!(run.exec_id, "x42-7-lifeline", "an id of its own: a cancel of the exec is not the lifeline's");
    assert_ne!(run.stdio.socket, PathBuf::from(EXEC_SOCKET), "never the caller's streams");
    assert_eq!(&run.argv[..4], ["docker", "exec", "-i", "tinybox-ns1-box-0"]);
    assert_eq!(run.argv.last().unwrap(), "[/]tmp/.tinybox-exec-x42-7.pid", "it stops this exec's command");
    assert_eq!(read, b"done\n");
}

/// A host where the box's command never ends (as when the driver is killed
/// while it runs) and the lifeline watcher reports what it read on its
/// input, read to the end on a thread of its own.
struct EndlessHost {
    lifeline_read: std::sync::Mutex<Option<std::sync::mpsc::Receiver<Vec<u8>>>>,
    watching: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl tinybox_sdk::Host for EndlessHost {
    async fn run(&self, params: RunParams) -> Result<ExitStatus, DriverError> {
        if is_lifeline(&params.argv) {
            let fds = tinybox_sdk::stdio::receive(&params.stdio).await?;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut read = Vec::new();
                let _ = std::io::Read::read_to_end(&mut std::fs::File::from(fds.stdin), &mut read);
                let _ = tx.send(read);
            });
            *self.lifeline_read.lock().unwrap() = Some(rx);
            self.watching.notify_one();
        }
        std::future::pending().await
    }
}

#[tokio::test]
async fn an_exec_abandoned_before_its_command_ended_leaves_the_lifeline_unreleased() {
    let host = EndlessHost { lifeline_read: std::sync::Mutex::new(None), watching: Default::default() };
    let d = docker();
    {
        let exec = d.exec(&host, exec_params(handle(None), None));
        tokio::pin!(exec);
        let started = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            tokio::select! {
                _ = &mut exec => panic!("an endless command ended"),
                () = host.watching.notified() => {}
            }
        });
        started.await.expect("the exec started a lifeline watcher");
    }
    // The exec is gone (as with the driver's process): its end of the pipe closed.
    let rx = host.lifeline_read.lock().unwrap().take().unwrap();
    let read = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("the lifeline's input ended");
    assert_eq!(read, b"", "end of file without `done`: the watcher stops the command");
}

#[tokio::test]
async fn a_cancel_before_the_exec_starts_means_it_never_runs() {
    let host = FakeHost::new();
    let d = docker();
    d.cancel(&host, "x42-7").await.unwrap();
    assert!(commands(&host).is_empty(), "nothing in flight, nothing to stop");
    let status = d.exec(&host, exec_params(handle(None), None)).await.unwrap();
    assert_eq!(status.signal, Some(15));
    assert!(host.calls().is_empty(), "the cancelled command never started");
}

#[tokio::test]
async fn a_client_killed_by_a_signal_has_its_command_stopped_inside_the_container() {
    let host = ending_with(ExitStatus { code: None, signal: Some(15) }, ok("TERM\n"));
    let status = docker().exec(&host, exec_params(handle(None), None)).await.unwrap();
    assert_eq!(status.signal, Some(15));
    let cmds = commands(&host);
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    assert_eq!(&cmds[0][..3], ["docker", "exec", "tinybox-ns1-box-0"]);
    assert_eq!(cmds[0].last().unwrap(), "[/]tmp/.tinybox-exec-x42-7.pid");
    assert_eq!(host.calls().len(), 3, "the command and its lifeline, then the stop");
    assert_eq!(lifelines(&host)[0].1, b"done\n", "the stop is over: the lifeline is released");

    // A command that outlived SIGTERM's grace is reported killed.
    let host = ending_with(ExitStatus { code: None, signal: Some(15) }, ok("KILL\n"));
    let status = docker().exec(&host, exec_params(handle(None), None)).await.unwrap();
    assert_eq!(status, ExitStatus { code: None, signal: Some(9) });

    // A command that died of a signal itself is reported by docker as 128+n: nothing to stop.
    let host = ending_with(ExitStatus::code(143), ok(""));
    docker().exec(&host, exec_params(handle(None), None)).await.unwrap();
    assert!(commands(&host).is_empty());
}

/// A host where the box's command runs until the driver's cancel script
/// starts; the client then exits 0, as a terminated `docker exec` does,
/// while the script is still stopping the command inside the container.
/// Helper commands (the script) are answered by a recording fake.
struct RacingHost {
    helpers: FakeHost,
    running: tokio::sync::Notify,
    killed: tokio::sync::Notify,
    events: std::sync::Mutex<Vec<&'static str>>,
}

#[async_trait::async_trait]
impl tinybox_sdk::Host for RacingHost {
    async fn run(&self, params: RunParams) -> Result<ExitStatus, DriverError> {
        if is_lifeline(&params.argv) {
            return self.helpers.run(params).await;
        }
        if params.stdio.socket.as_path() == Path::new(EXEC_SOCKET) {
            self.running.notify_one();
            self.killed.notified().await;
            return Ok(ExitStatus::code(0));
        }
        self.killed.notify_one();
        // The script takes a while (a docker exec of its own): let the
        // client's end be seen first.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let status = self.helpers.run(params).await;
        self.events.lock().unwrap().push("the command is dead");
        status
    }
}

#[tokio::test]
async fn a_cancelled_exec_answers_only_once_its_command_is_dead_and_never_as_a_success() {
    let host = RacingHost {
        helpers: FakeHost::replying(|_| ok("TERM\n")),
        running: Default::default(),
        killed: Default::default(),
        events: std::sync::Mutex::new(Vec::new()),
    };
    let d = docker();
    let exec = async {
        let status = d.exec(&host, exec_params(handle(None), None)).await.unwrap();
        host.events.lock().unwrap().push("the exec answered");
        status
    };
    let cancel = async {
        host.running.notified().await;
        d.cancel(&host, "x42-7").await.unwrap();
    };
    let (status, ()) = tokio::join!(exec, cancel);
    assert_eq!(status, ExitStatus { code: None, signal: Some(15) }, "the client's exit 0 is not the command's");
    assert_eq!(*host.events.lock().unwrap(), ["the command is dead", "the exec answered"]);
}

/// Runs the exec wrapper as the box's sh would, with this machine's sh.
fn wrapped(argv: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new("sh")
        .args(["-c", argv::EXEC_WRAPPER.as_str(), "sh", "/tmp/.tinybox-exec-x1-0.pid"])
        .args(argv)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_program_that_is_missing_or_cannot_run_is_named_in_one_line_with_a_shell_s_status() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("notes.txt");
    std::fs::write(&plain, "echo ran\n").unwrap();
    let (plain, dir) = (plain.to_str().unwrap(), dir.path().to_str().unwrap());
    for (program, code, line) in [
        ("no-such-program-here", 127, "tinybox: no program no-such-program-here in the box\n".to_owned()),
        ("/no/such/dir/prog", 127, "tinybox: no program /no/such/dir/prog in the box\n".to_owned()),
        (plain, 126, format!("tinybox: {plain} in the box is not an executable file\n")),
        (dir, 126, format!("tinybox: {dir} in the box is not an executable file\n")),
    ] {
        assert_eq!(wrapped(&[program, "arg"]), (Some(code), String::new(), line), "{program}");
    }
    // A program that runs keeps its own status and streams, arguments intact.
    assert_eq!(
        wrapped(&["sh", "-c", "echo \"$1\"; echo e >&2; exit 3", "sh", "a b"]),
        (Some(3), "a b\n".into(), "e\n".into())
    );
    assert_eq!(wrapped(&["printf", "%s", "-n"]).1, "-n", "the external program, not a builtin's options");
}
