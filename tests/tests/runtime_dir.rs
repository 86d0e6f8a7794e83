//! The runtime directory for a command's stream sockets, against a squatter:
//! any local user can make `$TMPDIR/tinybox-<uid>` before the victim does.
//! The victim's commands must still run, through a directory only the
//! victim can make, and the squat must be left as it was.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use tinybox_tests::Cli;
use tinybox_tests::boxes::Principal;

const TEST: &str = "runtime_dir::a_runtime_directory_another_user_made_first_is_never_used_and_commands_still_run";

#[test]
fn a_runtime_directory_another_user_made_first_is_never_used_and_commands_still_run() {
    // The squatter is the unprivileged test user; the victim is this (root) process.
    let Some(Principal::User { uid: squatter, gid, .. }) = Principal::all(TEST).pop() else { return };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = rustix::process::getuid().as_raw();
    let squat = tmp.path().join(format!("tinybox-{victim}"));
    std::fs::create_dir(&squat).unwrap();
    std::os::unix::fs::chown(&squat, Some(squatter), Some(gid)).unwrap();
    std::fs::set_permissions(&squat, std::fs::Permissions::from_mode(0o777)).unwrap();
    let home = tempfile::tempdir().unwrap();

    let cli = Cli::new();
    let run = |args: &[&str]| {
        let out = cli
            .cmd(args)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("XDG_CACHE_HOME")
            .env("TMPDIR", tmp.path())
            .env("HOME", home.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, id, err) = run(&["create", "--sandbox", "passthrough"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = run(&["exec", id.trim(), "--", "echo", "ran"]);
    assert_eq!((code, out.as_str()), (Some(0), "ran\n"), "a squatted runtime directory stopped the exec: {err}");

    let own = home.path().join(".cache/tinybox/run");
    let meta = std::fs::metadata(&own).expect("the user's own runtime directory");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (victim, 0o700));
    let squat_meta = std::fs::metadata(&squat).unwrap();
    assert_eq!(squat_meta.uid(), squatter, "the squat changed hands");
    assert_eq!(std::fs::read_dir(&squat).unwrap().count(), 0, "a socket landed in the squatter's directory");
    let (code, _, err) = run(&["rm", id.trim()]);
    assert_eq!(code, Some(0), "{err}");
}
