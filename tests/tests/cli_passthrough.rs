//! The `tinybox` CLI end to end on local/passthrough: real processes, the
//! real local host driver, the real descriptor-passing data path.

use std::io::{BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use tinybox_tests::{Cli, bin, have, read_line_within, skip};

const GUARD: Duration = Duration::from_secs(30);

#[test]
fn argv_reaches_the_program_byte_exact() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let tricky = [
        "a b",
        "'single'",
        "\"double\"",
        ";",
        "$(touch /tmp/pwned)",
        "`id`",
        "new\nline",
        "",
        "-x",
        "*",
        "\\",
        "$HOME",
    ];
    let mut args = vec!["exec", &id, "--", "printf", "%s\\0"];
    args.extend(tricky);
    let out = cli.cmd(&args).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected: Vec<u8> = tricky.iter().flat_map(|a| a.bytes().chain([0])).collect();
    assert_eq!(out.stdout, expected);
}

#[test]
fn exit_codes_pass_through() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    for code in [0, 1, 3, 42, 124, 255] {
        let (got, _, _) = cli.run(&["exec", &id, "--", "sh", "-c", &format!("exit {code}")]);
        assert_eq!(got, code);
    }
    let (got, _, err) = cli.run(&["exec", &id, "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(got, 128 + 9, "{err}");
    let (got, _, err) = cli.run(&["exec", &id, "--", "no-such-program-here"]);
    assert_eq!(got, 127);
    assert!(err.contains("no-such-program-here: command not found"), "{err}");
}

#[test]
fn a_missing_program_exits_127_and_one_that_cannot_run_126_with_one_tinybox_line() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("notes.sh");
    std::fs::write(&plain, "echo ran\n").unwrap();
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"\x7fELF not really").unwrap();
    std::fs::set_permissions(&garbage, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let missing = dir.path().join("missing");
    let [plain, garbage, missing, dir] = [&plain, &garbage, &missing, dir.path()].map(|p| p.display().to_string());
    for (program, code, said) in [
        ("no-such-program-here", 127, "tinybox: no-such-program-here: command not found".to_owned()),
        (missing.as_str(), 127, format!("tinybox: {missing}: command not found")),
        (plain.as_str(), 126, format!("tinybox: {plain}: permission denied")),
        (dir.as_str(), 126, format!("tinybox: {dir}: permission denied")),
        (garbage.as_str(), 126, format!("tinybox: {garbage}: not a program this machine can run (exec format error)")),
    ] {
        let (got, out, err) = cli.run(&["exec", &id, "--", program]);
        assert_eq!((got, out.as_str()), (code, ""), "{program}: {err}");
        assert_eq!(err.lines().collect::<Vec<_>>(), [said.as_str()], "one line naming {program}");
    }
}

