//! Whoever makes a runtime file removes it. A box's whole life on each
//! sandbox — create, exec, a copy each way, the daemon's exec, rm, daemon
//! stop — leaves nothing new in the temporary directory tinybox is given,
//! nothing in its runtime directory, and nothing named for tinybox in /tmp.

use std::collections::BTreeSet;
use std::path::Path;

use tinybox_tests::docker::{self, Namespace};
use tinybox_tests::{Cli, have, skip};

fn entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// Runs a box's whole life with `create` on a private TMPDIR (so the runtime
/// directory is `$TMPDIR/tinybox-<uid>`), its workspace at `inside` in the
/// box, and checks what is left.
fn whole_life_leaves_nothing(label: &str, create: &[&str], inside: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let system_tmp = Path::new("/tmp");
    let before: BTreeSet<String> = entries(system_tmp).into_iter().filter(|n| n.starts_with("tinybox")).collect();
    let cli = Cli::new();
    let run = |args: &[&str]| {
        let out = cli
            .cmd(args)
            .env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", tmp.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{label}: {args:?}: {err}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let id = run(create).trim().to_owned();
    assert_eq!(run(&["exec", &id, "--", "echo", "in the box"]), "in the box\n");
    let file = files.path().join("f");
    std::fs::write(&file, "copied").unwrap();
    run(&["cp", file.to_str().unwrap(), &format!("{id}:{inside}/f")]);
    run(&["cp", &format!("{id}:{inside}/f"), files.path().join("back").to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(files.path().join("back")).unwrap(), "copied");
    run(&["daemon", "start"]);
    assert_eq!(run(&["exec", &id, "--", "echo", "through the daemon"]), "through the daemon\n");
    run(&["rm", &id]);
    run(&["daemon", "stop"]);

    let uid = rustix::process::getuid().as_raw();
    let runtime = format!("tinybox-{uid}");
    let left: Vec<String> = entries(tmp.path()).into_iter().filter(|n| *n != runtime).collect();
    assert!(left.is_empty(), "{label}: left in TMPDIR: {left:?}");
    let sockets = entries(&tmp.path().join(&runtime));
    assert!(sockets.is_empty(), "{label}: left in the runtime directory: {sockets:?}");
    let after: BTreeSet<String> = entries(system_tmp).into_iter().filter(|n| n.starts_with("tinybox")).collect();
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(new.is_empty(), "{label}: left in /tmp: {new:?}");
}

#[test]
fn a_box_s_whole_life_leaves_no_file_behind_on_any_sandbox() {
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path().to_str().unwrap();
    whole_life_leaves_nothing("passthrough", &["create", "--sandbox", "passthrough", "--workspace", ws], ws);
    if have("bwrap") {
        whole_life_leaves_nothing("namespace", &["create", "--sandbox", "namespace", "--workspace", ws], "/workspace");
    } else {
        skip("hygiene::a_box_s_whole_life_leaves_no_file_behind_on_any_sandbox (namespace)", "needs bwrap");
    }
    match docker::unavailable() {
        None => {
            let ns = Namespace::new("hygiene");
            whole_life_leaves_nothing(
                "docker",
                &["create", "--sandbox", "docker", "--namespace", &ns.name, "--workspace", ws],
                "/workspace",
            );
        }
        Some(why) => skip("hygiene::a_box_s_whole_life_leaves_no_file_behind_on_any_sandbox (docker)", &why),
    }
    match tinybox_tests::microvm::unavailable() {
        None => {
            let mut create = vec!["create", "--workspace", ws];
            create.extend_from_slice(tinybox_tests::microvm::TCG);
            whole_life_leaves_nothing("microvm", &create, "/workspace");
        }
        Some(why) => skip("hygiene::a_box_s_whole_life_leaves_no_file_behind_on_any_sandbox (microvm)", &why),
    }
}

/// A process killed mid-exec cannot remove its stream socket; the next
/// engine on the same runtime directory removes it, and only it.
#[test]
fn a_socket_left_by_a_killed_exec_is_swept_by_the_next_command() {
    let tmp = tempfile::tempdir().unwrap();
    let cli = Cli::new();
    let cmd = |args: &[&str]| {
        let mut c = cli.cmd(args);
        c.env_remove("XDG_RUNTIME_DIR").env("TMPDIR", tmp.path()).stdin(std::process::Stdio::null());
        c
    };
    let out = cmd(&["create", "--sandbox", "passthrough"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let runtime = tmp.path().join(format!("tinybox-{}", rustix::process::getuid().as_raw()));
    let mut exec = cmd(&["exec", &id, "--", "sleep", "30"]).stdout(std::process::Stdio::null()).spawn().unwrap();
    let socket = runtime.join(format!("x{}-0.sock", exec.id()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !socket.exists() {
        assert!(std::time::Instant::now() < deadline, "the exec never made {}", socket.display());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    exec.kill().unwrap();
    exec.wait().unwrap();
    assert!(socket.exists(), "a killed process removed its socket after all: nothing to sweep");
    let out = cmd(&["exec", &id, "--", "true"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!socket.exists(), "the killed exec's socket was left");
    assert!(cmd(&["rm", &id]).output().unwrap().status.success());
    assert_eq!(entries(&runtime), BTreeSet::new(), "left in the runtime directory");
}
