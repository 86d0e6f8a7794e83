//! `tinybox cp` out of a stopped persistent docker box, live: the file
//! comes from the box's newest snapshot with its mode, without resuming
//! the box; a copy into it is refused in one line naming resume; no
//! container is left by the copy; the box then resumes with its data.

use std::os::unix::fs::PermissionsExt;

use tinybox_tests::Cli;
use tinybox_tests::docker::{BASE_IMAGE, Namespace, docker_ok};

#[test]
fn a_stopped_docker_box_is_copied_out_of_from_its_snapshot() {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        tinybox_tests::skip("copy_stopped::a_stopped_docker_box_is_copied_out_of_from_its_snapshot", &why);
        return;
    }
    let ns = Namespace::new("cp-snap");
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "docker", "--namespace", &ns.name, "--persistent", "--image", BASE_IMAGE]);
    let script = "mkdir -p /data && printf 'kept\\n' > /data/f && chmod 0750 /data/f";
    let (code, _, err) = cli.run(&["exec", &id, "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli.run(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    let label = format!("label=tinybox.namespace={}", ns.name);
    assert_eq!(docker_ok(&["ps", "-aq", "--filter", &label]).trim(), "", "stop left a container");

    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("out");
    let (code, _, err) = cli.run(&["cp", &format!("{id}:/data/f"), out.to_str().unwrap()]);
    assert_eq!(code, 0, "cp out of the stopped box: {err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "kept\n");
    assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o7777, 0o750);
    // What is missing in the snapshot is named as in a running box.
    let (code, _, err) = cli.run(&["cp", &format!("{id}:/data/nothing"), out.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("box {id} has no /data/nothing")), "{err}");

    // Nothing is written into a snapshot.
    let (code, _, err) = cli.run(&["cp", out.to_str().unwrap(), &format!("{id}:/data/g")]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("stopped") && err.contains(&format!("tinybox resume {id}")), "{err}");

    // The copies' containers are gone, and the box was not resumed.
    assert_eq!(docker_ok(&["ps", "-aq", "--filter", &label]).trim(), "", "a copy left a container");
    let (code, listed, err) = cli.run(&["inspect", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(listed.contains("stopped"), "{listed}");

    let (code, _, err) = cli.run(&["resume", &id]);
    assert_eq!(code, 0, "{err}");
    let (code, said, err) = cli.run(&["exec", &id, "--", "cat", "/data/f"]);
    assert_eq!((code, said.as_str()), (0, "kept\n"), "{err}");
    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
}

/// A copy out of a stopped box that was interrupted (its daemon went away,
/// its client hung) leaves the copy's container, named and labelled from
/// the box's record as the driver names it; `tinybox rm` of the box
/// removes it, running or not, and nothing of the box is left in docker.
#[test]
fn rm_removes_the_container_an_interrupted_copy_left() {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        tinybox_tests::skip("copy_stopped::rm_removes_the_container_an_interrupted_copy_left", &why);
        return;
    }
    let ns = Namespace::new("cp-left");
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "docker", "--namespace", &ns.name, "--persistent", "--image", BASE_IMAGE]);
    let (code, _, err) = cli.run(&["stop", &id]);
    assert_eq!(code, 0, "{err}");
    // The container `sandbox.snapshot_exec` runs a copy in, still running,
    // as a copy whose client was lost mid-stream leaves it.
    let helper = format!("{}-cp", ns.container(&id));
    let (b, n) = (format!("tinybox.box={id}"), format!("tinybox.namespace={}", ns.name));
    let script = "while :; do sleep 86400; done";
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &helper,
        "--label",
        &b,
        "--label",
        &n,
        "--label",
        "tinybox.role=snapshot-exec",
        "--network",
        "none",
        "--entrypoint",
        "sh",
        BASE_IMAGE,
        "-c",
        script,
    ]);
    let label = format!("label=tinybox.namespace={}", ns.name);
    assert_eq!(docker_ok(&["ps", "-a", "--filter", &label, "--format", "{{.Names}}"]), helper);

    let (code, _, err) = cli.run(&["rm", &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(docker_ok(&["ps", "-aq", "--filter", &label]), "", "rm left a container of the box");
    let by_name = format!("name=^{helper}$");
    assert_eq!(docker_ok(&["ps", "-aq", "--filter", &by_name]), "", "rm left the copy's container");
    let (code, listed, _) = cli.run(&["ls", "--all"]);
    assert!(code == 0 && !listed.contains(&id), "{listed}");
}