#[test]
fn stdin_env_and_cwd() {
    let cli = Cli::new();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_str().unwrap();
    let id =
        cli.create(&["--sandbox", "passthrough", "--workspace", ws, "--env", "BOXVAR=from-box", "--env", "BOTH=box"]);

    let mut child = cli
        .cmd(&["exec", &id, "--", "sh", "-c", "cat; pwd"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let payload: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = {
        let payload = payload.clone();
        std::thread::spawn(move || stdin.write_all(&payload))
    };
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let canon = std::fs::canonicalize(ws).unwrap();
    let mut expected = payload;
    expected.extend_from_slice(format!("{}\n", canon.display()).as_bytes());
    assert_eq!(out.stdout, expected, "stdin bytes and the workspace as cwd");

    let (code, out, _) =
        cli.run(&["exec", &id, "--env", "BOTH=cmd", "--cwd", "/", "--", "sh", "-c", "echo $BOXVAR $BOTH; pwd"]);
    assert_eq!(code, 0);
    assert_eq!(out, "from-box cmd\n/\n", "command env overrides box env; --cwd wins");
}

#[test]
fn output_streams_while_the_command_runs() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    // The command prints, then waits for input the test sends only after it
    // has read that line: buffered output would deadlock (caught by the guard).
    let mut child = cli
        .cmd(&["exec", &id, "--", "sh", "-c", "echo first; read reply; echo second $reply"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (line, stdout) = read_line_within(stdout, GUARD);
    assert_eq!(line, "first\n");
    writeln!(child.stdin.take().unwrap(), "ok").unwrap();
    let (line, _) = read_line_within(stdout, GUARD);
    assert_eq!(line, "second ok\n");
    assert!(child.wait().unwrap().success());
}

#[test]
fn interrupt_stops_the_command_in_the_box() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let mut child = cli
        .cmd(&["exec", &id, "--", "sh", "-c", "echo $$; exec sleep 1000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, _out) = read_line_within(BufReader::new(child.stdout.take().unwrap()), GUARD);
    let pid: i32 = line.trim().parse().unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = wait_within(&mut child, GUARD);
    assert_eq!(status.code(), Some(130));
    // The command itself is gone, not orphaned.
    let gone = poll_until(GUARD, || !std::path::Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid));
    assert!(gone, "the command (pid {pid}) outlived the cancelled exec");
}

#[test]
fn timeout_stops_the_command() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let (code, _, err) = cli.run(&["exec", &id, "--timeout", "1s", "--", "sleep", "1000"]);
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("ran longer than 1s"), "{err}");
}

#[test]
fn refusals_name_the_rule_and_leave_the_store_untouched() {
    let cli = Cli::new();
    cli.create(&["--sandbox", "passthrough"]);
    let before = cli.store_bytes();
    let cases: &[(&[&str], &str)] = &[
        (
            &["create", "--sandbox", "passthrough", "--memory", "1G"],
            "sandbox passthrough does not support memory limit",
        ),
        (&["create", "--sandbox", "passthrough", "--network", "deny"], "does not support network deny"),
        (&["create", "--sandbox", "passthrough", "--port", "8080:80"], "does not support port_forward"),
        (&["create", "--sandbox", "passthrough", "--untrusted"], "does not support isolation kernel or stronger"),
        (&["create", "--sandbox", "passthrough", "--image", "busybox"], "does not support workspace source oci_image"),
        (&["create", "--sandbox", "passthrough", "--pids", "0"], "pids limit 0 is not positive"),
        (&["create", "--sandbox", "passthrough", "--ttl", "0s"], "is not positive"),
        (&["create", "--sandbox", "bad/name"], "contains '/'"),
        (&["create", "--sandbox", "nonexistent"], "no driver named nonexistent"),
        (&["create", "--host", "elsewhere", "--sandbox", "passthrough"], "no host named elsewhere"),
        (&["snapshot", "box-0"], "sandbox passthrough does not support snapshot"),
        (&["fork", "box-0"], "sandbox passthrough does not support snapshot"),
        (&["exec", "box-9", "--", "true"], "no box named box-9"),
    ];
    for (args, expected) in cases {
        let (code, out, err) = cli.run(args);
        assert_ne!(code, 0, "{args:?} succeeded: {out}");
        assert!(err.contains(expected), "{args:?}: expected {expected:?} in {err:?}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line, got {err:?}");
        assert_eq!(cli.store_bytes(), before, "{args:?} changed the store");
    }
}

#[test]
fn without_a_confining_sandbox_create_does_not_fall_back_to_passthrough() {
    let cli = Cli::new();
    // Its own namespace: a daemon-backed sandbox may be the one chosen.
    let ns = format!("nofallback{}", std::process::id());
    let (code, out, err) = cli.run(&["create", "--namespace", &ns]);
    if err.contains("using sandbox") {
        // A confining sandbox is installed here; it must be the one chosen.
        assert!(!err.contains("using sandbox passthrough"), "{err}");
        if code == 0 {
            assert_eq!(cli.run(&["rm", out.trim()]).0, 0);
        }
        return;
    }
    assert!(err.contains("--sandbox passthrough"), "{err}");
    assert!(cli.store_bytes().is_empty() || !String::from_utf8_lossy(&cli.store_bytes()).contains("box-0"));
}

#[test]
fn json_output_and_listing() {
    let cli = Cli::new();
    let a = cli.create(&["--sandbox", "passthrough"]);
    let b = cli.create(&["--sandbox", "passthrough", "--persistent"]);
    let (code, out, _) = cli.run(&["--json", "ls"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = v.as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str()]);
    let (code, out, _) = cli.run(&["--json", "inspect", &a]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["workspace"]["isolation"], "none");
    assert_eq!(v["workspace"]["network"], "not_confined");
    assert_eq!(v["state"], "ready");
    let (code, out, _) = cli.run(&["--json", "create", "--sandbox", "passthrough", "--memory", "1G"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["error"]["kind"], "unsupported");
    let (code, out, _) = cli.run(&["rm", &a, &b]);
    assert_eq!(code, 0);
    assert_eq!(out, format!("{a}\n{b}\n"));
    let (_, out, _) = cli.run(&["--json", "ls"]);
    assert_eq!(out.trim(), "[]");
}

#[test]
fn run_creates_executes_and_removes() {
    let cli = Cli::new();
    let (code, out, err) =
        cli.run(&["run", "--sandbox", "passthrough", "--env", "X=1", "--", "sh", "-c", "echo $X; exit 5"]);
    assert_eq!(code, 5, "{err}");
    assert_eq!(out, "1\n");
    assert!(err.contains("isolation none (not for untrusted code)"), "{err}");
    let (_, out, _) = cli.run(&["--json", "ls"]);
    assert_eq!(out.trim(), "[]");
}

#[test]
fn completions_are_generated() {
    let cli = Cli::new();
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, _) = cli.run(&["completions", shell]);
        assert_eq!(code, 0);
        assert!(out.contains("inspect") && out.contains("sandbox") && out.contains("runner-host"), "{shell}");
    }
}

