//! `tinybox cp` and a box's bound workspace directory, live. A stopped
//! docker box bound to a directory is copied into and out of under
//! /workspace from that directory, without resuming it; elsewhere in it a
//! copy out comes from its snapshot and a copy in is refused naming
//! resume; a symlink on the way, or a directory of another user, is
//! refused in one line with nothing written. A running namespace box takes
//! the caller's files into /workspace straight from here, never through a
//! symlink the box planted, and as the owner the box would write as. A
//! namespace box is never stopped (it takes no snapshots), so it has no
//! stopped case; its refusal to stop is checked too.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use tinybox_tests::docker::{Namespace, docker_ok};
use tinybox_tests::{Cli, have, skip};

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
