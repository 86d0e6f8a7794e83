//! `tinybox cp` and a box's bound workspace directory, live. A stopped
//! docker box bound to a directory is copied into and out of under
//! /workspace from that directory, without resuming it; elsewhere in it a
//! copy out comes from its snapshot and a copy in is refused naming
//! resume; a symlink on the way, or a directory of another user, is
//! refused in one line with nothing written. A running namespace box takes
//! the caller's files into /workspace straight from here, never through a
//! symlink the box planted, and as the owner the box would write as. A
//! namespace box is never stopped (it takes no snapshots), so it has no
//! stopped case; its refusal to stop is checked too. The module's file
//! calls (`fs.write`, `fs.read`, `fs.list`) follow the same rules on a
//! stopped bound box.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use tinybox_tests::docker::{Namespace, docker_ok};
use tinybox_tests::{Cli, have, skip};

mod module_support;

fn cp(cli: &Cli, src: &str, dst: &str) -> (i32, String) {
    let (code, _, err) = cli.run(&["cp", src, dst]);
    (code, err)
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// The test user's uid and gid, or why there is none.
fn test_user() -> Result<(u32, u32), String> {
    if rustix::process::geteuid().as_raw() != 0 {
        return Err("not root: another user's directory cannot be made".into());
    }
    let id = |flag: &str| {
        let out = std::process::Command::new("id").arg(flag).arg(tinybox_tests::boxes::TEST_USER).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().ok()
    };
    match (id("-u"), id("-g")) {
        (Some(u), Some(g)) => Ok((u, g)),
        _ => Err(format!("no user {} (contrib/setup/start-test-user makes it)", tinybox_tests::boxes::TEST_USER)),
    }
}

/// A directory of the test user's own, reachable by that user.
fn users_dir(uid: u32, gid: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn a_stopped_bound_docker_box_is_copied_into_and_out_of_its_directory() {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        skip("copy_workspace::a_stopped_bound_docker_box_is_copied_into_and_out_of_its_directory", &why);
        return;
    }
    let ns = Namespace::new("cp-bound");
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    let id =
        cli.create(&["--sandbox", "docker", "--namespace", &ns.name, "--persistent", "--workspace", &s(ws.path())]);
    let script =
        "printf 'mine\\n' > /workspace/made && chmod 0640 /workspace/made && mkdir -p /data && echo kept > /data/f";
    let (code, _, err) = cli.run(&["exec", &id, "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli.run(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    let label = format!("label=tinybox.namespace={}", ns.name);
    assert_eq!(docker_ok(&["ps", "-aq", "--filter", &label]), "", "stop left a container");

    let scratch = tempfile::tempdir().unwrap();
    // Out of /workspace: the directory's file, with its mode.
    let out = scratch.path().join("made");
    let (code, err) = cp(&cli, &format!("{id}:/workspace/made"), &s(&out));
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine\n");
    assert_eq!(std::fs::metadata(&out).unwrap().mode() & 0o7777, 0o640);
    // Into /workspace: a tree, its modes kept and no privilege bit.
    let src = scratch.path().join("tree");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/run"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("sub/run"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::symlink("sub/run", src.join("link")).unwrap();
    let (code, err) = cp(&cli, &s(&src), &format!("{id}:/workspace/tree"));
    assert_eq!(code, 0, "{err}");
    let landed = ws.path().join("tree/sub/run");
    assert_eq!(std::fs::read_to_string(&landed).unwrap(), "#!/bin/sh\n");
    assert_eq!(std::fs::metadata(&landed).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::read_link(ws.path().join("tree/link")).unwrap(), Path::new("sub/run"));
    // A tar stream of several roots into an existing directory, as it is.
    let packed = std::process::Command::new("tar").arg("-c").arg("-C").arg(&src).arg(".").output().unwrap();
    assert!(packed.status.success());
    std::fs::create_dir(ws.path().join("streamed")).unwrap();
    let mut child = cli
        .cmd(&["cp", "-", &format!("{id}:/workspace/streamed")])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&packed.stdout).unwrap();
    let done = child.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert!(ws.path().join("streamed/sub/run").is_file() && ws.path().join("streamed/link").is_symlink());

    // Outside the bind, out comes from the snapshot; in is refused.
    let (code, err) = cp(&cli, &format!("{id}:/data/f"), &s(&scratch.path().join("f")));
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(scratch.path().join("f")).unwrap(), "kept\n");
    let (code, err) = cp(&cli, &s(&out), &format!("{id}:/data/g"));
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("stopped") && err.contains(&format!("tinybox resume {id}")), "{err}");

    // A symlink in the directory (as the box could have left) is never
    // followed, either way.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("l")).unwrap();
    for (src, dst) in [
        (s(&out), format!("{id}:/workspace/l/x")),
        (format!("{id}:/workspace/l/secret"), s(&scratch.path().join("leak"))),
    ] {
        let (code, err) = cp(&cli, &src, &dst);
        assert_eq!(code, 1, "cp {src} {dst}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("symlink") && err.contains(&format!("tinybox resume {id}")), "{err}");
    }
    let names: Vec<_> = std::fs::read_dir(outside.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["secret"], "written through the symlink");
    assert!(!scratch.path().join("leak").exists(), "read through the symlink");
    // What is missing is named.
    let (code, err) = cp(&cli, &format!("{id}:/workspace/nothing"), &s(&scratch.path().join("n")));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("box {id} has no /workspace/nothing")), "{err}");

    // None of it resumed the box or left a container.
    assert_eq!(docker_ok(&["ps", "-aq", "--filter", &label]), "", "a copy left a container");
    let (code, listed, err) = cli.run(&["inspect", &id]);
    assert!(code == 0 && listed.contains("stopped"), "{listed}{err}");
    // Resumed, the box sees what was copied in.
    std::fs::remove_file(ws.path().join("l")).unwrap();
    let (code, _, err) = cli.run(&["resume", &id]);
    assert_eq!(code, 0, "{err}");
    let (code, said, err) =
        cli.run(&["exec", &id, "--", "cat", "/workspace/tree/sub/run", "/workspace/streamed/sub/run"]);
    assert_eq!((code, said.as_str()), (0, "#!/bin/sh\n#!/bin/sh\n"), "{err}");
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_stopped_box_over_another_users_directory_is_refused_with_nothing_written() {
    let test = "copy_workspace::a_stopped_box_over_another_users_directory_is_refused_with_nothing_written";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        skip(test, &why);
        return;
    }
    let (uid, gid) = match test_user() {
        Ok(ids) => ids,
        Err(why) => return skip(test, &why),
    };
    let ns = Namespace::new("cp-other");
    let cli = Cli::new();
    let ws = users_dir(uid, gid);
    let id =
        cli.create(&["--sandbox", "docker", "--namespace", &ns.name, "--persistent", "--workspace", &s(ws.path())]);
    let (code, _, err) = cli.run(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("f");
    std::fs::write(&file, "x").unwrap();
    let (code, err) = cp(&cli, &s(&file), &format!("{id}:/workspace/f"));
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("another user") && err.contains(&format!("tinybox resume {id}")), "{err}");
    assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0, "something was written");
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_running_namespace_box_takes_files_into_its_directory_never_through_its_symlinks() {
    if !have("bwrap") {
        skip(
            "copy_workspace::a_running_namespace_box_takes_files_into_its_directory_never_through_its_symlinks",
            "bwrap is not installed (apt-get install bubblewrap)",
        );
        return;
    }
    let cli = Cli::new();
    let ws = tempfile::tempdir().unwrap();
    let id = cli.create(&["--sandbox", "namespace", "--workspace", &s(ws.path())]);
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("probe");
    std::fs::write(&file, "probe").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o6755)).unwrap();
    // Written here, as the caller (the box's own uid), with no privilege bit.
    let (code, err) = cp(&cli, &s(&file), &format!("{id}:/workspace/"));
    assert_eq!(code, 0, "{err}");
    let m = std::fs::metadata(ws.path().join("probe")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o755);
    assert_eq!((m.uid(), m.gid()), (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()));
    // The box plants a link to a directory of this machine's; the copy
    // through it is the box's to resolve (its view has no such directory),
    // so nothing lands in that directory here.
    let outside = tempfile::tempdir().unwrap();
    let (code, _, err) = cli.run(&["exec", &id, "--", "ln", "-s", &s(outside.path()), "/workspace/l"]);
    assert_eq!(code, 0, "{err}");
    for dst in [format!("{id}:/workspace/l/"), format!("{id}:/workspace/l/probe"), format!("{id}:/workspace/l")] {
        let _ = cp(&cli, &s(&file), &dst);
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0, "{dst}: written through the box's symlink");
    }
    // What the box sees is what was copied.
    let (code, said, err) = cli.run(&["exec", &id, "--", "cat", "/workspace/probe"]);
    assert_eq!((code, said.as_str()), (0, "probe"), "{err}");
    // A namespace box takes no snapshots, so it is never stopped.
    let (code, _, err) = cli.run(&["stop", &id]);
    assert_ne!(code, 0, "{err}");
    cli.run(&["rm", &id]);
}

