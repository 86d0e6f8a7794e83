//! Live: no value a caller gave a box reaches a command line. A box made
//! with `--env` runs a command that waits on its stdin; while it waits,
//! another user (`tinybox-test`, through `runuser`) reads every process's
//! `/proc/PID/cmdline` (and every `environ` it may) on this machine, and
//! the box's value must appear in none. Once per sandbox: passthrough,
//! namespace, docker, microvm (emulated), and namespace, passthrough and
//! docker boxes on an ssh host (a test sshd on loopback, so that host's
//! processes are this machine's too). The value is random per run.

use std::io::{BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use tinybox_tests::sshd::Sshd;
use tinybox_tests::{Cli, have, read_line_within, skip};

/// Bounds a hung command in a test; asserts nothing about speed.
const GUARD: Duration = Duration::from_secs(120);

/// The user who reads everyone's command lines.
const OTHER_USER: &str = "tinybox-test";

/// Prints every process's command line, then every environment this user
/// may read, one per line with its pid; NULs become spaces.
const READER: &str = r#"for f in /proc/[0-9]*/cmdline; do
    p=${f%/cmdline}
    printf '%s cmdline: ' "${p#/proc/}"; tr '\0' ' ' < "$f" 2>/dev/null; echo
    if [ -r "$p/environ" ]; then printf '%s environ: ' "${p#/proc/}"; tr '\0' ' ' < "$p/environ" 2>/dev/null; echo; fi
done"#;

/// A fresh random word: 16 bytes of the kernel's randomness, in hex.
fn random_word() -> String {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").expect("open /dev/urandom"), &mut bytes)
        .expect("read /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why the reader cannot run as another user here, if it cannot.
fn reader_unavailable() -> Option<String> {
    if rustix::process::getuid().as_raw() != 0 {
        return Some("not root: reading as another user needs runuser as root (CI runs as root)".into());
    }
    if !have("runuser") {
        return Some("runuser is missing (util-linux)".into());
    }
    let known = Command::new("id").arg(OTHER_USER).stdout(Stdio::null()).stderr(Stdio::null()).status();
    if !known.is_ok_and(|s| s.success()) {
        return Some(format!("the user {OTHER_USER} does not exist (contrib/setup makes it)"));
    }
    None
}

/// Every command line (and readable environment) on this machine, as
/// [`OTHER_USER`] reads them.
fn read_as_other_user() -> String {
    let out = Command::new("runuser")
        .args(["-u", OTHER_USER, "--", "sh", "-c", READER])
        .stdin(Stdio::null())
        .output()
        .expect("run the reader");
    assert!(out.status.success(), "the reader failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command in box `id` that prints the box's `TB_SECRET` and waits
/// for a line on its stdin; while it waits, reads every process as another
/// user. Fails when `secret` is on any of them, or when no process shows
/// `witness` (the reader must see the box's own machinery to mean anything).
fn assert_secret_off_every_argv(cli: &Cli, id: &str, secret: &str, witness: &str) {
    let marker = format!("envargv-witness-{}", random_word());
    let script = r#"printf 'ready %s\n' "$TB_SECRET"; read -r line; echo "got $line""#;
    let mut child = cli
        .cmd(&["exec", id, "--", "sh", "-c", script, &marker])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tinybox exec");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let (line, stdout) = read_line_within(stdout, GUARD);
    // The command runs, and got the value: everything that carried it is up.
    assert_eq!(line.trim_end(), format!("ready {secret}"), "the box's command did not start with its environment");
    let seen = read_as_other_user();
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"done\n").expect("release the command");
    drop(stdin);
    let (rest, _) = read_line_within(stdout, GUARD);
    let out = child.wait_with_output().expect("wait for tinybox exec");
    assert!(out.status.success(), "exec failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(rest.trim_end(), "got done");
    let leaks: Vec<&str> = seen.lines().filter(|l| l.contains(secret)).collect();
    assert!(leaks.is_empty(), "the box's environment value is readable by {OTHER_USER}:\n{}", leaks.join("\n"));
    assert!(seen.contains(&marker), "the reader saw no process of the command's (marker {marker})");
    assert!(
        seen.lines().any(|l| l.contains(" cmdline: ") && l.contains(witness)),
        "the reader saw no process showing {witness:?}: it proves nothing"
    );
}

/// A box made by `create ARGS --env TB_SECRET=<random>`, checked, removed.
fn check(cli: &Cli, create: &[&str], witness: &str) {
    let secret = random_word();
    let env = format!("TB_SECRET={secret}");
    let mut args = create.to_vec();
    args.extend(["--env", &env]);
    let id = cli.create(&args);
    assert_secret_off_every_argv(cli, &id, &secret, witness);
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "rm {id}: {err}");
}

macro_rules! need_reader {
    ($test:expr) => {
        if let Some(why) = reader_unavailable() {
            skip($test, &why);
            return;
        }
    };
}

#[test]
fn passthrough_keeps_the_environment_off_every_command_line() {
    need_reader!("env_off_argv::passthrough_keeps_the_environment_off_every_command_line");
    let cli = Cli::new();
    let ws = tempfile::tempdir().expect("workspace");
    let ws = ws.path().to_string_lossy().into_owned();
    check(&cli, &["--sandbox", "passthrough", "--workspace", &ws], "envargv-witness-");
}

#[test]
fn namespace_keeps_the_environment_off_every_command_line() {
    let test = "env_off_argv::namespace_keeps_the_environment_off_every_command_line";
    need_reader!(test);
    if !have("bwrap") {
        skip(test, "bwrap is not installed (apt-get install bubblewrap)");
        return;
    }
    let cli = Cli::new();
    check(&cli, &["--sandbox", "namespace"], "bwrap");
    if have("slirp4netns") {
        // netwrap.sh and slirp4netns stand between the shell and bwrap.
        check(&cli, &["--sandbox", "namespace", "--network", "egress"], "slirp4netns");
    } else {
        skip(&format!("{test} (egress)"), "slirp4netns is not installed");
    }
}

#[test]
fn docker_keeps_the_environment_off_every_command_line() {
    let test = "env_off_argv::docker_keeps_the_environment_off_every_command_line";
    need_reader!(test);
    if let Some(why) = tinybox_tests::docker::unavailable() {
        skip(test, &why);
        return;
    }
    let cli = Cli::new();
    check(&cli, &["--sandbox", "docker", "--image", tinybox_tests::docker::BASE_IMAGE], "docker exec");
}

#[test]
fn microvm_keeps_the_environment_off_every_command_line() {
    let test = "env_off_argv::microvm_keeps_the_environment_off_every_command_line";
    need_reader!(test);
    tinybox_tests::need_microvm!(test);
    let cli = Cli::new();
    check(&cli, tinybox_tests::microvm::TCG, "qemu-system");
}

#[test]
fn an_ssh_host_keeps_the_environment_off_every_command_line() {
    let test = "env_off_argv::an_ssh_host_keeps_the_environment_off_every_command_line";
    need_reader!(test);
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => {
            skip(test, &why);
            return;
        }
    };
    let cli = Cli::new();
    let add = sshd.host_add_args("far", "root");
    let (code, _, err) = cli.run(&add.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "host add: {err}");
    let ws = tempfile::tempdir().expect("workspace");
    let ws = ws.path().to_string_lossy().into_owned();
    check(&cli, &["--host", "far", "--sandbox", "passthrough", "--workspace", &ws], "ssh");
    if have("bwrap") {
        check(&cli, &["--host", "far", "--sandbox", "namespace"], "bwrap");
    } else {
        skip(&format!("{test} (namespace)"), "bwrap is not installed (apt-get install bubblewrap)");
    }
    match tinybox_tests::docker::unavailable() {
        None => check(
            &cli,
            &["--host", "far", "--sandbox", "docker", "--image", tinybox_tests::docker::BASE_IMAGE],
            "docker exec",
        ),
        Some(why) => skip(&format!("{test} (docker)"), &why),
    }
}