fn wait_within(child: &mut std::process::Child, guard: Duration) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < guard, "tinybox did not exit within {guard:?}");
        std::thread::yield_now();
    }
}

fn poll_until(guard: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < guard {
        if cond() {
            return true;
        }
        std::thread::yield_now();
    }
    cond()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}

/// Runs `tinybox ARGS` with stdout a pipe whose reader is already gone (as
/// in `tinybox ls | head -1` once head has its line); returns (status, stderr).
fn run_into_closed_pipe(cli: &Cli, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cli.cmd(args).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_reader_that_leaves_early_ends_the_output_quietly() {
    let cli = Cli::new();
    for _ in 0..3 {
        cli.create(&["--sandbox", "passthrough"]);
    }
    let cases: &[&[&str]] = &[
        &["ls"],
        &["--json", "ls"],
        &["drivers"],
        &["--json", "drivers"],
        &["inspect", "box-0"],
        &["--json", "inspect", "box-0"],
        &["completions", "bash"],
        &["create", "--sandbox", "passthrough"],
        &["rm", "box-1"],
    ];
    for args in cases {
        let (code, err) = run_into_closed_pipe(&cli, args);
        assert_eq!(code, Some(0), "{args:?}: the command's own status, not a panic's 101: {err}");
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
    }
    // The commands did their work all the same.
    let (_, out, _) = cli.run(&["--json", "ls"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = v.as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["box-0", "box-2", "box-3"]);
    // An error still says itself on stderr, with its own status.
    let (code, err) = run_into_closed_pipe(&cli, &["--json", "inspect", "box-9"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no box named box-9") && !err.contains("panicked"), "{err}");
}

#[test]
fn a_read_only_store_is_read_and_a_write_to_it_is_one_line() {
    if rustix::process::geteuid().as_raw() != 0 || !have("unshare") {
        skip(
            "cli_passthrough::a_read_only_store_is_read_and_a_write_to_it_is_one_line",
            "needs root and unshare, for a read-only bind mount",
        );
        return;
    }
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let store = cli.home.path().to_str().unwrap().to_owned();
    // Root writes through file modes, not through a read-only mount: bind
    // the store read-only in a mount namespace of the command's own.
    let read_only = |args: &[&str]| {
        let script =
            r#"store=$1; shift; mount --bind "$store" "$store" && mount -o remount,bind,ro "$store" && exec "$@""#;
        let out = std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script, "sh", &store])
            .arg(bin("tinybox"))
            .args(["--store", &store])
            .args(args)
            .env("TINYBOX_DRIVER_PATH", "")
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = read_only(&["--json", "ls"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("\"id\": \"{id}\"")), "{out}");
    let (code, out, err) = read_only(&["ls"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&id), "{out}");
    let (code, out, err) = read_only(&["inspect", &id]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("ready"), "{out}");
    let (code, _, err) = read_only(&["rm", &id]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Read-only file system") && err.trim().lines().count() == 1, "{err}");
    assert_eq!(cli.run(&["--json", "ls"]).1.matches("\"id\"").count(), 1, "the box is still there");
}

#[test]
fn a_request_refused_before_any_driver_starts_and_a_listing_leave_no_file_anywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, tmpdir) = (tmp.path().join("home"), tmp.path().join("tmp"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&tmpdir).unwrap();
    let cases: &[(&[&str], i32)] = &[
        (&["create", "--sandbox", "passthrough", "--pids", "0"], 1),
        (&["create", "--sandbox", "passthrough", "--cpus", "5000"], 1),
        (&["create", "--sandbox", "passthrough", "--workspace", "/etc"], 1),
        (&["exec", "box-0", "--", "true"], 125),
        (&["ls"], 0),
        (&["--json", "ls"], 0),
        (&["template", "ls"], 0),
        (&["host", "ls"], 0),
    ];
    for (args, expected) in cases {
        // The default store: $HOME/.local/state/tinybox; sockets under $TMPDIR.
        let out = std::process::Command::new(bin("tinybox"))
            .args(*args)
            .env_remove("TINYBOX_HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("XDG_RUNTIME_DIR")
            .env("HOME", &home)
            .env("TMPDIR", &tmpdir)
            .env("TINYBOX_DRIVER_PATH", "")
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(*expected), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        for dir in [&home, &tmpdir] {
            let made: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
            assert!(made.is_empty(), "{args:?} made {made:?}");
        }
    }
}

#[test]
fn a_store_an_earlier_build_wrote_keeps_working_and_moves_to_one_file_per_box_on_its_first_change() {
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "passthrough"]);
    let home = cli.home.path();
    // Rewrite the store as an earlier build kept it: every record in one
    // document, version 1, and no boxes/ directory.
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.join(format!("boxes/{id}.json"))).unwrap()).unwrap();
    let mut named = record.clone();
    named["id"] = "old-one".into();
    std::fs::remove_dir_all(home.join("boxes")).unwrap();
    let doc = serde_json::json!({"version": 1, "boxes": [record, named]});
    std::fs::write(home.join("boxes.json"), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();

    // Reads use it as it is, and do not migrate it.
    let (code, out, err) = cli.run(&["exec", "old-one", "--", "echo", "still here"]);
    assert_eq!((code, out.as_str()), (0, "still here\n"), "{err}");
    assert!(!home.join("boxes").exists(), "a read migrated the store");

    // The first change moves every record, and nothing is lost.
    let second = cli.create(&["--sandbox", "passthrough"]);
    assert_ne!(second, id);
    let marker: serde_json::Value = serde_json::from_slice(&std::fs::read(home.join("boxes.json")).unwrap()).unwrap();
    assert_eq!((marker["version"].as_u64(), marker["boxes"].as_array().map(Vec::len)), (Some(2), Some(0)));
    for b in [id.as_str(), "old-one", second.as_str()] {
        assert!(home.join(format!("boxes/{b}.json")).is_file(), "{b} has no record file");
    }
    let (code, out, err) = cli.run(&["--json", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("\"id\"").count(), 3, "{out}");
    let (code, out, err) = cli.run(&["exec", "old-one", "--", "echo", "migrated"]);
    assert_eq!((code, out.as_str()), (0, "migrated\n"), "{err}");
}