#[test]
fn a_running_box_over_another_users_directory_gets_the_copy_as_that_user() {
    let test = "copy_workspace::a_running_box_over_another_users_directory_gets_the_copy_as_that_user";
    if !have("bwrap") {
        return skip(test, "bwrap is not installed (apt-get install bubblewrap)");
    }
    let (uid, gid) = match test_user() {
        Ok(ids) => ids,
        Err(why) => return skip(test, &why),
    };
    let cli = Cli::new();
    let ws = users_dir(uid, gid);
    let id = cli.create(&["--sandbox", "namespace", "--workspace", &s(ws.path())]);
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = scratch.path().join("f");
    std::fs::write(&file, "theirs").unwrap();
    let (code, err) = cp(&cli, &s(&file), &format!("{id}:/workspace/f"));
    assert_eq!(code, 0, "{err}");
    let m = std::fs::metadata(ws.path().join("f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (uid, gid), "the copy is not the directory owner's");
    cli.run(&["rm", &id]);
}

#[test]
fn the_modules_file_calls_serve_a_stopped_bound_docker_box_from_its_directory() {
    let test = "copy_workspace::the_modules_file_calls_serve_a_stopped_bound_docker_box_from_its_directory";
    if let Some(why) = tinybox_tests::docker::unavailable() {
        return skip(test, &why);
    }
    if !have("python3") {
        return skip(test, "python3 is not on PATH");
    }
    let ns = Namespace::new("fs-bound");
    let dir = module_support::temp();
    let (store, ws) = (dir.path().join("store"), dir.path().join("ws"));
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("old"), "before\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "secret").unwrap();
    let script = "mkdir -p /data && echo kept > /data/f";
    let calls = json!([
        ["create", { "sandbox": "docker", "namespace": ns.name, "persistent": true, "workspace": ws }],
        ["exec", { "id": "$id", "argv": ["sh", "-c", script] }],
        ["stop", { "id": "$id" }],
        ["fs.write", { "id": "$id", "path": "/workspace/new.sh", "content": "echo hi\n", "mode": 0o4755 }],
        ["fs.read", { "id": "$id", "path": "/workspace/old" }],
        ["fs.list", { "id": "$id", "path": "/workspace" }],
        ["fs.read", { "id": "$id", "path": "/data/f" }],
        ["fs.list", { "id": "$id", "path": "/data" }],
        ["fs.write", { "id": "$id", "path": "/data/g", "content": "x" }],
        ["fs.read", { "id": "$id", "path": "/workspace/l/secret" }],
        ["fs.write", { "id": "$id", "path": "/workspace/l/planted", "content": "x" }],
        ["fs.list", { "id": "$id", "path": "/workspace/l" }],
        ["inspect", { "id": "$id" }],
    ]);
    // The symlink a box could have left in its directory, made before the
    // calls that meet it (the box is stopped then: nothing else writes).
    std::os::unix::fs::symlink(outside.path(), ws.join("l")).unwrap();
    let r = module_support::python_calls(&store, &calls);
    assert_eq!(r.len(), 13, "{r:?}");
    for (i, what) in [(0, "create"), (1, "exec"), (2, "stop"), (3, "fs.write"), (4, "fs.read"), (5, "fs.list")] {
        assert!(r[i]["ok"].is_object(), "{what}: {}", r[i]);
    }
    assert_eq!(r[1]["ok"]["exit_code"], 0, "{}", r[1]);
    let label = format!("label=tinybox.namespace={}", ns.name);
    // Written here, into the directory, without the setuid bit.
    let written = ws.join("new.sh");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "echo hi\n");
    assert_eq!(std::fs::metadata(&written).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(r[4]["ok"]["content"], "before\n");
    let names: Vec<&str> = entries(&r[5]).iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["l", "new.sh", "old"], "{}", r[5]);
    let link = entries(&r[5]).iter().find(|e| e["name"] == "l").unwrap();
    assert_eq!(link["kind"], "symlink", "{link}");
    // Outside the bind: read from the snapshot; a write needs the box back.
    assert_eq!(r[6]["ok"]["content"], "kept\n", "{}", r[6]);
    assert_eq!(entries(&r[7]).iter().map(|e| e["name"].clone()).collect::<Vec<_>>(), [json!("f")], "{}", r[7]);
    let refused = |i: usize, words: &[&str]| {
        let message = r[i]["error"]["message"].as_str().unwrap_or_else(|| panic!("call {i} is not refused: {}", r[i]));
        assert!(!message.contains('\n'), "{message}");
        for w in words {
            assert!(message.contains(w), "call {i}: {message:?} does not say {w:?}");
        }
    };
    refused(8, &["stopped", "tinybox resume"]);
    // Nothing through the symlink, either way, and nothing written.
    for i in [9, 10, 11] {
        refused(i, &["symlink", "tinybox resume"]);
    }
    let names: Vec<_> = std::fs::read_dir(outside.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["secret"], "written through the symlink");
    // None of it resumed the box or made a container.
    assert_eq!(r[12]["ok"]["state"], "stopped", "{}", r[12]);
    assert_eq!(docker_ok(&["ps", "-aq", "--filter", &label]), "", "a file call left a container");
    let r = module_support::python_calls(&store, &json!([["rm", { "id": r[0]["ok"]["id"] }]]));
    assert!(r[0]["ok"].is_object(), "{}", r[0]);
}

fn entries(result: &Value) -> &Vec<Value> {
    result["ok"]["entries"].as_array().unwrap_or_else(|| panic!("no entries: {result}"))
}
