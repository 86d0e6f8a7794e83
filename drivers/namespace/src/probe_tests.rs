//! What the probe's exit codes and bwrap's words mean: a mount that
//! changed beneath a bound directory is named as that, never as a host
//! that forbids user namespaces or a workspace its owner cannot reach.

use tinybox_sdk::capture::Captured;
use tinybox_sdk::model::ExitStatus;
use tinybox_sdk::protocol::ErrorCode;

use super::*;

fn failed(code: i32, stderr: &str) -> Captured {
    Captured { status: ExitStatus::code(code), stdout: Vec::new(), stderr: stderr.as_bytes().to_vec() }
}

/// What bwrap 0.8 said, once in some 2000 runs, with `--ro-bind / /` while
/// docker started and removed containers beside it.
const DOCKER_RACE: &str = "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: \
    remount \"/newroot/var/lib/docker/overlay2/ceba724aaa3ff2c1e5d175c77a257beab68a2908e6f2011f9c19bb72c4370d51/merged\": Invalid argument\n";

#[test]
fn a_bwrap_failure_naming_a_mount_under_its_new_root_is_no_refusal_of_user_namespaces() {
    for code in [5, 9] {
        let err = read(&failed(code, DOCKER_RACE), None, None, None).unwrap_err();
        assert_eq!(err.code, ErrorCode::Failed, "exit {code}: {err}");
        assert!(
            err.message.starts_with(
                "the host check's bwrap failed on /var/lib/docker/overlay2/ceba724aaa3ff2c1e5d175c77a257beab68a2908e6f2011f9c19bb72c4370d51/merged, a mount beneath a directory it bound that changed meanwhile"
            ),
            "exit {code}: {err}"
        );
        assert!(err.message.contains("try again"), "{err}");
        assert!(!err.message.contains("user namespaces") && !err.message.contains("cannot reach"), "{err}");
    }
    let vanished = "bwrap: Can't bind mount /oldroot/usr on /newroot/usr: Unable to apply mount flags: \
                    remount \"/newroot/usr/local/mnt\": No such file or directory\n";
    assert_eq!(submount_named(vanished).as_deref(), Some("/usr/local/mnt"));
}

#[test]
fn a_failure_on_what_the_probe_bound_keeps_its_own_meaning() {
    let cases = [
        (5, "bwrap: setting up uid map: Permission denied\n", "forbids unprivileged user namespaces"),
        (
            5,
            "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces.\n",
            "forbids unprivileged user namespaces",
        ),
        (9, "bwrap: Can't bind mount /oldroot/home/u/proj on /newroot/tmp: Permission denied\n", "cannot reach it"),
        (9, "bwrap: Can't find source path /home/u/proj: Permission denied\n", "cannot reach it"),
        (5, "bwrap: Can't bind mount /oldroot/usr on /newroot/usr: Operation not permitted\n", "user namespaces"),
    ];
    for (code, stderr, says) in cases {
        assert_eq!(submount_named(stderr), None, "{stderr}");
        let err = read(&failed(code, stderr), Some("/home/u/proj"), None, None).unwrap_err();
        assert!(err.message.contains(says), "exit {code} {stderr:?}: {err}");
    }
}

#[test]
fn the_host_check_binds_what_a_box_binds_and_never_the_whole_root() {
    assert!(!PROBE.contains("--ro-bind / /") && !PROBE.contains("--bind / /"), "{PROBE}");
    assert!(PROBE.contains("--ro-bind /usr /usr"), "{PROBE}");
    // The stderr of both checks reaches `read`, which tells their causes apart.
    let checks: Vec<&str> = PROBE.lines().filter(|l| l.starts_with("in_box_root ")).collect();
    assert_eq!(checks.len(), 2, "{PROBE}");
    assert!(checks.iter().all(|l| !l.contains("2>")), "{checks:?}");
}
