//! `tinybox cp` of a running docker box through the daemon's archive path
//! (`docker cp`, ADR 0024), live against dockerd: which copies take it
//! (seen from outside in docker's own event log), that one the archive
//! path would write as the wrong user goes through the box instead, and
//! that a box swapping a path for a symlink to this machine's files all
//! through the copies never reaches them.

use std::process::Stdio;

use tinybox_tests::docker::{BASE_IMAGE, Namespace, docker_ok};
use tinybox_tests::{Cli, skip};

fn need_docker(test: &str) -> bool {
    if let Some(why) = tinybox_tests::docker::unavailable() {
        skip(test, &why);
        return false;
    }
    true
}

/// Seconds since the epoch on this machine, the daemon's (a local one).
fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// The archive events (`archive-path` out, `extract-to-dir` in) the daemon
/// logged for `container` from `since` to `until`.
fn archive_events(container: &str, since: u64, until: u64) -> Vec<String> {
    let (since, until) = (since.to_string(), until.to_string());
    let out = docker_ok(&[
        "events",
        "--since",
        &since,
        "--until",
        &until,
        "--filter",
        &format!("container={container}"),
        "--format",
        "{{.Action}}",
    ]);
    out.lines().filter(|a| matches!(*a, "archive-path" | "extract-to-dir")).map(str::to_owned).collect()
}

#[test]
fn a_copy_of_a_root_box_goes_through_the_daemons_archive_both_ways() {
    let test = "docker_cp::a_copy_of_a_root_box_goes_through_the_daemons_archive_both_ways";
    if !need_docker(test) {
        return;
    }
    let ns = Namespace::new("cp-archive");
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "docker", "--namespace", &ns.name, "--image", BASE_IMAGE]);
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("f.txt");
    std::fs::write(&file, "through the archive").unwrap();
    let since = now();
    let (code, _, err) = cli.run(&["cp", file.to_str().unwrap(), &format!("{id}:/tmp/")]);
    assert_eq!(code, 0, "{err}");
    let back = scratch.path().join("back.txt");
    let (code, _, err) = cli.run(&["cp", &format!("{id}:/tmp/f.txt"), back.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "through the archive");
    // Events carry whole seconds; docker answers once `until` has passed.
    let until = now() + 1;
    let events = archive_events(&ns.container(&id), since, until);
    assert_eq!(events, ["extract-to-dir", "archive-path"], "one extraction in, one archive out");
    // Into a directory that is not there: the line names it, not the file.
    let before = cli.store_bytes();
    let (code, _, err) = cli.run(&["cp", file.to_str().unwrap(), &format!("{id}:/nowhere/f.txt")]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err.trim(),
        format!(
            "tinybox: /nowhere is not an existing directory in box {id}; make it first (`tinybox exec {id} -- mkdir -p /nowhere`)"
        )
    );
    assert_eq!(cli.store_bytes(), before, "a refused copy changed the store");
    cli.run(&["rm", &id]);
}

#[test]
fn a_copy_into_a_box_not_run_as_root_goes_through_the_box_as_its_user() {
    let test = "docker_cp::a_copy_into_a_box_not_run_as_root_goes_through_the_box_as_its_user";
    if !need_docker(test) {
        return;
    }
    let ns = Namespace::new("cp-user");
    // The suites' image, running as 1234:1234 (and /tmp is everyone's).
    let image = format!("tinybox-test-user-{}", ns.name);
    let base = docker_ok(&["image", "inspect", "-f", "{{.Id}}", BASE_IMAGE]);
    let saved = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "docker create --name {image}-c {} true >/dev/null && docker export {image}-c | \
             docker import --change 'USER 1234:1234' - {image} >/dev/null; rc=$?; docker rm {image}-c >/dev/null; exit $rc",
            base.trim()
        ))
        .status()
        .unwrap();
    assert!(saved.success(), "could not make an image running as 1234");
    let cli = Cli::new();
    let id = cli.create(&["--sandbox", "docker", "--namespace", &ns.name, "--image", &image]);
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("f.txt");
    std::fs::write(&file, "as the box's user").unwrap();
    let (code, _, err) = cli.run(&["cp", file.to_str().unwrap(), &format!("{id}:/tmp/")]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli.run(&["exec", &id, "--", "stat", "-c", "%u:%g", "/tmp/f.txt"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "1234:1234", "written by tar in the box as its user, not by docker cp as root");
    // Through the box too, a missing directory is named as such.
    let (code, _, err) = cli.run(&["cp", file.to_str().unwrap(), &format!("{id}:/tmp/nowhere/f.txt")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with("tinybox: /tmp/nowhere is not an existing directory in box"), "{err}");
    cli.run(&["rm", &id]);
    let _ = std::process::Command::new("docker").args(["image", "rm", &image]).stdout(Stdio::null()).status();
}

#[test]
fn a_box_swapping_a_path_for_a_symlink_never_reaches_this_machines_files() {
    let test = "docker_cp::a_box_swapping_a_path_for_a_symlink_never_reaches_this_machines_files";
    if !need_docker(test) {
        return;
    }
    let ns = Namespace::new("cp-swap");
    let cli = Cli::new();
    // This machine's files, at a path the box's symlink names.
    let host = tempfile::tempdir().unwrap();
    let secret = host.path().join("d");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("f"), "host secret").unwrap();
    let id = cli.create(&["--sandbox", "docker", "--namespace", &ns.name, "--image", BASE_IMAGE]);
    let target = secret.to_str().unwrap();
    // In the box: /tmp/d is a directory one moment and a symlink to this
    // machine's directory's path the next, as fast as the box can swap.
    let swap = format!(
        "mkdir -p /tmp/d.real && echo box > /tmp/d.real/f && while :; do \
         rm -f /tmp/d; ln -s {target} /tmp/d; rm -f /tmp/d; ln -s /tmp/d.real /tmp/d; done"
    );
    let mut swapper =
        cli.cmd(&["exec", &id, "--", "sh", "-c", &swap]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let local = scratch.path().join("in.txt");
    std::fs::write(&local, "from the caller").unwrap();
    // At least eight rounds, and on until two copies out have found the
    // box's own file. Each copy resolves the path at one moment of the
    // swap, and only one of its four states (the symlink to /tmp/d.real)
    // has the file (here about one copy in six found it), so a fixed
    // eight rounds found none about one run in five (one CI run did); 64
    // rounds bound the run, and missing every one means the copies are
    // broken, not unlucky.
    let (mut read, mut rounds) = (0, 0);
    while rounds < 64 && (rounds < 8 || read < 2) {
        let out = scratch.path().join(format!("out-{rounds}"));
        let (code, _, _) = cli.run(&["cp", &format!("{id}:/tmp/d/f"), out.to_str().unwrap()]);
        if code == 0 {
            assert_eq!(std::fs::read_to_string(&out).unwrap(), "box\n", "round {rounds} read the box's file");
            read += 1;
        }
        cli.run(&["cp", local.to_str().unwrap(), &format!("{id}:/tmp/d/")]);
        rounds += 1;
    }
    assert!(read > 0, "no copy out found /tmp/d/f in {rounds} rounds");
    let _ = swapper.kill();
    let _ = swapper.wait();
    // This machine's directory is as it was: nothing written, nothing read out.
    let names: Vec<_> = std::fs::read_dir(&secret).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["f"], "nothing was written into this machine's directory");
    assert_eq!(std::fs::read_to_string(secret.join("f")).unwrap(), "host secret");
    cli.run(&["rm", &id]);
}
