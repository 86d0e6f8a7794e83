//! The archive script against a fake `docker` on PATH (its state in
//! files: the daemon's version, the container's status and user, and a
//! log of every call), and the exit codes' meanings. The live tests
//! (tests/tests/docker_cp.rs) run it against dockerd.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use super::*;

/// A `docker` that knows one container, `c1`: `version` prints
/// `$STATE/version`; `inspect` prints `$STATE/status` and `$STATE/user`;
/// `cp` reads stdin into `$STATE/got` or writes `data`, or fails with
/// `$STATE/cp-error`. Every call is logged in `$STATE/calls`.
const FAKE: &str = r#"#!/bin/sh
s=$STATE
echo "$*" >> "$s/calls"
case "$1 $2" in
  "version -f") [ -e "$s/version-fails" ] && exit 1; cat "$s/version" ;;
  "container inspect")
    eval "c=\${$#}"
    [ "$c" = c1 ] || { echo "Error: No such container: $c" >&2; exit 1; }
    echo "$(cat "$s/status") $(cat "$s/user")" ;;
  "cp -")
    [ -e "$s/cp-error" ] && { cat "$s/cp-error" >&2; exit 1; }
    cat > "$s/got" ;;
  cp*)
    [ -e "$s/cp-error" ] && { cat "$s/cp-error" >&2; exit 1; }
    printf data ;;
  *) echo "unexpected: $*" >&2; exit 99 ;;
esac
"#;

struct Fake {
    dir: tempfile::TempDir,
    state: PathBuf,
    bin: PathBuf,
}

impl Fake {
    fn new(status: &str, user: &str) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let (state, bin) = (dir.path().join("state"), dir.path().join("bin"));
        for d in [&state, &bin, &dir.path().join("tmp")] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(bin.join("docker"), FAKE).unwrap();
        std::fs::set_permissions(bin.join("docker"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(state.join("status"), format!("{status}\n")).unwrap();
        std::fs::write(state.join("user"), format!("{user}\n")).unwrap();
        std::fs::write(state.join("version"), "Engine,containerd,runc,docker-init, 20.10.24+dfsg1\n").unwrap();
        Fake { dir, state, bin }
    }

    fn version(&self, said: &str) {
        std::fs::write(self.state.join("version"), format!("{said}\n")).unwrap();
    }

    fn run(&self, argv: &[String], stdin: &[u8]) -> Output {
        use std::io::Write;
        let path = format!("{}:{}", self.bin.display(), std::env::var("PATH").unwrap_or_default());
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .env("PATH", path)
            .env("STATE", &self.state)
            .env("TMPDIR", self.dir.path().join("tmp"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The script may end without reading (a refusal): a closed pipe is fine.
        let _ = child.stdin.take().unwrap().write_all(stdin);
        child.wait_with_output().unwrap()
    }

    /// Files the script left in its TMPDIR.
    fn temporaries(&self) -> usize {
        std::fs::read_dir(self.dir.path().join("tmp")).unwrap().count()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.state.join(name)).unwrap_or_default()
    }
}

#[test]
fn a_copy_out_is_docker_cp_of_the_path_to_stdout_alone() {
    let f = Fake::new("running", "");
    let out = f.run(&archive_argv("c1", ArchiveDirection::Out, "/etc/hostname"), b"");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"data", "only the tar is on stdout");
    let calls = f.read("calls");
    assert_eq!(calls.lines().last(), Some("cp c1:/etc/hostname -"), "{calls}");
    assert_eq!(f.temporaries(), 0, "the version's temporary file is removed");
}

#[test]
fn a_copy_in_says_go_once_checked_and_extracts_stdin() {
    let f = Fake::new("running", "root");
    let out = f.run(&archive_argv("c1", ArchiveDirection::In, "/tmp"), b"the tar");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "go\n");
    assert_eq!(f.read("got"), "the tar");
}

#[test]
fn a_daemon_that_archives_outside_the_containers_root_is_declined() {
    // Before the fix for CVE-2018-15664, and engines that are not Docker's.
    for said in [
        "Engine,containerd, 19.03.0",
        "Engine,containerd, 18.09.6",
        "Engine, 17.12.1-ce",
        "Podman Engine, 4.9.3",
        ", 24.0.7",
        "Engine, garbage",
    ] {
        let f = Fake::new("running", "");
        f.version(said);
        let out = f.run(&archive_argv("c1", ArchiveDirection::Out, "/x"), b"");
        assert_eq!(out.status.code(), Some(75), "{said}");
        assert_eq!(out.stdout, b"", "{said}");
        assert!(!f.read("calls").contains("cp "), "{said}: {}", f.read("calls"));
    }
    for said in ["Engine, 19.03.1", "Engine, 18.09.7", "Engine,containerd, 20.10.24+dfsg1", "Engine, 27.3.1"] {
        let f = Fake::new("running", "");
        f.version(said);
        let out = f.run(&archive_argv("c1", ArchiveDirection::Out, "/x"), b"");
        assert_eq!(out.status.code(), Some(0), "{said}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn the_version_decides_before_the_containers_state_though_both_are_asked_at_once() {
    // A daemon that cannot say its version is declined, even for a
    // container it knows; one that is too old is declined even when the
    // container is gone (the decline, not "gone", is what core hears).
    let f = Fake::new("running", "");
    std::fs::write(f.state.join("version-fails"), "").unwrap();
    let out = f.run(&archive_argv("c1", ArchiveDirection::In, "/tmp"), b"tar");
    assert_eq!(out.status.code(), Some(75), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"", "no go: the caller's stream is untouched");
    let f = Fake::new("running", "");
    f.version("Engine, 18.09.6");
    let out = f.run(&archive_argv("gone", ArchiveDirection::Out, "/x"), b"");
    assert_eq!(out.status.code(), Some(75));
    let calls = f.read("calls");
    assert!(calls.contains("version -f") && calls.contains("container inspect"), "{calls}");
    assert!(!calls.contains("cp "), "{calls}");
    // No temporary file to be had: declined, nothing asked, nothing read.
    let f = Fake::new("running", "");
    std::fs::remove_dir(f.dir.path().join("tmp")).unwrap();
    let out = f.run(&archive_argv("c1", ArchiveDirection::In, "/tmp"), b"tar");
    assert_eq!(out.status.code(), Some(75), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"", "no go: the caller's stream is untouched");
    assert_eq!(f.read("calls"), "", "docker was not asked");
    // A good daemon and a gone container: gone.
    let f = Fake::new("running", "");
    let out = f.run(&archive_argv("gone", ArchiveDirection::Out, "/x"), b"");
    assert_eq!(out.status.code(), Some(124));
    assert_eq!(f.temporaries(), 0, "the version's temporary file is removed");
}

#[test]
fn a_copy_in_to_a_box_not_run_as_root_is_declined_with_nothing_read() {
    let f = Fake::new("running", "1000:1000");
    let out = f.run(&archive_argv("c1", ArchiveDirection::In, "/tmp"), b"tar");
    assert_eq!(out.status.code(), Some(76));
    assert_eq!(out.stdout, b"", "no go: the caller's stream is untouched");
    assert!(!f.read("calls").contains("cp "), "{}", f.read("calls"));
    // Out writes nothing in the box, so any user may.
    let out = f.run(&archive_argv("c1", ArchiveDirection::Out, "/x"), b"");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn dockers_refusals_are_told_apart() {
    for (said, code) in [
        ("destination \"c1:/etc/passwd\" must be a directory", 122),
        ("Error response from daemon: extraction point is not a directory", 122),
        ("Error response from daemon: Could not find the file /nope in container c1", 121),
        ("Error response from daemon: No such container: c1", 124),
        ("Error response from daemon: something else", 1),
    ] {
        let f = Fake::new("running", "");
        std::fs::write(f.state.join("cp-error"), format!("{said}\n")).unwrap();
        let out = f.run(&archive_argv("c1", ArchiveDirection::In, "/nope"), b"tar");
        assert_eq!(out.status.code(), Some(code), "{said}");
        if code == 1 {
            assert!(String::from_utf8_lossy(&out.stderr).contains("something else"));
        }
    }
    let f = Fake::new("running", "");
    let out = f.run(&archive_argv("c2", ArchiveDirection::Out, "/x"), b"");
    assert_eq!(out.status.code(), Some(124));
    let f = Fake::new("exited", "");
    let out = f.run(&archive_argv("c1", ArchiveDirection::Out, "/x"), b"");
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn exit_codes_map_to_results_and_errors() {
    assert_eq!(outcome("b", "c", Some(0), None).unwrap(), ArchiveResult::Done);
    assert_eq!(outcome("b", "c", Some(121), None).unwrap(), ArchiveResult::NoSuchPath);
    assert_eq!(outcome("b", "c", Some(122), None).unwrap(), ArchiveResult::NotADirectory);
    assert!(matches!(outcome("b", "c", Some(75), None).unwrap(), ArchiveResult::Declined { .. }));
    assert!(matches!(outcome("b", "c", Some(76), None).unwrap(), ArchiveResult::Declined { .. }));
    use tinybox_sdk::protocol::ErrorCode;
    assert_eq!(outcome("b", "c", Some(125), None).unwrap_err().code, ErrorCode::Failed);
    assert_eq!(outcome("b", "c", Some(124), None).unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(outcome("b", "c", Some(1), None).unwrap_err().code, ErrorCode::Failed);
    assert_eq!(outcome("b", "c", None, Some(9)).unwrap_err().code, ErrorCode::Interrupted);
}

#[test]
fn the_path_and_container_reach_sh_as_arguments_never_as_script() {
    let argv = archive_argv("c1", ArchiveDirection::Out, "/a b/$(x)'");
    assert_eq!(&argv[..2], ["sh", "-c"]);
    assert_eq!(&argv[3..], ["sh", "c1", "out", "/a b/$(x)'"]);
    assert!(!argv[2].contains("$(x)"));
}
